// Host API of the MoE dispatch + grouped GEMM as one persistent kernel (issue 14, item 2): the
// tokens travel and the grouped GEMM consumes each local expert's rows as they are placed, in the
// same launch. Plain C++ (no torch); the glue is csrc/moe_ep.cpp (MKERNEL_MOE_FUSED=1, one node,
// capacity 0).
//
// A call (number e) is two launches on the caller's stream:
//   1. the dispatch kernel's kLayout phase (moe_ep_api.h): entry barrier, counts exchange, every
//      row's place (the choices' routes, the owners' row maps), counts / recv_counts and the
//      row segments `segments3`: group le < E_l = this rank's own rows of local expert le,
//      groups E_l + 2 le / E_l + 2 le + 1 = its rows from the ranks before / after this one;
//   2. the packed grouped GEMM over those 3 E_l groups (own rows first: they need no transfer),
//      on the engine's hooked kernel with MoeFusedHooks (moe_fused_hooks.cuh):
//        - SIDE role (the producer warpgroup's three idle warps of every CTA) claims items from a
//          call-tagged counter: the first `first_wave` M tiles' row expansions, then this rank's
//          tokens to the other ranks (each token once per destination rank: the dispatch's token
//          areas), then every other M tile's expansion. An expansion copies the tile's rows into
//          the packed A (`recv_x`: x for own rows, the token area for a peer's, after the
//          peers' arrival flags of its group) and releases the tile's flag = e here;
//        - the producer waits for its tile's flag before the TMA loads (a per-M-tile flag:
//          Work::tile of the packed scheduler);
//        - the CTA finishing the last send item releases kArrive + rank = e at every rank.
//      No cycle of waits: send items never wait and precede every item that waits for a peer,
//      so every rank's sends are claimed by running warps before any warp waits for them; a rank
//      without tokens releases its arrival flag at its first claim; an expansion waits only for
//      the ranks with rows in its expert (recv_counts).
//      The grid: fused_grid / co_resident_grid as the fused GEMM ops (a rank's CTAs wait for its
//      peers' side warps, so the ranks' grids must fit on a shared GPU together).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "../comm/group_device.h"
#include "../gemm/gemm_api.h"
#include "moe_fused_tiles.h"  // tile_flags

namespace mkernel::moe_fused {

struct MoeFusedParams {
  comm::GroupDevice group;
  const uint8_t* x = nullptr;     // [tokens, row_bytes] this rank's tokens
  int64_t tokens = 0;             // T of this rank
  int64_t row_bytes = 0;          // H * element size (a multiple of 16)
  int64_t max_tokens = 0;         // the token areas' rows per source
  uint64_t tokens_area = 0;       // moe_ep::DispatchLayout::tokens (every rank's data region)
  uint64_t row_map = 0;           // moe_ep::DispatchLayout::row_map
  const int32_t* slot = nullptr;  // [T, W] u of token t at rank d, -1 if not sent there
  const int32_t* recv_counts = nullptr;  // [W, E_l] rows of each source per local expert (kLayout)
  uint8_t* recv_x = nullptr;             // [rows_out, row_bytes] the packed A (the GEMM's input)
  uint32_t tile_flag_base = 0;           // per-M-tile flags in this rank's flag region (op slots)
  int e_local = 1;                       // E_l: the groups are 3 E_l
  int first_wave = 0;                    // own M tiles expanded before the sends (item order)
};

// The CTAs of the fused kernel's persistent grid on l.sm_count SMs (the first wave's size).
int grid_ctas(gemm::DType dtype, const gemm::Launch& l);

// The fused launch (2. above): p is the packed problem (a = recv_x, b = w1 [E_l, N, K], d = out,
// m = rows_out, group_begin = segments3, group_end = segments3 + 3 E_l, batches = E_l,
// groups_per_b = 2, group_b_head = E_l), on ping_128x128_c1x2 (the packed MoE GEMM's fastest
// measured config).
cudaError_t run(const gemm::Problem& p, const gemm::Launch& l, const MoeFusedParams& hooks,
                const char** reason);

}  // namespace mkernel::moe_fused
