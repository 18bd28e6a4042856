// Persistent tile scheduler of the attention kernel: each CTA walks tiles
// t = blockIdx.x, blockIdx.x + gridDim.x, ... of one linear order.
//
// The order groups (batch, head) pairs into L2 sections (a section's K/V fits in L2 with room,
// so the CTAs that run at the same time share it), and walks the query blocks of a section
// from the last to the first: under causal masking the last query blocks see the most keys,
// so the longest tiles go first and the short ones fill the tail of the schedule (LPT).
#pragma once

#include "cutlass/cutlass.h"

namespace mkernel::attention {

// The default L2 section budget (PersistentTileScheduler::make_params): the K/V bytes of the
// (batch, head) pairs whose tiles the grid runs together. Session 51 (H100, S = 4096, b = 4, h =
// 32, non-causal; results/ncu/h100_20261207_engine_fwd_l2_*.txt): with 24 MiB (12 heads' K/V,
// every one read by the 132 CTAs at once) the L2 hit rate was 77% and the kernel read 1.06 GB
// from DRAM for 0.54 GB of Q, K and V (cuDNN: 91%, 0.40 GB); 8 MiB: 88%, 0.48 GB. At the board's
// power cap every DRAM byte is power the SMs' clock gives up: sustained, 4 MiB ran 1.04x the 24
// MiB order at 4096 and 8192 keys non-causal (attention_power.py). A budget below one head's K/V
// makes one-head sections, so the grid's working set is then the heads its ~132 concurrent tiles
// span. Causal kernels keep kL2SectionBytesWide: their claimed longest-first order measured 1.8%
// slower at 8192 keys with 4 MiB sections (the same at 16384; 8 MiB level with 24, session 52).
// The hooked non-causal kernels (ring attention) follow the plain ones since session 52: 4 MiB
// ran 1.07-1.16x the 24 MiB order in the fused ring and its ceiling (W = 2 / 4 ranks under MPS,
// where the ranks share one L2, so part of that is the sharing; bench_ring_attention.py l2s4).
inline constexpr long long kL2SectionBytes = 4ll << 20;
inline constexpr long long kL2SectionBytesWide = 24ll << 20;

struct WorkTile {
  int m_block;
  int head;
  int batch;
  bool valid;
  // A piece of a split tail tile (kSplitTail schedulers only): KV blocks [n_lo, n_hi) of the
  // tile, partial result to workspace slot `slot`; slot -1: the whole tile.
  int n_lo = 0;
  int n_hi = 0;
  int slot = -1;
  // The own-shard-first split (kPhases schedulers only): 0 the whole tile; 1 its first phase,
  // KV blocks [n_lo, n_hi) = [phase_split, end), which leaves its running softmax state to
  // workspace slot `slot` (unless the second phase walks no block: then it ends the tile as a
  // whole one); 2 its second phase, blocks [0, phase_split), which resumes from that state.
  int phase = 0;
};

// kPhases (the hooked kernels with claimed tiles: ring attention's whole mode), on when
// Params::phase_split > 0: items t < tiles are the first phases of the linear order's tiles,
// items tiles + t their second phases (WorkTile::phase). The engine walks key blocks last to
// first and the ring puts the rank's own shard on top, so the first phases need only the own
// shard: every tile's share of it is computed before any tile waits for a peer's (the whole
// mode's first wave otherwise waits for the first remote chunks of its batch, the whole remote
// shard at batch 1). A second phase continues its first's walk bit for bit (the state saved and
// restored unrounded); it waits for that first phase, claimed `tiles` items earlier.
//
// kZigzagPairs (the hooked causal kernels: ring attention's zigzag ring mode) builds in a second
// order, on when Params::zz_pairs is set (see get_zigzag).
//
// kSplitTail (variant bit 11, non-causal plain kernels): every tile costs the same, so with
// `tiles` = R * grid + tail (0 < tail < grid) the last round runs `tail` tiles on `tail` CTAs
// while the others idle: 4096 tiles on 132 CTAs (S = 4k/8k/16k at 16k tokens, 32 heads) take
// 32 rounds for 31.03 rounds of work, 3% of the kernel. With set_split_tail, items
// t >= full_tiles = R * grid are pieces: piece j of tail tile i = item full_tiles + i * splits
// + j covers KV blocks [j n / splits, (j + 1) n / splits) of tile full_tiles + i (splits =
// min(grid / tail, n) pieces per tile, each >= 1 block), one piece per CTA in the last round.
template <bool kLongestFirst, bool kZigzagPairs = false, bool kSplitTail = false,
          bool kPhases = false>
struct PersistentTileScheduler {
  struct Params {
    int m_blocks;    // query blocks per (batch, head)
    int heads;       // query heads
    int bh_total;    // batch * heads
    int section_bh;  // (batch, head) pairs per L2 section
    int tiles;       // m_blocks * bh_total
    int zz_pairs = 0;  // zigzag ring mode, m_blocks even: the pair order of get_zigzag
    // kSplitTail (set_split_tail): tiles below full_tiles run whole; splits <= 1: no split.
    int full_tiles = 0;
    int splits = 0;
    int n_blocks = 0;  // KV blocks per tile
    // kPhases: the first KV block of a tile's first phase (0: no split, whole tiles).
    int phase_split = 0;
  };

