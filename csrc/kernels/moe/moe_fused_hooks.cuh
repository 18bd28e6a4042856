// Hooks of the MoE fused dispatch + grouped GEMM (protocol: moe_fused_api.h) for the engine's
// packed hooked kernel (kernels/gemm/gemm_kernel_sm90.cuh, HookedGemmSm90<..., kPacked = true>).
//
// Item space of a call, claimed by the side warps of every CTA from one call-tagged counter
// (moe_slots.h kWorkAfter; the kLayout launch of the same call uses kWorkRole / kWorkSend):
//   [0, A)          expansion of M tiles 0 .. A-1 (A = min(first_wave, own tiles): the first
//                   wave of the GEMM, own rows only, starts before any token leaves)
//   [A, A + S)      send of token i - A (S = T tokens) to every other rank it goes to
//   [A + S, S + J)  expansion of M tile i - S (J: every group's M tiles)
// Tiles are numbered as the packed scheduler numbers them (Work::tile): groups in order (own
// groups first), each group's ceil(rows / cluster rows) cluster units of M tiles. A warp's
// claims grow, so a forward-only cursor finds each tile's group.
// No cycle of waits: a rank with tokens claims all its sends (which never wait) before any item
// that waits for a peer; a rank without tokens releases its arrival flag at its first claim; an
// expansion waits only for the ranks that have rows in its expert.
// Registers: the side warps and the producer run on the producer warpgroup's 40.
#pragma once

#include <cstdint>

#include "../comm/group_sync.cuh"
#include "../comm/warp_copy.cuh"
#include "../comm/work_counter.cuh"
#include "moe_fused_api.h"
#include "moe_fused_tiles.h"
#include "moe_slots.h"

namespace mkernel::moe_fused {

struct MoeFusedHooks {
  using Params = MoeFusedParams;
  struct Call {
    uint64_t epoch;
  };
  static constexpr bool kWaitsForA = true;
  static constexpr bool kWaitsForWork = true;  // producer_wait_work (per-M-tile flags)
  static constexpr bool kSignalsTiles = false;
  static constexpr bool kDeferTileDone = false;
  static constexpr bool kSideRole = true;
  static constexpr comm::FailPath kFail = comm::FailPath::kInline;  // as the fused ops' 40 regs

  struct SideStorage {};

  CUTLASS_DEVICE static bool trigger_early(Params const&) { return false; }
  CUTLASS_DEVICE static Call call_begin(Params const& p) { return {comm::op_begin(p.group)}; }
  CUTLASS_DEVICE static void call_end(Params const& p, Call const& call) {
    comm::op_end(p.group, call.epoch);
  }
  CUTLASS_DEVICE static void producer_wait(Params const&, Call const&, int, int) {}
  CUTLASS_DEVICE static void tile_done(Params const&, Call const&, int, int, int, int) {}
  CUTLASS_DEVICE static void tile_stored(Params const&, Call const&, int, int, int, int) {}
  template <class Sched>
  CUTLASS_DEVICE static void tail_role(Params const&, Call const&, int,
                                       typename Sched::Params const&, int*, SideStorage&, void*,
                                       int) {}

  // Before the producer's TMA loads of a tile's A rows: the tile's expansion has landed. A
  // cluster unit's padding tile (no rows of its group) loads rows nobody stores: no wait.
  template <class Work>
  CUTLASS_DEVICE static void producer_wait_work(Params const& p, Call const& call, Work const& w,
                                                int block_m) {
    if (w.m_block * block_m >= w.rows) return;
    const comm::GroupDevice& g = p.group;
    // A derived wait (the side warps' expansion waits for the peers' arrival flags), bounded
    // longer, so that when a peer is gone the expansion's direct wait names it first.
    comm::wait_geq<kFail>(g.flags[g.rank] + p.tile_flag_base + w.tile, call.epoch,
                          2 * g.timeout_ns + 1000000000ull, g.diag, g.group_id, g.rank,
                          comm::WaitSite{comm::kOpMoeDispatch, comm::kWaitARows, -1, w.tile});
    comm::fence_proxy_async_global();  // the TMA loads that follow must see the rows
  }

