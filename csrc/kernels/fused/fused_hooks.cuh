// Hooks of the fused GEMM + communication kernels (ag_gemm, gemm_rs, gemm_ar): one policy for
// the engine's hooked kernel (kernels/gemm/gemm_kernel_sm90.cuh) whose runtime `mode` picks the
// op, so one kernel per (tile config, dtype) serves all three.
//
// Every launch is one call of the group: its number e = *epoch + 1 (comm::op_begin) is read by
// every thread at the start; the last CTA stores it back (comm::op_end). Flags are never reset:
// a flag "arrived in call e" holds e (older calls, of any op, left smaller values).
//
// kModeAllGather (ag_gemm, out = allgather(x) @ w.T on one node):
//   the GEMM's A is this rank's gathered buffer G = data[rank] as [world * m, K] (slot s holds
//   rank s's rows). COPY role (the producer warpgroup's three idle warps of every CTA): after
//   the entry barrier (every same-node peer has entered call e, so none still reads its
//   previous call's G), push this rank's x in chunks of `chunk_rows` rows into slot `rank` of
//   every same-node peer's G (this rank's own first, then rank+1, rank+2, ...: the ranks' first
//   pushes go to distinct peers), releasing arrival flag (rank, chunk) = e at that peer after
//   each chunk. Hook (a) producer_wait: before loading the A rows of a tile, wait for the
//   (source rank, chunk) flags covering those rows in this rank's own flag region.
//
// kModeReduce (gemm_rs, gemm_ar one-shot):
//   the GEMM's D is this rank's partial P = data[rank] as [m, n]. Before its first load the
//   producer passes the entry barrier (every peer has finished call e-1, so none still reads
//   the P this call overwrites). Hook (b) tile_done releases tile flag (tm, tn) = e at this rank
//   once the tile is in memory. REDUCE role (the idle producer warps): for every tile of the
//   rows this rank reduces (its own M/W rows for gemm_rs, all rows for gemm_ar), wait for the
//   tile's flag at every same-node rank (polled through the IPC mapping), sum the W partials in
//   fp32 in rank order 0..W-1 (the same bits on every rank and run) and store the rounded sum.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "../comm/group_sync.cuh"
#include "cutlass/arch/barrier.h"
#include "fused_params.h"

namespace mkernel::fused {

struct FusedHooks {
  using Params = FusedParams;
  struct Call {
    uint64_t epoch;
    bool entered;  // kModeReduce, producer lane: the entry barrier is behind it
  };
  static constexpr bool kWaitsForA = true;
  static constexpr bool kSignalsTiles = true;
  static constexpr bool kSideRole = true;
  static constexpr int kSideThreads = 3 * 32;
  // Named barrier of the side warps (user id; the kernel's ping-pong consumers use 0 and 1).
  static constexpr uint32_t kSideBarrier = 2;

  CUTLASS_DEVICE static Call call_begin(Params const& p) {
    return {comm::op_begin(p.group), false};
  }

  CUTLASS_DEVICE static void side_sync() {
    cutlass::arch::NamedBarrier::sync(kSideThreads, kSideBarrier);
  }

  CUTLASS_DEVICE static int cta_id() { return static_cast<int>(blockIdx.x + blockIdx.y * gridDim.x); }
  CUTLASS_DEVICE static int cta_count() { return static_cast<int>(gridDim.x * gridDim.y); }

  // ---- kModeAllGather -------------------------------------------------------------------

  // Copies `bytes` (a multiple of 16, < 32 GiB) from src to dst with the 32 lanes of one warp,
  // four 16-byte loads in flight per lane. src is read-only for the call (non-coherent loads).
  // Written for the side warps' 40 registers: 32-bit counts, pointers that step (ptxas spilled
  // the hoisted 64-bit addresses of an indexed version).
  CUTLASS_DEVICE static void copy_rows(uint8_t* dst, const uint8_t* src, int64_t bytes, int lane) {
    const int n = static_cast<int>(bytes / 16);
    const uint4* s = reinterpret_cast<const uint4*>(src) + lane;
    uint4* d = reinterpret_cast<uint4*>(dst) + lane;
    int i = lane;
#pragma unroll 1
    for (; i + 96 < n; i += 128, s += 128, d += 128) {
      const uint4 a = __ldg(s), b = __ldg(s + 32), c = __ldg(s + 64), e = __ldg(s + 96);
      d[0] = a;
      d[32] = b;
      d[64] = c;
      d[96] = e;
    }
#pragma unroll 1
    for (; i < n; i += 32, s += 32, d += 32) *d = __ldg(s);
  }

