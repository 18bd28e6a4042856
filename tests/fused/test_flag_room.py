"""The group's flag region against the fused ops' flag need, on the host (issue 12): at W = 4 the
square M=16384 gemm_ar row of bench_fused.py --set issue ran unfused with "more output tiles than
the group's flag slots" (two-shot on 128x256 tiles: 8192 tile flags + 8192 x 8 slab flags = 73728
slots, past the 65023 of a 1 << 16-word region). tests/fused/flag_room_check.cpp computes, with
the header functions fused_common.cpp reduce_fits uses (fused_params.h reduce_flag_slots /
reduce_slab_rows) and the op range of group_device.h (kOpFlagRoom), the need of every fused
config's tiles (fused_dispatch.cu fused_supported, which MKERNEL_FUSED_CONFIG can pin whatever
the shape model picks) one-shot and two-shot, for every gemm_rs / gemm_ar row of bench_fused.py's
issue and default sets (--full) at W = 2, 4, 8, plus the families' bound M = N = 32768; its
static_asserts check the layout (the op range below the top area's call-tagged MoE and fused work
counters). ag_gemm's chunk flags (ag_gemm.cpp: chunks of <= 128 KiB, widened only when W x chunks
would not fit) must fit without widening. Skipped without g++."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

from tests import source_module

from tests.host_check import build_check

ROOT = Path(__file__).resolve().parents[2]
WORLDS = (2, 4, 8)
OLD_ROOM = (1 << 16) - 16 * 32 - 1  # the 1 << 16-word region's op room before the fix


def bench_fused():
    return source_module.load("benchmarks/bench_fused.py", "bench_fused_flag_room")


def fused_tiles() -> dict[str, tuple[int, int]]:
    """Config name -> (block_m, block_n) of every config fused_dispatch.cu fused_supported lists."""
    src = (ROOT / "csrc" / "kernels" / "fused" / "fused_dispatch.cu").read_text()
    body = re.search(r"bool fused_supported\(gemm::ConfigId id\) \{(.*?)\n\}", src, re.S)
    assert body, "fused_supported not found in fused_dispatch.cu"
    enums = re.findall(r"ConfigId::(k\w+)", body.group(1))
    inc = (ROOT / "csrc" / "kernels" / "gemm" / "configs.inc").read_text()
    names = dict(re.findall(r"MKERNEL_GEMM_CONFIG\((k\w+),\s*\d+,\s*\"([^\"]+)\"\)", inc))
    out = {}
    for e in enums:
        name = names[e]
        m = re.match(r"[a-z]+_(\d+)x(\d+)", name)
        assert m, f"no tile shape in config name {name}"
        out[name] = (int(m.group(1)), int(m.group(2)))
    assert len(out) >= 4, out  # 128x256 c2x1 / c1x1, 128x128 c2x1, 256x128 c2x1 at least
    return out


def rows(world: int) -> list[tuple[str, str, int, int, int]]:
    bf = bench_fused()
    return bf.issue_shapes(world, full=True) + bf.shapes(world, full=True)


def run_check(exe: Path, tiles, shapes) -> tuple[int, dict, str]:
    args = [str(exe), "-v"]
    for bm, bn in sorted(set(tiles)):
        args += ["-c", f"{bm}x{bn}"]
    for m, n in sorted(set(shapes)):
        args += ["-s", f"{m}x{n}"]
    run = subprocess.run(args, capture_output=True, text=True, timeout=60)
    lines = run.stdout.strip().splitlines()
    room = int(lines[0].split()[1])
    need = {}
    for ln in lines:
        if ln.startswith("need "):
            bm, bn, m, n, two, got, _ = map(int, ln.split()[1:])
            need[(bm, bn, m, n, bool(two))] = got
    return room, need, run.stdout if run.returncode == 0 and lines[-1] == "OK" else \
        "FAILED\n" + run.stdout + run.stderr


def test_issue_shapes_fit_the_flag_room(tmp_path: Path) -> None:
    exe = build_check(Path(__file__).parent / "flag_room_check.cpp", tmp_path,
                      flags=("-O1", "-Wall", "-Wextra", "-Werror"))
    tiles = fused_tiles()
    shapes = {(32768, 32768)}  # the square families' bound (gemm_ar: M is every rank's rows)
    for w in WORLDS:
        shapes |= {(m, n) for op, _, m, _, n in rows(w) if op in ("gemm_rs", "gemm_ar")}
    room, need, out = run_check(exe, tiles.values(), shapes)
    assert not out.startswith("FAILED"), out
    assert len(need) == len(set(tiles.values())) * len(shapes) * 2
    assert max(need.values()) <= room
    # The defect's row is among the cases, over the old room and within the new one.
    defect = need[(128, 256, 16384, 16384, True)]
    assert defect == 73728 and defect > OLD_ROOM and defect <= room
    # The worst case of the families: M = N = 32768 two-shot on the smallest fused tile.
    assert max(need.values()) == need[(128, 128, 32768, 32768, True)] == 327680


def test_check_flags_an_overflow(tmp_path: Path) -> None:
    """The check fails a shape past the room (so the test above can fail): 128x128 tiles at
    M = N = 65536, two-shot, need 1310720 slots."""
    exe = build_check(Path(__file__).parent / "flag_room_check.cpp", tmp_path)
    room, need, out = run_check(exe, [(128, 128)], [(65536, 65536)])
    assert out.startswith("FAILED") and "two-shot" in out and need[(128, 128, 65536, 65536, True)] > room


def test_ag_gemm_chunks_fit_without_widening(tmp_path: Path) -> None:
    """ag_gemm.cpp: chunk_rows = 128 halved while chunk_rows x K x 2 bytes > 128 KiB; W x
    ceil(rows / chunk_rows) chunk flags must fit the op room (otherwise chunks are widened)."""
    exe = build_check(Path(__file__).parent / "flag_room_check.cpp", tmp_path)
    room, _, out = run_check(exe, [(128, 256)], [(128, 256)])
    assert not out.startswith("FAILED"), out
    for w in WORLDS:
        for op, label, m, k, _ in rows(w):
            if op != "ag_gemm":
                continue
            chunk = 128
            while chunk > 1 and chunk * k * 2 > (128 << 10):
                chunk //= 2
            assert w * -(-m // chunk) <= room, (w, label)