  // One warp's copy (comm/warp_copy.cuh). kCoherent: through L2 (the token areas, written by
  // peers through their mappings during the call); else the non-coherent path (x, read-only for
  // the call).
  template <bool kCoherent>
  CUTLASS_DEVICE static void copy_row(uint8_t* dst, const uint8_t* src, int64_t bytes, int lane) {
    comm::warp_copy<kCoherent>(dst, src, bytes, lane);
  }

  // Send item: token t to every other rank it goes to (slot u >= 0 there), into that rank's
  // token area at [this rank][u]. One copy per destination (the second and later read x from
  // L2); the destinations loop is warp-uniform (the slot is shuffled from lane d).
  CUTLASS_DEVICE static void send_token(Params const& p, int64_t t, int lane) {
    const comm::GroupDevice& g = p.group;
    const int32_t u_lane = lane < g.world ? __ldg(p.slot + t * g.world + lane) : -1;
    const uint32_t dests = __ballot_sync(0xffffffffu, u_lane >= 0 && lane != g.rank);
    const uint8_t* src = p.x + t * p.row_bytes;
    const int64_t slot_base = static_cast<int64_t>(g.rank) * p.max_tokens;
#pragma unroll 1
    for (uint32_t m = dests; m != 0; m &= m - 1) {
      const int d = __ffs(m) - 1;
      const int32_t u = __shfl_sync(0xffffffffu, u_lane, d);
      copy_row<false>(g.data[d] + p.tokens_area + (slot_base + u) * p.row_bytes, src, p.row_bytes,
                      lane);
    }
  }

  template <class Sched>
  CUTLASS_DEVICE static int group_rows(typename Sched::Params const& sp, int i) {
    return __ldg(sp.group_end + i) - __ldg(sp.group_begin + i);
  }
  template <class Sched>
  CUTLASS_DEVICE static int group_tiles_of(typename Sched::Params const& sp, int i) {
    return group_tiles<Sched::kBlockM, Sched::kClusterM>(group_rows<Sched>(sp, i));
  }

  // Expansion item: tile j's rows into the packed A, then its flag (lane 0 of the warp).
  template <class Sched>
  CUTLASS_DEVICE static void expand_tile(Params const& p, uint64_t e,
                                         typename Sched::Params const& sp, int j, TileWalk& cur,
                                         int lane) {
    const comm::GroupDevice& g = p.group;
    int r0 = 0, r1 = 0, group = 0;
    if (lane == 0) {
      seek<Sched::kBlockM, Sched::kClusterM>(cur, j,
                                             [&](int i) { return group_rows<Sched>(sp, i); });
      const int begin = __ldg(sp.group_begin + cur.group), end = __ldg(sp.group_end + cur.group);
      r0 = begin + (j - cur.first) * Sched::kBlockM;
      r1 = min(r0 + Sched::kBlockM, end);
      group = cur.group;
    }
    r0 = __shfl_sync(0xffffffffu, r0, 0);
    r1 = __shfl_sync(0xffffffffu, r1, 0);
    group = __shfl_sync(0xffffffffu, group, 0);
    if (r0 >= r1) return;  // a cluster unit's padding tile: the producer does not wait for it
    if (group >= p.e_local) {
      // Rows from the ranks before this one (even peer groups) or after it (odd): lane s waits
      // for source s's arrival flag (every token it sends here has landed, its row maps too) if
      // s has rows in this expert — never for a rank that sent this expert nothing (two ranks
      // without tokens would otherwise wait for each other's flags, review of session 28).
      const int le = (group - p.e_local) >> 1;
      const bool before = ((group - p.e_local) & 1) == 0;
      if (lane < g.world && (before ? lane < g.rank : lane > g.rank) &&
          __ldg(p.recv_counts + lane * p.e_local + le) > 0) {
        comm::wait_geq<kFail>(g, g.flags[g.rank] + moe_ep::kArrive + lane, e,
                              comm::WaitSite{comm::kOpMoeDispatch, comm::kWaitPeerFlag, lane,
                                             static_cast<int32_t>(moe_ep::kArrive + lane)});
      }
      __syncwarp();  // the acquires precede every lane's loads
    }
    const int32_t* row_map = reinterpret_cast<const int32_t*>(g.data[g.rank] + p.row_map);
    const uint8_t* area = g.data[g.rank] + p.tokens_area;
#pragma unroll 1
    for (int r = r0; r < r1; r += 32) {
      const int32_t q_lane = r + lane < r1 ? __ldcg(row_map + r + lane) : 0;
      const int rows = min(32, r1 - r);
#pragma unroll 1
      for (int i = 0; i < rows; ++i) {
        const int32_t q = __shfl_sync(0xffffffffu, q_lane, i);
        const uint8_t* src = q < 0 ? p.x + static_cast<int64_t>(-1 - q) * p.row_bytes
                                   : area + static_cast<int64_t>(q) * p.row_bytes;
        copy_row<true>(p.recv_x + static_cast<int64_t>(r + i) * p.row_bytes, src, p.row_bytes,
                       lane);
      }
    }
    __syncwarp();  // every lane's stores of the tile precede the flag
    if (lane == 0) comm::signal(g, g.rank, p.tile_flag_base + j, e);
  }

