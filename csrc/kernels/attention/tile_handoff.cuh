// Claimed tile order of the hooked attention kernels (ring attention's whole-sequence mode; on
// when HookArgs::tile_counter is set). Lane 0 of the producer warpgroup's warp 2 claims each
// next work tile from a per-call device counter (one atomicAdd per tile) and hands its index to
// the load lane and the consumer warpgroups through a one-slot shared-memory mailbox guarded by
// mbarriers (full: the claiming lane's release arrive after writing the slot; empty: one arrive
// per consumer warp after all its lanes read it, and one by the load lane — right after reading,
// or with a late claim (ClaimTilesHooks, the plain kernel's variant bit 12) once it has issued
// that tile's last load). The index past the last tile ends every loop.
//
// Why: with the static order (CTA c runs tiles c, c + G, c + 2G, ...) a CTA that starts late
// runs its whole list late. Under MPS the two ranks' kernels overlap on SMs (session 8 run 1,
// fused_diag: 36 of one rank's 66 CTAs started only when the other rank's kernel left their SMs),
// and in the ring benchmark one rank's time became the other rank's plus its own (GQA:
// 15.5 vs 8.3 ms; the plain engine over the whole sequence 25.8 vs 13.8 ms, two runs alike).
// Claimed, the CTAs that run take the tiles and a late CTA finds only what is left; on a GPU of
// its own the order is the static one's (claims come in CTA start order) with a greedy tail.
// Measured (session 8 run 2, W = 2): the GQA rows' ranks 11.2 / 10.4 ms claimed against 15.4 /
// 10.5 static in the same run; session 9 run 2 (claims in warp 2): 9.18 / 8.57 against 17.0 / 8.6.
// Not in the load lane: session 8 had it claim and publish in its tile loop, and ptxas then built
// every TMA's operands with R2UR inside the issue loop (benchmarks/sass_tma_loops.py shows it).
#pragma once

#include <cstdint>

#include "cutlass/arch/barrier.h"
#include "cutlass/cutlass.h"
#include "tile_scheduler.hpp"

namespace mkernel::attention {

template <int kConsumerWarps>
struct TileHandoff {
  // One slot: tile k + 1 is claimed once every taker has tile k, i.e. when the consumers start
  // tile k (the load lane is ahead of them), so a CTA holds at most one tile it has not started.
  static constexpr int kSlots = 1;
  static constexpr int kTakers = kConsumerWarps + 1;  // lane 0 of each consumer warp + the load lane
  uint64_t full[kSlots];   // count 1: the claiming lane
  uint64_t empty[kSlots];  // count kTakers
  int tile[kSlots];

  // One thread, before the CTA's first barrier sync (__syncthreads orders init before use).
  CUTLASS_DEVICE void init() {
    for (int s = 0; s < kSlots; ++s) {
      cutlass::arch::ClusterBarrier::init(&full[s], 1);
      cutlass::arch::ClusterBarrier::init(&empty[s], kTakers);
    }
    cutlass::arch::fence_barrier_init();
  }

  // Claiming lane, handoff k = 0, 1, ...: waits until every taker read handoff k - kSlots
  // (parity trick: the first pass over a fresh barrier does not wait).
  CUTLASS_DEVICE void wait_free(uint32_t k) {
    cutlass::arch::ClusterBarrier::wait(&empty[k % kSlots], ((k / kSlots) & 1) ^ 1);
  }
  // Claiming lane, after wait_free(k): publishes handoff k.
  CUTLASS_DEVICE void publish(uint32_t k, int t) {
    const uint32_t s = k % kSlots;
    asm volatile("" ::: "memory");
    *reinterpret_cast<volatile int*>(&tile[s]) = t;
    asm volatile("" ::: "memory");
    cutlass::arch::ClusterBarrier::arrive(&full[s]);  // release (CTA scope): the write above
  }

