// The MoE fused dispatch's M-tile numbering, as its side warps walk it (moe_fused_hooks.cuh) —
// the packed scheduler's Work::tile (gemm/tile_scheduler.hpp): groups in order, group i holding
// ceil(rows_i / (block_m * cluster_m)) cluster units of cluster_m M tiles, tile m_block of group
// i numbered (tiles of the groups before i) + m_block. Host and device (the host check
// tests/moe/fused_tiles_check.cpp compares it with the scheduler's own numbering).
#pragma once

#include <cstdint>

#if defined(__CUDACC__)
#define MKERNEL_FUSED_TILES_HD __host__ __device__ __forceinline__
#else
#define MKERNEL_FUSED_TILES_HD inline
#endif

namespace mkernel::moe_fused {

// M tiles of a group of `rows` rows (rows <= 0: none).
template <int kBlockM, int kClusterM>
MKERNEL_FUSED_TILES_HD int group_tiles(int rows) {
  constexpr int kUnitRows = kBlockM * kClusterM;
  return rows > 0 ? (rows + kUnitRows - 1) / kUnitRows * kClusterM : 0;
}

// A forward-only walk to the group of tile j (j only grows between calls).
struct TileWalk {
  int group = 0;
  int first = 0;  // the group's first tile
};

// Moves `w` to the group holding tile j (which must be below the tiles of all groups);
// rows_of(i): group i's rows (end - begin).
template <int kBlockM, int kClusterM, class RowsOf>
MKERNEL_FUSED_TILES_HD void seek(TileWalk& w, int j, RowsOf rows_of) {
  for (;;) {
    const int n = group_tiles<kBlockM, kClusterM>(rows_of(w.group));
    if (j < w.first + n) return;
    w.first += n;
    ++w.group;
  }
}

// The flags (M tiles) the fused GEMM may number for rows_out packed rows in 3 E_l groups on
// 128-row tiles in clusters of cluster_m along M: each group ends in at most one partial cluster
// unit. The kernel's tile_flag_base + this must stay within the op slots (comm::kOpFlagRoom).
inline int64_t tile_flags(int64_t rows_out, int e_local, int cluster_m = 1) {
  return (rows_out + 127) / 128 + 3 * static_cast<int64_t>(e_local) * cluster_m;
}

}  // namespace mkernel::moe_fused