  // The SIDE role: side thread t in [0, 96) of every CTA (module comment).
  template <class Sched>
  CUTLASS_DEVICE static void side_role(Params const& p, Call const& call, int t,
                                       typename Sched::Params const& sp, int*, SideStorage&) {
    const comm::GroupDevice& g = p.group;
    const int lane = t % 32;
    const uint64_t e = call.epoch;
    // Every group's tiles and the own groups' (the first E_l): a reduction over the lanes.
    int tiles = 0, own = 0;
#pragma unroll 1
    for (int i = lane; i < sp.batches; i += 32) {
      const int n = group_tiles_of<Sched>(sp, i);
      tiles += n;
      own += i < p.e_local ? n : 0;
    }
    tiles = __reduce_add_sync(0xffffffffu, tiles);
    own = __reduce_add_sync(0xffffffffu, own);
    const int first = min(p.first_wave, own);
    const int64_t sends = p.tokens;
    const int64_t items = sends + tiles;
    TileWalk cur;
#pragma unroll 1
    for (;;) {
      int64_t i = lane == 0 ? comm::claim_tagged(g.flags[g.rank] + moe_ep::kWorkAfter, e) : 0;
      i = __shfl_sync(0xffffffffu, i, 0);
      // No token to send: the first claim (exactly one returns 0) releases the arrival flag
      // before anything of this rank can wait (a release after the waiting items could be held
      // up by them).
      if (sends == 0 && i == 0 && lane == 0) {
        for (int d = 0; d < g.world; ++d) comm::signal(g, d, moe_ep::kArrive + g.rank, e);
      }
      if (i >= items) break;
      if (i < first) {
        expand_tile<Sched>(p, e, sp, static_cast<int>(i), cur, lane);
      } else if (i < first + sends) {
        send_token(p, i - first, lane);
        __syncwarp();  // every lane's stores of the token precede the count
        if (lane == 0) {
          __threadfence_system();
          if (comm::claim_tagged(g.flags[g.rank] + moe_ep::kWorkDone, e) == sends - 1) {
            // The last token of this rank: every item's stores (observed through the counter)
            // before the arrival flags.
            __threadfence_system();
            for (int d = 0; d < g.world; ++d) comm::signal(g, d, moe_ep::kArrive + g.rank, e);
          }
        }
      } else {
        expand_tile<Sched>(p, e, sp, static_cast<int>(i - sends), cur, lane);
      }
    }
    // Before the CTA ends the call: every rank's tokens for this rank have landed, so no peer
    // still writes into this rank's token area once its next call may (one warp per CTA).
    if (t < 32) {
      if (lane < g.world && lane != g.rank) {
        comm::wait_geq<kFail>(g, g.flags[g.rank] + moe_ep::kArrive + lane, e,
                              comm::WaitSite{comm::kOpMoeDispatch, comm::kWaitPeerFlag, lane,
                                             static_cast<int32_t>(moe_ep::kArrive + lane)});
      }
      __syncwarp();
    }
  }
};

}  // namespace mkernel::moe_fused