  // Every consumer thread, handoff k: the published tile index (acquire by the wait).
  CUTLASS_DEVICE int take(uint32_t k, int lane) {
    const uint32_t s = k % kSlots;
    cutlass::arch::ClusterBarrier::wait(&full[s], (k / kSlots) & 1);
    asm volatile("" ::: "memory");
    const int t = *reinterpret_cast<volatile int const*>(&tile[s]);
    __syncwarp();  // every lane of the warp has read the slot before lane 0 frees it
    if (lane == 0) cutlass::arch::ClusterBarrier::arrive(&empty[s]);
    return t;
  }
  // The load lane (one thread), handoff k.
  CUTLASS_DEVICE int take_lane(uint32_t k) {
    const uint32_t s = k % kSlots;
    cutlass::arch::ClusterBarrier::wait(&full[s], (k / kSlots) & 1);
    asm volatile("" ::: "memory");
    const int t = *reinterpret_cast<volatile int const*>(&tile[s]);
    asm volatile("" ::: "memory");
    cutlass::arch::ClusterBarrier::arrive(&empty[s]);
    return t;
  }
  // The load lane with a late claim (ClaimTilesHooks::late_claim): take_lane in two parts. It
  // reads handoff k (peek_lane) and frees the slot only once it has issued tile k's last load
  // (release_lane), so the claim of tile k + 1 waits for that point instead of for tile k's
  // start: a CTA claims its next tile a few KV blocks before its consumers finish the current
  // one, which is what balances tiles of unequal length (NOTES attn12).
  CUTLASS_DEVICE int peek_lane(uint32_t k) {
    const uint32_t s = k % kSlots;
    cutlass::arch::ClusterBarrier::wait(&full[s], (k / kSlots) & 1);
    asm volatile("" ::: "memory");
    const int t = *reinterpret_cast<volatile int const*>(&tile[s]);
    asm volatile("" ::: "memory");
    return t;
  }
  CUTLASS_DEVICE void release_lane(uint32_t k) {
    asm volatile("" ::: "memory");
    cutlass::arch::ClusterBarrier::arrive(&empty[k % kSlots]);
  }
};

// Static tile order with the decoded tiles handed over (AttnTraits bit 25, kTileMailbox): lane 0
// of the producer warpgroup's warp 2 works out WorkTile k of the CTA's static sequence (the
// scheduler's divisions) and publishes it in slot k % 2; every consumer warp takes it at the
// start of its tile k. Two slots: tile k + 1 is published as soon as tile k - 1's slot is free,
// i.e. while the consumers still run tile k, so a consumer finds its next tile waiting. The
// past-the-end tile (valid false) is published too: it ends every taker's loop.
template <int kConsumerWarps>
struct TileMailbox {
  static constexpr int kSlots = 2;
  static constexpr int kFields = 8;  // WorkTile as ints (field order: pack / unpack)
  uint64_t full[kSlots];             // count 1: the publishing lane
  uint64_t empty[kSlots];            // count kConsumerWarps: lane 0 of each consumer warp
  int tile[kSlots][kFields];

  // One thread, before the CTA's first barrier sync.
  CUTLASS_DEVICE void init() {
    for (int s = 0; s < kSlots; ++s) {
      cutlass::arch::ClusterBarrier::init(&full[s], 1);
      cutlass::arch::ClusterBarrier::init(&empty[s], kConsumerWarps);
    }
    cutlass::arch::fence_barrier_init();
  }

  // Publishing lane, tile k = 0, 1, ...: waits until every consumer warp took tile k - kSlots
  // (the first pass over a fresh barrier does not wait), writes the slot, arrives (release).
  CUTLASS_DEVICE void publish(uint32_t k, WorkTile const& w) {
    const uint32_t s = k % kSlots;
    cutlass::arch::ClusterBarrier::wait(&empty[s], ((k / kSlots) & 1) ^ 1);
    volatile int* f = tile[s];
    f[0] = w.m_block;
    f[1] = w.head;
    f[2] = w.batch;
    f[3] = w.valid ? 1 : 0;
    f[4] = w.n_lo;
    f[5] = w.n_hi;
    f[6] = w.slot;
    f[7] = w.phase;
    asm volatile("" ::: "memory");
    cutlass::arch::ClusterBarrier::arrive(&full[s]);
  }

  // Every consumer thread, tile k: the published tile (acquire by the wait).
  CUTLASS_DEVICE WorkTile take(uint32_t k, int lane) {
    const uint32_t s = k % kSlots;
    cutlass::arch::ClusterBarrier::wait(&full[s], (k / kSlots) & 1);
    asm volatile("" ::: "memory");
    volatile int const* f = tile[s];
    WorkTile w;
    w.m_block = f[0];
    w.head = f[1];
    w.batch = f[2];
    w.valid = f[3] != 0;
    w.n_lo = f[4];
    w.n_hi = f[5];
    w.slot = f[6];
    w.phase = f[7];
    __syncwarp();  // every lane of the warp has read the slot before lane 0 frees it
    if (lane == 0) cutlass::arch::ClusterBarrier::arrive(&empty[s]);
    return w;
  }
};

}  // namespace mkernel::attention
