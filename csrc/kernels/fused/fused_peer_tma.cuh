// ag_gemm with TMA loads straight from the peers' memory (MKERNEL_FUSED_AG_PEER_TMA=1, opt-in;
// issue 12 item 1's second option). A hook policy over FusedHooks for the engine's hooked kernel
// (kernels/gemm/gemm_kernel_sm90.cuh, Hooks::kPeerTmaA): the kernel carries one TMA descriptor
// per source rank (Params::peer_a[s]) and loads a tile whose rows are all rank s's through it.
//
//   source s == rank : the caller's x itself (a plain local tensor: no copy, no wait).
//   source s != rank : slot s of PEER s's gathered buffer G_s = data[s] (its symmetric region,
//                      IPC-mapped here) — the peer's own rows, which the peer's COPY role stages
//                      there from its x in chunks (a local copy), releasing flag (s, chunk) = e
//                      at every same-node rank. The producer's hook (a) waits for those flags,
//                      as for the pushed chunks of the copy path.
// So each rank's side warps move m * K elements once, locally, instead of W times (one local +
// W - 1 pushes into the peers' buffers), and the peers' rows cross to the GEMM by TMA.
//
// Why x is not read by the peers directly: it is the caller's tensor, not IPC-exported (and
// exporting / opening a handle per call costs milliseconds); the own slot of the symmetric
// region is. Lifetime: the caller's x is read only by this rank's kernel (own tiles, copy role),
// so it may be reused as soon as the kernel is done on the stream: no exit barrier is needed for
// x. Slot `rank` of G is read by the peers during call e and rewritten only in a later call's
// copy role, after that call's entry barrier (every peer has entered it, so finished call e:
// its stream ran call e's kernel to the end) — the argument that already guards gemm_rs's
// partials, which the peers read in place. Other users of the data region (the fused ops, the
// substrate's collectives) also write it only after their own entry barrier.
//
// Requires m % block_m == 0 (every tile's rows come from one source; the host checks it and
// otherwise runs the copy path) and no gathered output (return_gathered: G must hold every rank's
// rows, so the host runs the copy path). Reduce modes: the same as FusedHooks (a_source = -1).
#pragma once

#include "fused_hooks.cuh"

namespace mkernel::fused {

struct FusedPeerTmaHooks : FusedHooks {
  static constexpr bool kPeerTmaA = true;
  // Descriptors in the kernel's parameters (~3 KiB at 8: CUDA 12.1+ takes up to 32 KiB).
  static constexpr int kPeerSources = 8;

  // Sources whose descriptors the host filled (the same-node world).
  CUTLASS_DEVICE static int a_sources(Params const& p) {
    return p.mode == kModeAllGather ? min(p.group.world, kPeerSources) : 0;
  }
  // The source rank of tile row m_block, or -1 (the kernel's own A: reduce modes, rows past M).
  CUTLASS_DEVICE static int a_source(Params const& p, int m_block, int block_m) {
    const int row0 = m_block * block_m;
    if (p.mode != kModeAllGather || row0 >= p.m_total) return -1;
    return row0 / p.m_local;
  }
  // The GEMM row of source s's first row.
  CUTLASS_DEVICE static int a_source_row0(Params const& p, int s) { return s * p.m_local; }

  // Hook (a): own rows come from x (nothing to wait for); a peer's rows wait for its staged
  // chunks' flags, as in FusedHooks (then the proxy fence before the TMA loads).
  CUTLASS_DEVICE static void producer_wait(Params const& p, Call& call, int m_block, int block_m) {
    if (p.mode == kModeAllGather) {
      const int row0 = m_block * block_m;
      if (row0 >= p.m_total || row0 / p.m_local == p.group.rank) return;
    }
    FusedHooks::producer_wait(p, call, m_block, block_m);
  }

  // The STAGE role (ag; side thread t in [0, 96)): after the entry barrier (no peer still reads
  // this slot for its previous call), copy x chunk by chunk into slot `rank` of this rank's own
  // G (a local copy), releasing flag (rank, chunk) = e at every other same-node rank. Chunks are
  // claimed from the epoch-tagged counter (the warps that run take them).
  CUTLASS_DEVICE static void stage_role(Params const& p, Call const& call, int t) {
    const comm::GroupDevice& g = p.group;
    if (t == 0) {
      comm::entry_barrier<kFail>(g, call.epoch, p.op, p.signature);
      stamp(p, kTlEntered);
    }
    side_sync();
    const int lane = t % 32;
#pragma unroll 1
    for (;;) {
      int c = lane == 0 ? claim_item(p, call.epoch) : 0;
      c = __shfl_sync(0xffffffffu, c, 0);
      if (c >= p.chunks) break;
      const int row0 = c * p.chunk_rows;
      const int rows = min(p.chunk_rows, p.m_local - row0);
      copy_rows(g.data[g.rank] + (static_cast<int64_t>(g.rank) * p.m_local + row0) * p.row_bytes,
                p.x + static_cast<int64_t>(row0) * p.row_bytes, rows * p.row_bytes, lane);
      __syncwarp();  // every lane's stores of the chunk precede the flags
      if (lane == 0) {
#pragma unroll 1
        for (int j = 1; j < g.world; ++j) {
          const int peer = (g.rank + j) % g.world;
          if (g.flags[peer] != nullptr) {
            comm::signal(g, peer, p.flag_base + g.rank * p.chunks + c, call.epoch);
          }
        }
      }
    }
  }

  template <class Sched>
  CUTLASS_DEVICE static void side_role(Params const& p, Call const& call, int t,
                                       typename Sched::Params const& sp, int* counter,
                                       SideStorage& st) {
    if (p.mode == kModeAllGather) {
      stage_role(p, call, t);
      if (t == 0) stamp(p, kTlSideDone);
      return;
    }
    FusedHooks::template side_role<Sched>(p, call, t, sp, counter, st);
  }
};

}  // namespace mkernel::fused
