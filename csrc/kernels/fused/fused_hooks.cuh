// Hooks of the fused GEMM + communication kernels (ag_gemm, gemm_rs, gemm_ar): one policy for
// the engine's hooked kernel (kernels/gemm/gemm_kernel_sm90.cuh) whose runtime `mode` picks the
// op, so one kernel per (tile config, dtype) serves all three.
//
// Every launch is one call of the group: its number e = *epoch + 1 (comm::op_begin) is read by
// every thread at the start; the last CTA stores it back (comm::op_end). Flags are never reset:
// a flag "arrived in call e" holds e (older calls left smaller values).
//
// ag_gemm (kModeAllGather), out = allgather(x) @ w.T on one node:
//   the GEMM's A is this rank's gathered buffer G = data[rank] as [world * m, K] (slot s holds
//   rank s's rows). COPY role (the producer warpgroup's three idle warps of every CTA): after
//   the entry barrier (every same-node peer has entered call e, so nobody still reads its
//   previous call's G), push this rank's x in chunks of `chunk_rows` rows into slot `rank` of
//   every same-node peer's G (this rank's own first, then rank+1, rank+2, ...: the ranks' first
//   pushes go to distinct peers), releasing arrival flag (rank, chunk) = e at that peer after
//   each chunk. Hook (a) producer_wait: before loading the A rows of a tile, wait for the
//   (source rank, chunk) flags covering those rows in this rank's own flag region.
#pragma once

#include <cstdint>

#include "../comm/group_sync.cuh"
#include "fused_params.h"
#include "cutlass/arch/barrier.h"

namespace mkernel::fused {

struct FusedHooks {
  using Params = FusedParams;
  struct Call {
    uint64_t epoch;
  };
  static constexpr bool kWaitsForA = true;
  static constexpr bool kSignalsTiles = false;
  static constexpr bool kSideRole = true;
  static constexpr int kSideThreads = 3 * 32;
  // Named barrier of the side warps (user id; the kernel's ping-pong consumers use 0 and 1).
  static constexpr uint32_t kSideBarrier = 2;

  CUTLASS_DEVICE static Call call_begin(Params const& p) { return {comm::op_begin(p.group)}; }

  CUTLASS_DEVICE static void side_sync() {
    cutlass::arch::NamedBarrier::sync(kSideThreads, kSideBarrier);
  }

  // Copies `bytes` (a multiple of 16) from src to dst with the side threads, four 16-byte
  // loads in flight per thread. src is read-only for the call (non-coherent loads).
  CUTLASS_DEVICE static void copy_rows(uint8_t* dst, const uint8_t* src, int64_t bytes, int t) {
    const int64_t n = bytes / 16;
    const uint4* s = reinterpret_cast<const uint4*>(src);
    uint4* d = reinterpret_cast<uint4*>(dst);
    constexpr int kUnroll = 4;
    for (int64_t i = t; i < n; i += kUnroll * kSideThreads) {
      uint4 v[kUnroll];
      CUTLASS_PRAGMA_UNROLL
      for (int u = 0; u < kUnroll; ++u) {
        const int64_t j = i + u * kSideThreads;
        if (j < n) v[u] = __ldg(s + j);
      }
      CUTLASS_PRAGMA_UNROLL
      for (int u = 0; u < kUnroll; ++u) {
        const int64_t j = i + u * kSideThreads;
        if (j < n) d[j] = v[u];
      }
    }
  }

  // The COPY role (ag_gemm): side thread t in [0, 96) of every CTA.
  CUTLASS_DEVICE static void side_role(Params const& p, Call const& call, int t) {
    const comm::GroupDevice& g = p.group;
    if (t == 0) comm::entry_barrier(g, call.epoch, p.op, p.signature);
    side_sync();
    const int cta = static_cast<int>(blockIdx.x + blockIdx.y * gridDim.x);
    const int ctas = static_cast<int>(gridDim.x * gridDim.y);
    const int items = g.world * p.chunks;
    for (int i = cta; i < items; i += ctas) {
      const int j = i / p.chunks, c = i - j * p.chunks;
      const int peer = (g.rank + j) % g.world;
      uint8_t* region = g.data[peer];
      if (region == nullptr) continue;  // another node: the host never fuses that case
      const int row0 = c * p.chunk_rows;
      const int rows = min(p.chunk_rows, p.m_local - row0);
      copy_rows(region + (static_cast<int64_t>(g.rank) * p.m_local + row0) * p.row_bytes,
                p.x + static_cast<int64_t>(row0) * p.row_bytes, rows * p.row_bytes, t);
      side_sync();  // every side thread's stores of the chunk precede the flag
      if (t == 0) comm::signal(g, peer, p.flag_base + g.rank * p.chunks + c, call.epoch);
    }
  }

  // Hook (a), one lane of the producer warp: the rows [row0, row1] of G come from ranks
  // row0 / m_local .. row1 / m_local; wait for each chunk flag covering them.
  CUTLASS_DEVICE static void producer_wait(Params const& p, Call const& call, int m_block,
                                           int block_m) {
    const int row0 = m_block * block_m;
    if (row0 >= p.m_total) return;
    const int row1 = min(row0 + block_m, p.m_total) - 1;
    const comm::GroupDevice& g = p.group;
    const uint64_t* flags = g.flags[g.rank];
    for (int s = row0 / p.m_local; s <= row1 / p.m_local; ++s) {
      const int first = max(row0 - s * p.m_local, 0) / p.chunk_rows;
      const int last = (min(row1 - s * p.m_local, p.m_local - 1)) / p.chunk_rows;
      for (int c = first; c <= last; ++c) {
        comm::wait_geq(g, flags + p.flag_base + s * p.chunks + c, call.epoch,
                       comm::WaitSite{p.op, comm::kWaitPeerFlag, s, c});
      }
    }
    comm::fence_proxy_async_global();  // the TMA loads that follow must see those rows
  }

  CUTLASS_DEVICE static void tile_done(Params const&, Call const&, int, int, int, int) {}
  CUTLASS_DEVICE static void tile_stored(Params const&, Call const&, int, int, int, int) {}

  // One thread per CTA after the CTA's last access of group memory.
  CUTLASS_DEVICE static void call_end(Params const& p, Call const& call) {
    comm::op_end(p.group, call.epoch);
  }
};

}  // namespace mkernel::fused
