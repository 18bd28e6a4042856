"""The split-tail schedule of variant bit 11 (tile_scheduler.hpp set_split_tail / get), on the
CPU through its Python mirror (split_tail_plan.py): the last, partial round's tiles are cut into
pieces that cover each tile's KV blocks exactly once, every piece non-empty, at most one piece
per CTA, so the kernel's makespan drops from R + 1 tile times to R + (one piece)."""

from __future__ import annotations

import pytest

from .split_tail_plan import get_linear, piece_range, section_bh, split_plan


@pytest.mark.parametrize("tiles,grid,n_blocks", [
    (4096, 132, 32), (4096, 132, 64), (4096, 132, 128),  # the bench shapes (S 4k/8k/16k)
    (720, 132, 6), (297, 132, 8), (136, 132, 33), (136, 132, 1), (264, 132, 8), (100, 132, 8),
    (133, 132, 2), (4096, 66, 32), (7, 3, 5),
])
def test_pieces_cover_each_tail_tile_once(tiles: int, grid: int, n_blocks: int) -> None:
    full, splits = split_plan(tiles, grid, n_blocks, max_pieces=grid)
    tail = tiles - full
    if splits == 0:
        assert full == tiles
        assert tiles <= grid or tiles % grid == 0 or min(grid // (tiles % grid), n_blocks) < 2
        return
    assert full % grid == 0 and 0 < tail < grid
    assert 2 <= splits <= n_blocks and tail * splits <= grid  # one piece per CTA
    items = full + tail * splits
    per_cta = [len(range(c, items, grid)) for c in range(grid)]
    assert max(per_cta) == full // grid + 1  # R whole tiles, then at most one piece
    for i in range(tail):
        covered = []
        for j in range(splits):
            lo, hi = piece_range(j, splits, n_blocks)
            assert hi > lo, "empty piece"
            covered += range(lo, hi)
        assert covered == list(range(n_blocks))
    # the longest piece: ceil(n / splits) blocks, vs a whole tile's n without the split
    longest = max(piece_range(j, splits, n_blocks)[1] - piece_range(j, splits, n_blocks)[0]
                  for j in range(splits))
    assert longest == -(-n_blocks // splits)


@pytest.mark.parametrize("b,s,s_kv,h", [(4, 4096, 4096, 32), (2, 1800, 700, 24), (1, 4100, 1000, 9),
                                         (1, 1000, 4097, 17)])
def test_linear_order_is_a_bijection(b: int, s: int, s_kv: int, h: int) -> None:
    m_blocks = -(-s // 128)
    sec = section_bh(h, b, s_kv, 128)
    seen = {get_linear(t, m_blocks, h, b, sec) for t in range(m_blocks * h * b)}
    assert seen == {(m, hh, bb) for m in range(m_blocks) for hh in range(h) for bb in range(b)}


def test_the_cpp_schedule_matches_the_mirror(tmp_path) -> None:
    """tile_scheduler.hpp's make_params / set_split_tail / get_linear, compiled on the host with
    g++, give the plans and tail tiles of the Python mirror (which the GPU test relies on)."""
    import shutil
    import subprocess
    from pathlib import Path

    from .split_tail_plan import tail_tiles
    from .test_attention_bwd_layouts import CCCL, ROOT, _cutlass_include

    cutlass = _cutlass_include()
    gxx = shutil.which("g++")
    if cutlass is None or gxx is None or not (CCCL / "cccl").is_dir():
        pytest.skip("needs g++, the nvidia-cutlass headers and build/cuda-toolchain's cccl")
    exe = tmp_path / "split_tail_plan_check"
    subprocess.run([gxx, "-std=c++17", "-O1", f"-I{cutlass}", f"-I{CCCL / 'cccl'}", f"-I{CCCL}",
                    f"-I{ROOT / 'csrc'}", str(Path(__file__).parent / "split_tail_plan_check.cpp"),
                    "-o", str(exe)], check=True, capture_output=True, timeout=300)
    shapes = [(4, 4096, 4096, 32, 132), (2, 8192, 8192, 32, 132), (1, 16384, 16384, 32, 132),
              (2, 1800, 700, 24, 132), (1, 4100, 1000, 9, 132), (1, 1000, 4097, 17, 132),
              (1, 512, 512, 66, 132), (2, 700, 100, 24, 132), (3, 300, 5000, 7, 16), (1, 128, 128, 1, 132)]
    run = subprocess.run([str(exe)], input="".join(f"{' '.join(map(str, x))}\n" for x in shapes),
                         capture_output=True, text=True, timeout=60, check=True)
    blocks = run.stdout.split("plan ")[1:]
    assert len(blocks) == len(shapes)
    for (b, s, s_kv, h, sms), block in zip(shapes, blocks):
        lines = block.strip().splitlines()
        full, splits, items = map(int, lines[0].split())
        tiles = -(-s // 128) * h * b
        want_full, want_splits = split_plan(tiles, min(tiles, sms), -(-s_kv // 128), sms)
        assert (full, splits) == (want_full, want_splits), (b, s, s_kv, h, sms)
        assert items == (full + (tiles - full) * splits if splits else tiles)
        got = [tuple(map(int, ln.split()[1:])) for ln in lines[1:]]
        assert got == tail_tiles(b, s, s_kv, h, 128, sms), (b, s, s_kv, h, sms)