  // The split plan for a grid of `grid` CTAs and n_blocks KV blocks per tile, at most
  // max_pieces pieces (the workspace). Returns the number of pieces (0: no split).
  static int set_split_tail(Params& p, int grid, int n_blocks, int max_pieces) {
    p.full_tiles = p.tiles;
    p.splits = 0;
    p.n_blocks = n_blocks;
    if (grid <= 0 || p.tiles <= grid) return 0;  // one round or less: nothing idles after it
    const int full = p.tiles / grid * grid;
    const int tail = p.tiles - full;
    if (tail == 0) return 0;
    int splits = grid / tail;
    splits = splits < n_blocks ? splits : n_blocks;
    if (splits < 2 || tail * splits > max_pieces) return 0;
    if (static_cast<long long>(splits) * n_blocks >= (1ll << 31)) return 0;  // get's 32-bit math
    p.full_tiles = full;
    p.splits = splits;
    return tail * splits;
  }
  // Items the CTAs walk (whole tiles and pieces).
  CUTLASS_HOST_DEVICE static int items(Params const& p) {
    if constexpr (kPhases) {
      if (p.phase_split > 0) return 2 * p.tiles;
    }
    if constexpr (kSplitTail) {
      if (p.splits > 1) return p.full_tiles + (p.tiles - p.full_tiles) * p.splits;
    }
    return p.tiles;
  }

  // bytes_kv_per_head: K + V bytes of one (batch, head); l2_budget: the bytes of K/V a section
  // may hold (kL2SectionBytes by default, well inside the 50 MiB L2; Problem::l2_section_mb).
  static Params make_params(int m_blocks, int heads, int batch, long long bytes_kv_per_head,
                            long long l2_budget = kL2SectionBytes) {
    Params p;
    p.m_blocks = m_blocks;
    p.heads = heads;
    p.bh_total = heads * batch;
    long long per = bytes_kv_per_head > 0 ? l2_budget / bytes_kv_per_head : p.bh_total;
    p.section_bh = static_cast<int>(per < 1 ? 1 : (per > p.bh_total ? p.bh_total : per));
    p.tiles = m_blocks * p.bh_total;
    return p;
  }

  CUTLASS_HOST_DEVICE static int grid_size(Params const& p, int sm_count) {
    return p.tiles < sm_count ? p.tiles : sm_count;
  }

  CUTLASS_DEVICE static int first_tile() { return static_cast<int>(blockIdx.x); }
  CUTLASS_DEVICE static int tile_stride() { return static_cast<int>(gridDim.x); }

