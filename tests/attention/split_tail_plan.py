"""Python mirror of the attention kernel's split-tail schedule (variant bit 11;
csrc/kernels/attention/tile_scheduler.hpp PersistentTileScheduler: make_params, set_split_tail,
get / get_linear, non-causal). Used by the CPU test of the plan and by the GPU test, which needs
to know which output rows the merged pieces wrote. Keep it in step with the C++."""

from __future__ import annotations

# tile_scheduler.hpp kL2SectionBytes (the non-causal plain kernels, the split tail's) and
# kL2SectionBytesWide (causal kernels, plain and hooked).
L2_BUDGET = 4 << 20
L2_BUDGET_WIDE = 24 << 20
BLOCK_M = 128
BLOCK_N = 128


def section_bh(heads: int, batch: int, s_kv: int, d: int, elem_bytes: int = 2,
               budget: int = L2_BUDGET) -> int:
    """(batch, head) pairs per L2 section (make_params with the given budget)."""
    bh_total = heads * batch
    per = budget // (2 * s_kv * d * elem_bytes)
    return max(1, min(per, bh_total))


def split_plan(tiles: int, grid: int, n_blocks: int, max_pieces: int) -> tuple[int, int]:
    """(full_tiles, splits) of set_split_tail; splits 0: no split."""
    if grid <= 0 or tiles <= grid:
        return tiles, 0
    full = tiles // grid * grid
    tail = tiles - full
    if tail == 0:
        return tiles, 0
    splits = min(grid // tail, n_blocks)
    if splits < 2 or tail * splits > max_pieces:
        return tiles, 0
    return full, splits


def get_linear(t: int, m_blocks: int, heads: int, batch: int, sec_bh: int) -> tuple[int, int, int]:
    """Tile t of the linear (non-causal) order: (m_block, head, batch)."""
    bh_total = heads * batch
    per_section = m_blocks * sec_bh
    section = t // per_section
    r = t - section * per_section
    bh0 = section * sec_bh
    sbh = min(sec_bh, bh_total - bh0)
    m = r // sbh
    bh = bh0 + (r - m * sbh)
    return m, bh % heads, bh // heads


def piece_range(j: int, splits: int, n_blocks: int) -> tuple[int, int]:
    """KV blocks [n_lo, n_hi) of piece j (get)."""
    return j * n_blocks // splits, (j + 1) * n_blocks // splits


def tail_tiles(b: int, s: int, s_kv: int, h: int, d: int, sm_count: int) -> list[tuple[int, int, int]]:
    """The (m_block, head, batch) tiles a bf16 non-causal 128x128 call with bit 11 runs as merged
    pieces on sm_count SMs (the glue's workspace holds sm_count pieces); [] when it does not
    split."""
    m_blocks = -(-s // BLOCK_M)
    tiles = m_blocks * h * b
    grid = min(tiles, sm_count)
    full, splits = split_plan(tiles, grid, -(-s_kv // BLOCK_N), sm_count)
    if splits == 0:
        return []
    sec = section_bh(h, b, s_kv, d)
    return [get_linear(t, m_blocks, h, b, sec) for t in range(full, tiles)]