  // The next copy item of this call: a work counter in this rank's flag region, tagged with
  // the call number in its high half (the first claimant of a call restarts it), so items go
  // to the warps that run — none waits for a CTA that is not resident yet.
  CUTLASS_DEVICE static int claim_item(Params const& p, uint64_t epoch) {
    auto* counter = reinterpret_cast<unsigned long long*>(p.group.flags[p.group.rank] +
                                                          p.counter_slot);
    const unsigned long long tag = (epoch & 0xffffffffull) << 32;
    for (;;) {
      const unsigned long long seen = *reinterpret_cast<volatile unsigned long long*>(counter);
      if ((seen & ~0xffffffffull) != tag) {  // still the previous call's count
        if (atomicCAS(counter, seen, tag | 1ull) == seen) return 0;
        continue;
      }
      return static_cast<int>(atomicAdd(counter, 1ull) & 0xffffffffull);
    }
  }

  // The COPY role: side thread t in [0, 96) of every CTA; each warp claims items (rank j's
  // chunk c pushed to peer rank + j: this rank's own slot first) until none is left.
  CUTLASS_DEVICE static void copy_role(Params const& p, Call const& call, int t) {
    const comm::GroupDevice& g = p.group;
    if (t == 0) comm::entry_barrier(g, call.epoch, p.op, p.signature);
    side_sync();
    const int lane = t % 32;
    const int items = g.world * p.chunks;
#pragma unroll 1
    for (;;) {
      int i = lane == 0 ? claim_item(p, call.epoch) : 0;
      i = __shfl_sync(0xffffffffu, i, 0);
      if (i >= items) break;
      const int j = i / p.chunks, c = i - j * p.chunks;
      const int peer = (g.rank + j) % g.world;
      uint8_t* region = g.data[peer];
      if (region == nullptr) continue;  // another node: the host never fuses that case
      const int row0 = c * p.chunk_rows;
      const int rows = min(p.chunk_rows, p.m_local - row0);
      copy_rows(region + (static_cast<int64_t>(g.rank) * p.m_local + row0) * p.row_bytes,
                p.x + static_cast<int64_t>(row0) * p.row_bytes, rows * p.row_bytes, lane);
      __syncwarp();  // every lane's stores of the chunk precede the flag
      if (lane == 0) comm::signal(g, peer, p.flag_base + g.rank * p.chunks + c, call.epoch);
    }
  }

  // Rows [row0, row1] of G come from ranks row0 / m_local .. row1 / m_local: wait for each
  // chunk flag covering them.
  CUTLASS_DEVICE static void wait_gathered_rows(Params const& p, Call const& call, int row0,
                                                int row1) {
    const comm::GroupDevice& g = p.group;
    const uint64_t* flags = g.flags[g.rank];
    for (int s = row0 / p.m_local; s <= row1 / p.m_local; ++s) {
      const int first = max(row0 - s * p.m_local, 0) / p.chunk_rows;
      const int last = min(row1 - s * p.m_local, p.m_local - 1) / p.chunk_rows;
      for (int c = first; c <= last; ++c) {
        comm::wait_geq(g, flags + p.flag_base + s * p.chunks + c, call.epoch,
                       comm::WaitSite{p.op, comm::kWaitPeerFlag, s, c});
      }
    }
  }

  // ---- kModeReduce ----------------------------------------------------------------------