  CUTLASS_DEVICE static WorkTile get(Params const& p, int t) {
    if constexpr (kPhases) {
      if (p.phase_split > 0) {
        const bool second = t >= p.tiles;
        const int tile = second ? t - p.tiles : t;
        WorkTile w = get_linear(p, tile);  // invalid past 2 * tiles
        w.phase = second ? 2 : 1;
        w.slot = tile;
        w.n_lo = second ? 0 : p.phase_split;
        w.n_hi = second ? p.phase_split : 0x7fffffff;
        return w;
      }
    }
    if constexpr (kZigzagPairs) {
      if (p.zz_pairs) return get_zigzag(p, t);
    }
    if constexpr (kSplitTail) {
      if (p.splits > 1 && t >= p.full_tiles) {
        const int u = t - p.full_tiles;
        const int i = u / p.splits;
        if (p.full_tiles + i >= p.tiles) return {0, 0, 0, false};
        const int j = u - i * p.splits;
        WorkTile w = get_linear(p, p.full_tiles + i);
        // 32-bit: splits <= the grid, so (j + 1) * n_blocks < 2^31 up to 16M keys per head on
        // 132 SMs (a 64-bit division here was a subroutine with a spill in the consumers).
        w.n_lo = j * p.n_blocks / p.splits;
        w.n_hi = (j + 1) * p.n_blocks / p.splits;
        w.slot = u;
        return w;
      }
    }
    return get_linear(p, t);
  }

  // Tile t of the linear order (L2 sections, longest first when kLongestFirst).
  CUTLASS_HOST_DEVICE static WorkTile get_linear(Params const& p, int t) {
    if (t >= p.tiles) return {0, 0, 0, false};
    const int per_section = p.m_blocks * p.section_bh;
    const int section = t / per_section;
    const int r = t - section * per_section;
    const int bh0 = section * p.section_bh;
    const int rest = p.bh_total - bh0;
    const int sec_bh = p.section_bh < rest ? p.section_bh : rest;
    int m = r / sec_bh;
    const int bh = bh0 + (r - m * sec_bh);
    if constexpr (kLongestFirst) m = p.m_blocks - 1 - m;
    return {m, bh % p.heads, bh / p.heads, true};
  }

  // Zigzag ring mode: a rank's query tiles come from two global chunks, and in-chunk tile i of
  // the first sees (chunk r) * C + i + 1 key blocks while tile C-1-i of the second sees
  // (chunk 2W-1-r) * C + C - i (C = blocks per chunk): each such pair costs the same, (2W-1) C +
  // C + 1 blocks, but the tiles of a pair differ up to 2W-fold, so the linear order's round
  // robin left some CTAs ~1.3x the mean work (W = 2, rank 0; session 6's measured miss). Here each CTA runs whole pairs: its
  // k-th tile is member k % 2 (the long one first) of pair (k / 2) * G + c (G = the grid, c
  // its CTA), pairs enumerated in the same L2 sections as the linear order; the last, partial
  // round of pairs hands out its tiles one per CTA instead (long ones first), so no CTA gets
  // more than one pair above the rest.
  CUTLASS_DEVICE static WorkTile get_zigzag(Params const& p, int t) {
    const int grid = static_cast<int>(gridDim.x);
    const int k = t / grid;
    const int c = t - k * grid;
    const int pairs = p.tiles / 2;
    const int rounds = pairs / grid;  // full rounds: one pair for every CTA
    int j, member;
    if ((k >> 1) < rounds) {
      j = (k >> 1) * grid + c;
      member = k & 1;
    } else {
      const int rest = pairs - rounds * grid;
      const int u = (k - 2 * rounds) * grid + c;
      if (u >= 2 * rest) return {0, 0, 0, false};
      member = u < rest ? 0 : 1;
      j = rounds * grid + (u < rest ? u : u - rest);
    }
    const int half = p.m_blocks / 2;
    const int per_section = half * p.section_bh;
    const int section = j / per_section;
    const int r = j - section * per_section;
    const int bh0 = section * p.section_bh;
    const int rest_bh = p.bh_total - bh0;
    const int sec_bh = p.section_bh < rest_bh ? p.section_bh : rest_bh;
    const int i = r / sec_bh;
    const int bh = bh0 + (r - i * sec_bh);
    const int m = member == 0 ? p.m_blocks - 1 - i : i;  // second-half tile C-1-i, then i
    return {m, bh % p.heads, bh / p.heads, true};
  }
};

}  // namespace mkernel::attention
