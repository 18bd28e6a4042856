// Communication hooks of the hooked GEMM kernel, as compile-time policies:
//  (a) producer_wait: before the producer warp loads the A rows of a tile,
//      wait until every flag guarding those rows holds >= a sequence number
//      (the rows have arrived from a peer);
//  (b) tile_done / tile_stored: after a tile's epilogue store has reached
//      global memory (TMA store / register stores), release a per-tile flag
//      (a send role or a peer may consume the tile).
// A policy may also keep per-launch state (`Call`, read once by every thread
// at the start: the fused ops' device epoch; producer_wait may update its
// thread's copy), give the producer warpgroup's
// three idle warps a `side_role` (the fused ops' copy / reduce roles; it gets
// the scheduler, so it can walk its own CTA's tiles in the GEMM's order), give the
// consumer warpgroups a `tail_role` after their last tile (both get a per-CTA
// shared-memory work counter, zero at the start, to claim items from, and the
// policy's own `SideStorage` in the kernel's shared memory; the tail role also
// the mainloop's shared-memory ring, free once the CTA's last tile is done), and end
// the launch with `call_end` (one thread per CTA after a CTA-wide barrier).
// NoHooks compiles all of it away, so the plain GEMM pays nothing.
#pragma once

#include <cstdint>

#include "../comm/group_sync.cuh"

namespace mkernel::gemm {

struct NoCall {};

// The per-launch part of hooks that have none: no call state, no side or tail role, nothing at
// the launch's end (NoHooks and FlagHooks derive it; Params is the derived hooks' own).
struct NoCallRoles {
  using Call = NoCall;
  static constexpr bool kSideRole = false;  // side_role + call_end (and the final barrier)
  template <class Params>
  CUTLASS_DEVICE static Call call_begin(Params const&) {
    return {};
  }
  struct SideStorage {};
  template <class Sched, class Params>
  CUTLASS_DEVICE static void side_role(Params const&, Call const&, int,
                                       typename Sched::Params const&, int*, SideStorage&) {}
  template <class Sched, class Params>
  CUTLASS_DEVICE static void tail_role(Params const&, Call const&, int,
                                       typename Sched::Params const&, int*, SideStorage&, void*,
                                       int) {}
  template <class Params>
  CUTLASS_DEVICE static void call_end(Params const&, Call const&) {}
};

struct NoHooks : NoCallRoles {
  struct Params {};
  static constexpr bool kWaitsForA = false;
  static constexpr bool kSignalsTiles = false;
  static constexpr bool kDeferTileDone = false;  // see FlagHooks
  CUTLASS_DEVICE static void producer_wait(Params const&, Call const&, int, int) {}
  CUTLASS_DEVICE static void tile_done(Params const&, Call const&, int, int, int, int) {}
  CUTLASS_DEVICE static void tile_stored(Params const&, Call const&, int, int, int, int) {}
};

// The host-facing description of the flag hooks (also in gemm_api.h).
struct FlagHookArgs {
  const uint64_t* a_ready = nullptr;  // [ceil(M / rows_per_flag)] flags guarding A's rows
  int rows_per_flag = 0;
  uint64_t a_ready_value = 0;            // wait until flag >= this
  uint64_t* tile_done = nullptr;         // [tiles_m * tiles_n] flags, row-major, or null
  uint64_t tile_done_value = 0;          // value released into tile_done[m * tiles_n + n]
  uint64_t timeout_ns = 0;               // bound of each wait (%globaltimer ns)
  comm::WaitDiagnostic* diag = nullptr;  // host-mapped; filled on a timeout
};

struct FlagHooks : NoCallRoles {
  struct Params : FlagHookArgs {
    int m = 0;        // problem rows (tiles past M wait for and signal nothing)
    int tiles_n = 0;  // for tile_done's index
  };
  static constexpr bool kWaitsForA = true;
  static constexpr bool kSignalsTiles = true;
  // Cooperative consumers: release a tile's flag right after its epilogue (false), or after the
  // next tile's mainloop, when its stores are written anyway (true: no stall per tile, the
  // flag comes one tile later).
  static constexpr bool kDeferTileDone = false;

  // Called by one lane of the producer warp.
  CUTLASS_DEVICE static void producer_wait(Params const& p, Call const&, int m_block,
                                           int block_m) {
    if (p.a_ready == nullptr) return;
    const int row0 = m_block * block_m;
    if (row0 >= p.m) return;
    const int row1 = min(row0 + block_m, p.m) - 1;
    for (int f = row0 / p.rows_per_flag; f <= row1 / p.rows_per_flag; ++f) {
      comm::wait_geq(p.a_ready + f, p.a_ready_value, p.timeout_ns, p.diag, -1, -1,
                     comm::WaitSite{comm::kOpGemmHooked, comm::kWaitARows, -1, f});
    }
    comm::fence_proxy_async_global();  // the TMA loads that follow must see those rows
  }

  // Called by every consumer thread after the tile's epilogue store; the
  // threads that issued TMA stores wait for the writes, then one releases.
  CUTLASS_DEVICE static void tile_done(Params const& p, Call const&, int m_block, int n_block,
                                       int block_m, int mma_thread_idx) {
    if (p.tile_done == nullptr || m_block * block_m >= p.m) return;
    if (mma_thread_idx < 32) {
      comm::tma_store_wait_all_writes();
      __syncwarp();
      if (mma_thread_idx == 0) {
        comm::fence_proxy_async_global();
        __threadfence_system();
        comm::st_release_sys(p.tile_done + static_cast<int64_t>(m_block) * p.tiles_n + n_block,
                             p.tile_done_value);
      }
    }
  }

  // The same signal after a tile stored from registers (the ping-pong
  // consumers): called by every thread of the storing warpgroup after a
  // barrier of that warpgroup, so each thread's stores precede the release
  // (which is cumulative over them); no TMA store to wait for.
  CUTLASS_DEVICE static void tile_stored(Params const& p, Call const&, int m_block, int n_block,
                                         int block_m, int warpgroup_thread_idx) {
    if (p.tile_done == nullptr || m_block * block_m >= p.m || warpgroup_thread_idx != 0) return;
    __threadfence_system();
    comm::st_release_sys(p.tile_done + static_cast<int64_t>(m_block) * p.tiles_n + n_block,
                         p.tile_done_value);
  }
};

}  // namespace mkernel::gemm