  // Sums rows [r0, r1) x columns [c0, c1) of every rank's partial (rank order) into out, four
  // elements (8 bytes) per step: the side warps run on the producer's 40 registers.
  template <class T>
  CUTLASS_DEVICE static void reduce_block(Params const& p, int r0, int r1, int c0, int c1, int t) {
    const comm::GroupDevice& g = p.group;
    const int vecs = (c1 - c0) / 4;  // 8-byte vectors per row (n is a multiple of 8)
    const int total = (r1 - r0) * vecs;
    T* out = static_cast<T*>(p.out) - static_cast<int64_t>(p.out_row0) * p.n;
    T* reduced = p.two_shot ? reinterpret_cast<T*>(g.data[g.rank] + p.reduced_offset) : nullptr;
    for (int i = t; i < total; i += kSideThreads) {
      const int row = i / vecs;
      const int64_t at = static_cast<int64_t>(r0 + row) * p.n + c0 + (i - row * vecs) * 4;
      float acc[4] = {0.f, 0.f, 0.f, 0.f};
      for (int s = 0; s < g.world; ++s) {  // rank order 0..W-1: the same sum on every rank
        const uint2 v = *reinterpret_cast<const uint2*>(reinterpret_cast<const T*>(g.data[s]) + at);
        const T* h = reinterpret_cast<const T*>(&v);
        CUTLASS_PRAGMA_UNROLL
        for (int e = 0; e < 4; ++e) acc[e] += static_cast<float>(h[e]);
      }
      uint2 o;
      T* h = reinterpret_cast<T*>(&o);
      CUTLASS_PRAGMA_UNROLL
      for (int e = 0; e < 4; ++e) h[e] = static_cast<T>(acc[e]);
      *reinterpret_cast<uint2*>(out + at) = o;
      if (reduced != nullptr) *reinterpret_cast<uint2*>(reduced + at) = o;
    }
  }

  // Two-shot, second half: copies rows [r0, r1) x columns [c0, c1) of `src`'s reduced area
  // into out.
  template <class T>
  CUTLASS_DEVICE static void copy_reduced(Params const& p, int src, int r0, int r1, int c0, int c1,
                                          int t) {
    const int vecs = (c1 - c0) / 4;
    const int total = (r1 - r0) * vecs;
    const T* from = reinterpret_cast<const T*>(p.group.data[src] + p.reduced_offset);
    T* out = static_cast<T*>(p.out) - static_cast<int64_t>(p.out_row0) * p.n;
    for (int i = t; i < total; i += kSideThreads) {
      const int row = i / vecs;
      const int64_t at = static_cast<int64_t>(r0 + row) * p.n + c0 + (i - row * vecs) * 4;
      *reinterpret_cast<uint2*>(out + at) = *reinterpret_cast<const uint2*>(from + at);
    }
  }

  // The REDUCE role: side thread t in [0, 96) of every CTA. It walks the tiles its own CTA's
  // consumers compute, in their order (the scheduler's walk), so the tiles it waits for are
  // computed by the CTA of the same index on every rank — the same on every rank as the M order
  // of the reduce modes is rank-independent. No CTA then waits for a CTA that may not be
  // resident yet while blocking one that is: resident prefixes of the grid finish, on every
  // rank, whatever the co-resident cluster count (under MPS it can be below SMs / 2).
  template <class Sched>
  CUTLASS_DEVICE static void reduce_role(Params const& p, int t,
                                         typename Sched::Params const& sp) {
    const comm::GroupDevice& g = p.group;
    const int end = min(p.reduce_row0 + p.reduce_rows, p.m);
    if (p.reduce_row0 < end) {
      typename Sched::Cursor cursor;
#pragma unroll 1
      for (int unit = Sched::first_unit();; unit += Sched::unit_stride()) {
        const auto work = Sched::get(sp, unit, cursor);
        if (!work.valid) break;
        const int r0 = max(work.m_block * p.block_m, p.reduce_row0);
        const int r1 = min((work.m_block + 1) * p.block_m, end);
        const int c0 = work.n_block * p.block_n, c1 = min(c0 + p.block_n, p.n);
        if (work.skip || r0 >= r1 || c0 >= c1) continue;
        const int tile = work.m_block * p.tiles_n + work.n_block;
        if (t < g.world) {  // one side thread per rank polls that rank's flag of the tile
          comm::wait_geq(g, g.flags[t] + p.flag_base + tile, comm::op_begin(g),
                         comm::WaitSite{p.op, comm::kWaitPeerFlag, t, tile});
        }
        side_sync();  // every rank's tile is in memory (the acquires precede the barrier)
        if (p.bf16) {
          reduce_block<__nv_bfloat16>(p, r0, r1, c0, c1, t);
        } else {
          reduce_block<__half>(p, r0, r1, c0, c1, t);
        }
        if (p.two_shot) {
          side_sync();  // every side thread's reduced stores precede the flag
          if (t == 0) comm::signal(g, g.rank, p.reduced_flag_base + tile, comm::op_begin(g));
        }
      }
    }
    if (!p.two_shot) return;
    // Two-shot, second half: the other owners' reduced rows of the same tiles (the owner's CTA
    // of this index reduced them).
    typename Sched::Cursor cursor;
#pragma unroll 1
    for (int unit = Sched::first_unit();; unit += Sched::unit_stride()) {
      const auto work = Sched::get(sp, unit, cursor);
      if (!work.valid) break;
      const int row0 = work.m_block * p.block_m, row1 = min(row0 + p.block_m, p.m);
      const int c0 = work.n_block * p.block_n, c1 = min(c0 + p.block_n, p.n);
      if (work.skip || row0 >= row1 || c0 >= c1) continue;
      const int tile = work.m_block * p.tiles_n + work.n_block;
#pragma unroll 1
      for (int q = row0 / p.rows_per_rank; q <= (row1 - 1) / p.rows_per_rank; ++q) {
        if (q == g.rank) continue;
        if (t == 0) {
          comm::wait_geq(g, g.flags[q] + p.reduced_flag_base + tile, comm::op_begin(g),
                         comm::WaitSite{p.op, comm::kWaitPeerFlag, q, tile});
        }
        side_sync();
        const int r0 = max(row0, q * p.rows_per_rank);
        const int r1 = min(row1, (q + 1) * p.rows_per_rank);
        if (p.bf16) {
          copy_reduced<__nv_bfloat16>(p, q, r0, r1, c0, c1, t);
        } else {
          copy_reduced<__half>(p, q, r0, r1, c0, c1, t);
        }
      }
    }
  }

