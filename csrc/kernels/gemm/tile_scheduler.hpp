// Persistent tile scheduler of the hooked GEMM kernel.
//
// Work is handed out in cluster units (ClusterM x ClusterN tiles that share
// multicast operands): unit u -> (um, un) walks `swizzle` rows of units at a
// time, down M within the band first when rasterizing along N (consecutive
// clusters share a B tile) or the transpose. An optional device array
// `m_order` permutes the M units: the fused ops list local rows first and then
// rows in the order they arrive from peers (hook (c) of the engine).
//
// Grouped (MoE) problems are batches of equal-shape GEMMs (L = experts) whose
// rows are valid only up to a per-batch count read on the device: a unit whose
// first row is past its batch's count is skipped by every role alike.
//
// Packed groups (kPacked, MoE as torch._grouped_mm lays it out): A and D hold
// every expert's rows back to back, group_end[e] (device, cumulative) ends
// expert e's rows. The units of expert e are its ceil(rows_e / cluster rows) x
// units_n cluster tiles, numbered expert after expert, so no unit is wasted
// on padding however skewed the routing; each CTA finds its unit's expert
// with a cursor that only moves forward (units are visited in order).
//
// Split-K: with `splits` > 1 every cluster unit is cut into `splits` slices of
// the K loop. Unit index u -> (tile unit u / splits, slice u % splits), so the
// slices of one tile go to neighbouring clusters and run at the same time; the
// last slice to finish reduces the others (see split_k_reduce.cuh). Small-M
// (decode) GEMMs are memory-bound on B: without splits only tiles_m x tiles_n
// SMs would stream it.
#pragma once

#include <cute/tensor.hpp>

namespace mkernel::gemm {

template <class TileShape, class ClusterShape, bool kPacked_ = false>
struct PersistentTileScheduler {
  static constexpr bool kPacked = kPacked_;
  static constexpr int kBlockM = cute::size<0>(TileShape{});
  static constexpr int kBlockN = cute::size<1>(TileShape{});
  static constexpr int kBlockK = cute::size<2>(TileShape{});
  static constexpr int kClusterM = cute::size<0>(ClusterShape{});
  static constexpr int kClusterN = cute::size<1>(ClusterShape{});

  struct Params {
    int units_m = 0;  // cluster units along M (tiles padded to a multiple of kClusterM)
    int units_n = 0;
    int swizzle = 1;  // unit rows per band
    bool along_n = true;
    const int* m_order = nullptr;  // [units_m] permutation, or null for 0..units_m-1
    int batches = 1;                 // L: independent GEMMs of the same shape
    const int* batch_rows = nullptr; // [batches] valid rows of each, or null (all M rows)
    int splits = 1;                  // K slices per tile (split-K)
    int k_tiles = 1;                 // k-blocks of the whole K loop
    const int* group_end = nullptr;  // kPacked: [batches] cumulative row ends of the experts
    // kPacked row segments (gemm::Problem::group_begin): group i = rows [group_begin[i],
    // group_end[i]) with B matrix b_of(i); null: the groups lie back to back.
    const int* group_begin = nullptr;
    int group_b_div = 1;
    int group_b_head = 0;  // groups [0, head) take B matrix i (gemm::Problem::group_b_head)
  };

  // kPacked: the B matrix (expert) of group i.
  CUTLASS_HOST_DEVICE static int b_of(Params const& p, int i) {
    return i < p.group_b_head ? i : (i - p.group_b_head) / p.group_b_div;
  }

  // kPacked: where the walk over the experts stands (one per thread, moves forward only).
  struct Cursor {
    int expert = 0;
    int first_unit = 0;  // the expert's first unit index
    int row_begin = 0;   // the expert's first row in A and D
  };

  struct Work {
    int m_block;  // tile coordinates (kPacked: m_block counts from the group's first row)
    int n_block;
    int batch;
    int unit;
    bool valid;  // false: no work left for this CTA
    bool skip;   // the unit's rows are all past its batch's count: nothing to do
    int split;    // K slice of this work, in [0, splits)
    int k_begin;  // first k-block of the slice
    int k_count;  // k-blocks of the slice (>= 1)
    int tile;     // this CTA's tile, numbered over the padded grid (split-K counters); kPacked:
                  // the M tile's index over every group's M tiles (groups in order, each padded
                  // to whole cluster units): a per-M-tile flag index (the MoE fused dispatch)
    int row_offset;  // kPacked: first row of the batch (expert) in A and D; else 0
    int rows;        // kPacked: rows of the expert (else the padded M, unused)
  };

  // kPacked: m is the rows of all experts together and group_end is required;
  // total_units() is then an upper bound (every expert may end in a partial unit).
  static Params make_params(int m, int n, int k, int swizzle, bool along_n, const int* m_order,
                            int batches = 1, const int* batch_rows = nullptr, int splits = 1,
                            const int* group_end = nullptr, const int* group_begin = nullptr,
                            int group_b_div = 1, int group_b_head = 0) {
    Params p;
    const int tiles_m = (m + kBlockM - 1) / kBlockM;
    const int tiles_n = (n + kBlockN - 1) / kBlockN;
    p.units_m = (tiles_m + kClusterM - 1) / kClusterM;
    p.units_n = (tiles_n + kClusterN - 1) / kClusterN;
    p.swizzle = swizzle < 1 ? 1 : swizzle;
    p.along_n = along_n;
    p.m_order = m_order;
    p.batches = batches < 1 ? 1 : batches;
    p.batch_rows = batch_rows;
    p.k_tiles = (k + kBlockK - 1) / kBlockK;
    p.splits = splits < 1 ? 1 : (splits > p.k_tiles ? p.k_tiles : splits);
    p.group_end = group_end;
    p.group_begin = group_begin;
    p.group_b_div = group_b_div < 1 ? 1 : group_b_div;
    p.group_b_head = group_b_head < 0 ? 0 : group_b_head;
    if (kPacked) p.splits = 1;
    return p;
  }