  // ---- the hooks the kernel calls ---------------------------------------------------------

  template <class Sched>
  CUTLASS_DEVICE static void side_role(Params const& p, Call const& call, int t,
                                       typename Sched::Params const& sp) {
    if (p.mode == kModeAllGather) {
      copy_role(p, call, t);
    } else {
      reduce_role<Sched>(p, t, sp);
    }
  }

  // Hook (a), one lane of the producer warp, before the A loads of tile row m_block.
  CUTLASS_DEVICE static void producer_wait(Params const& p, Call& call, int m_block, int block_m) {
    if (p.mode == kModeAllGather) {
      const int row0 = m_block * block_m;
      if (row0 >= p.m_total) return;
      wait_gathered_rows(p, call, row0, min(row0 + block_m, p.m_total) - 1);
      comm::fence_proxy_async_global();  // the TMA loads that follow must see those rows
    } else if (!call.entered) {
      // The first tile of this CTA: no peer may still be reading the partial we overwrite.
      comm::entry_barrier(p.group, call.epoch, p.op, p.signature);
      call.entered = true;
    }
  }

  // Hook (b) after the TMA-store epilogue (every consumer thread): the storing warp waits for
  // its writes, then one thread releases the tile's flag at this rank. The call number is read
  // again rather than carried through the mainloop in the consumers' registers (*epoch changes
  // only in the last CTA's call_end, after every CTA's tiles).
  CUTLASS_DEVICE static void tile_done(Params const& p, Call const&, int m_block, int n_block,
                                       int block_m, int mma_thread_idx) {
    if (p.mode != kModeReduce || m_block * block_m >= p.m) return;
    if (mma_thread_idx < 32) {
      comm::tma_store_wait_all_writes();
      __syncwarp();
      if (mma_thread_idx == 0) {
        comm::fence_proxy_async_global();
        comm::signal(p.group, p.group.rank, p.flag_base + m_block * p.tiles_n + n_block,
                     comm::op_begin(p.group));
      }
    }
  }

  // The same after register stores (ping-pong consumers; a warpgroup barrier precedes it).
  CUTLASS_DEVICE static void tile_stored(Params const& p, Call const&, int m_block, int n_block,
                                         int block_m, int warpgroup_thread_idx) {
    if (p.mode != kModeReduce || m_block * block_m >= p.m || warpgroup_thread_idx != 0) return;
    comm::signal(p.group, p.group.rank, p.flag_base + m_block * p.tiles_n + n_block,
                 comm::op_begin(p.group));
  }

  // One thread per CTA after the CTA's last access of group memory. The call number is read
  // again (this CTA has not taken its exit ticket yet, so *epoch is still e - 1): a Call used
  // here would stay live through every role, the consumers' mainloop included.
  CUTLASS_DEVICE static void call_end(Params const& p, Call const&) {
    comm::op_end(p.group, comm::op_begin(p.group));
  }
};

}  // namespace mkernel::fused