  static int total_units(Params const& p) {
    if (kPacked) return (p.units_m + p.batches) * p.units_n;
    return p.units_m * p.units_n * p.batches * p.splits;
  }
  // Tiles of the padded grid (every CTA's tile has a distinct number below this).
  static int padded_tiles(Params const& p) {
    return p.units_m * kClusterM * p.units_n * kClusterN * p.batches;
  }

  // Bands of `swizzle` unit rows of the major dimension; inside a band walk
  // the band's rows first so neighbours share the other operand's tile.
  CUTLASS_DEVICE static void band_coord(Params const& p, int unit, int units_m, int* um, int* un) {
    const int major = p.along_n ? units_m : p.units_n;
    const int minor = p.along_n ? p.units_n : units_m;
    const int band_size = p.swizzle * minor;
    const int band = unit / band_size;
    const int within = unit - band * band_size;
    const int rows = min(p.swizzle, major - band * p.swizzle);
    const int r = band * p.swizzle + within % rows;
    const int c = within / rows;
    *um = p.along_n ? r : c;
    *un = p.along_n ? c : r;
  }

  CUTLASS_DEVICE static Work get(Params const& p, int unit_index, Cursor& cursor) {
    constexpr int kUnitRows = kBlockM * kClusterM;
    const int rank_m = static_cast<int>(blockIdx.x) % kClusterM;
    const int rank_n = static_cast<int>(blockIdx.y) % kClusterN;
    if constexpr (kPacked) {
      // Experts with no rows have no units; the loop passes them by. (Row segments: each
      // group's first row from group_begin; the MoE dispatch writes both arrays in a kernel
      // that completes before this one starts, on the same stream.)
      int rows = 0;
      while (cursor.expert < p.batches) {
        if (p.group_begin != nullptr) cursor.row_begin = __ldg(p.group_begin + cursor.expert);
        rows = __ldg(p.group_end + cursor.expert) - cursor.row_begin;
        rows = rows > 0 ? rows : 0;
        const int units = (rows + kUnitRows - 1) / kUnitRows * p.units_n;
        if (unit_index < cursor.first_unit + units) break;
        cursor.first_unit += units;
        cursor.row_begin += rows;
        ++cursor.expert;
      }
      if (cursor.expert >= p.batches) return {0, 0, 0, unit_index, false, false, 0, 0, 0, 0, 0, 0};
      int um, un;
      band_coord(p, unit_index - cursor.first_unit, (rows + kUnitRows - 1) / kUnitRows, &um, &un);
      const int m_block = um * kClusterM + rank_m, n_block = un * kClusterN + rank_n;
      // (The groups before this one hold first_unit / units_n cluster rows of M tiles.)
      const int tile_m = cursor.first_unit / p.units_n * kClusterM + m_block;
      return {m_block,   n_block, b_of(p, cursor.expert), unit_index, true, false, 0, 0,
              p.k_tiles, tile_m,  cursor.row_begin,       rows};
    } else {
      const int per_batch = p.units_m * p.units_n;
      if (unit_index >= per_batch * p.batches * p.splits) {
        return {0, 0, 0, unit_index, false, false, 0, 0, 0, 0, 0, 0};
      }
      const int split = unit_index % p.splits;
      const int tile_unit = unit_index / p.splits;
      // Balanced slices: the first k_tiles % splits slices take one k-block more.
      const int k_base = p.k_tiles / p.splits, k_extra = p.k_tiles % p.splits;
      const int k_begin = split * k_base + min(split, k_extra);
      const int k_count = k_base + (split < k_extra ? 1 : 0);
      const int batch = tile_unit / per_batch;
      int um, un;
      band_coord(p, tile_unit - batch * per_batch, p.units_m, &um, &un);
      if (p.m_order != nullptr) um = p.m_order[um];
      const bool skip = p.batch_rows != nullptr && um * kUnitRows >= __ldg(p.batch_rows + batch);
      const int m_block = um * kClusterM + rank_m, n_block = un * kClusterN + rank_n;
      const int tile =
          (batch * p.units_m * kClusterM + m_block) * (p.units_n * kClusterN) + n_block;
      return {m_block, n_block, batch, unit_index, true, skip, split, k_begin, k_count, tile, 0,
              p.units_m * kUnitRows};
    }
  }

  CUTLASS_DEVICE static int first_unit() { return static_cast<int>(blockIdx.x) / kClusterM; }
  CUTLASS_DEVICE static int unit_stride() { return static_cast<int>(gridDim.x) / kClusterM; }
};

}  // namespace mkernel::gemm
