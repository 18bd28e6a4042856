// KvForwardHooks: KvFlagHooks plus a forwarding role (ring attention's whole-sequence mode with
// MKERNEL_RING_SEND=engine, csrc/ring_attention.cpp). One idle warp of the producer warpgroup
// (warp 1) copies the K/V chunks of ring steps 0 .. W-2 from this rank's virtual K/V to the
// next rank's, as the separate send kernel (ring_kv.cu send_whole_kernel) does, so the forward
// needs no kernel and no SMs of its own: under MPS a send kernel enqueued beside the engine got
// no SMs until the engine finished (session 7 run 3, GQA rows), serializing the ring.
//
// Per item (step j, batch b, chunk c), at position p = W - 1 - j of the virtual K/V
// (ring_kv_api.h whole_slot; the flags of this rank at kv_ready, of the next rank at fwd_flags,
// the same layout):
//   1. wait (bounded, comm::wait_geq) for this rank's flag (b, p, c) >= e — the flag the engine's
//      TMA load of those rows waits for (step 0, p = W - 1: released by mark_whole, after the
//      stream-ordered memcpy of the local shard unless step 0 reads the op's input in place,
//      Params::fwd_own_k; steps >= 1: by the previous rank's forward),
//      then fence.proxy.async.global: the bulk loads below read through the async proxy;
//   2. the rows of k then v, in kFwdPiece-byte pieces through kFwdStages shared-memory staging
//      buffers: cp.async.bulk global -> shared (mbarrier complete_tx), cp.async.bulk shared ->
//      global (bulk group) into position p - 1 of the next rank's data region. TMA moves the
//      bytes, so the warp needs no registers for data (the producer warpgroup has 24);
//   3. cp.async.bulk.wait_group 0 (the writes are complete), fence.proxy.async.global, a
//      system fence, then st.release.sys of the next rank's flag (b, p - 1, c) = e.
// e = kv_ready_value + kv_ready_epoch_scale * *kv_ready_epoch (the engine's expected value).
// Items are claimed from a per-call counter (fwd_counter, zeroed by the caller in stream order),
// in the send kernel's order: steps in order, chunks last first (the receiver's engine walks key
// blocks from the last one down), causal zigzag: the receiver's visible half first. Claimed, not
// assigned by blockIdx: under MPS the grid (the device's SM count) may exceed the CTAs resident
// at once, and an item assigned to a CTA that is not yet resident could be the one a peer's
// resident CTAs wait for (the peer's item, in turn, on ours): a deadlock. Claiming, the resident
// CTAs forward every item in order; each item waits only for the previous rank's item of the
// step before (claimed earlier there), so the ring progresses while any CTA is resident.
#pragma once

#include <cstdint>

#include "attention_hooks.cuh"
#include "cutlass/arch/barrier.h"

namespace mkernel::attention {

struct KvForwardHooks {
  static constexpr int kFwdStages = 2;
  // 2 x 16 KiB in flight per forwarding warp (d=128 leaves ~35 KiB of the 227 KiB beside the ring).
  static constexpr int kFwdPiece = 16384;  // bytes per bulk copy
  struct Params : KvFlagHooks::Params {
    const uint8_t* fwd_src = nullptr;  // this rank's data region (virtual k at +0, v at +v_off)
    // Non-null: step 0 (the own shard) from the op's input k here, v fwd_own_v_off bytes on
    // (modulo 2^64: any order in memory), [batch, seq] rows (HookArgs::fwd_own_k).
    const uint8_t* fwd_own_k = nullptr;
    uint64_t fwd_own_v_off = 0;
    uint8_t* fwd_dst = nullptr;        // the next rank's data region (same layout)
    uint64_t* fwd_flags = nullptr;     // the next rank's flag (0, 0, 0) (kv_ready's layout there)
    uint64_t fwd_v_off = 0;            // bytes from k to v: W * batch * seq * row_bytes
    uint64_t fwd_row_bytes = 0;        // h_kv * d * element (a multiple of 16)
    int fwd_world = 0, fwd_rank = 0, fwd_batch = 0, fwd_seq = 0;  // seq: one shard's rows
    int fwd_chunk_rows = 0, fwd_chunks = 0;                       // per batch and shard
    int fwd_causal = 0;
    int* fwd_counter = nullptr;  // items claimed so far in this call (zero at launch)
  };
  static constexpr bool kWaitsForKV = true;
  static constexpr bool kZigzag = true;
  static constexpr bool kForwardsKV = true;
  static constexpr bool kClaimsTiles = true;  // when Params::tile_counter is set
  CUTLASS_DEVICE static bool late_claim(Params const& p) { return KvFlagHooks::late_claim(p); }
  // Dynamic shared memory past the kernel's SharedStorage: staging buffers, then mbarriers.
  static constexpr int kForwardSmemBytes = kFwdStages * kFwdPiece + kFwdStages * 8;

  template <int kBlockN>
  CUTLASS_DEVICE static int wait_kv(Params const& p, SeenFlags* seen, int batch, int head_kv,
                                    int n_block) {
    return KvFlagHooks::wait_kv<kBlockN>(p, seen, batch, head_kv, n_block);
  }

  CUTLASS_DEVICE static uint32_t piece_bytes(uint32_t n, uint32_t k) {
    const uint32_t left = n - k * kFwdPiece;
    return static_cast<uint32_t>(left < kFwdPiece ? left : kFwdPiece);
  }
  // Piece i of an item (k's rows for i < pieces, then v's) into staging buffer use u (buffer
  // u % kFwdStages): bulk load, completing on that buffer's mbarrier.
  // own: the source is the op's input (Params::fwd_own_k), v fwd_own_v_off on.
  CUTLASS_DEVICE static void load_piece(Params const& p, bool own, const uint8_t* src, uint32_t n,
                                        uint32_t pieces, uint32_t i, uint32_t u, uint8_t* smem,
                                        uint64_t* bars) {
    const uint32_t k = i < pieces ? i : i - pieces;
    const uint64_t v_off = own ? p.fwd_own_v_off : p.fwd_v_off;
    const uint64_t off = (i < pieces ? 0 : v_off) + static_cast<uint64_t>(k) * kFwdPiece;
    const uint32_t bytes = piece_bytes(n, k);
    const uint32_t s = u % kFwdStages;
    const uint32_t bar = static_cast<uint32_t>(__cvta_generic_to_shared(bars + s));
    const uint32_t staged = static_cast<uint32_t>(__cvta_generic_to_shared(smem + s * kFwdPiece));
    cutlass::arch::ClusterTransactionBarrier::arrive_and_expect_tx(bars + s, bytes);
    asm volatile(
        "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];"
        ::"r"(staged), "l"(src + off), "r"(bytes), "r"(bar) : "memory");
  }

  // One item t (step j = t / per_step): wait for its chunk here, bulk-copy its k and v rows to
  // the next rank, release the flag there. own: step 0 from the op's input (fwd_own_k), the
  // own shard then not being in the virtual K/V. g: the warp's pieces issued so far.
  CUTLASS_DEVICE static void forward_item(Params const& p, bool own, int t, uint64_t e, uint32_t& g,
                                          uint8_t* smem, uint64_t* bars) {
    const int world = p.fwd_world, chunks = p.fwd_chunks;
    const int per_step = p.fwd_batch * chunks;
    const int j = t / per_step;
    const int b = (t % per_step) / chunks;
    const int u = t % chunks;
    const int src_rank = (p.fwd_rank - j + world) % world;
    const int low = (p.fwd_seq / 2 + p.fwd_chunk_rows - 1) / p.fwd_chunk_rows;
    const bool low_first = p.fwd_causal != 0 && src_rank < (p.fwd_rank + 1) % world;
    const int chunk =
        !low_first ? chunks - 1 - u : (u < low ? low - 1 - u : chunks - 1 - (u - low));
    const int pos = world - 1 - j;
    const int row0 = chunk * p.fwd_chunk_rows;
    const int rows = min(p.fwd_chunk_rows, p.fwd_seq - row0);
    // One chunk of k: < 4 GiB (the host checks chunk_rows * row_bytes).
    const uint32_t n = static_cast<uint32_t>(rows * p.fwd_row_bytes);
    const uint64_t from =
        own ? (static_cast<uint64_t>(b) * p.fwd_seq + row0) * p.fwd_row_bytes
            : ((static_cast<uint64_t>(b) * world + pos) * p.fwd_seq + row0) * p.fwd_row_bytes;
    const uint64_t to =
        ((static_cast<uint64_t>(b) * world + pos - 1) * p.fwd_seq + row0) * p.fwd_row_bytes;
    const int slot = (b * world + pos) * chunks + chunk;
    comm::WaitSite site;
    site.op = comm::kOpRingAttention;
    site.what = comm::kWaitPeerFlag;
    site.peer = (p.fwd_rank + world - 1) % world;
    site.index = slot;
    comm::wait_geq(p.kv_ready + slot, e, p.timeout_ns, p.diag, p.group, p.rank, site);
    comm::fence_proxy_async_global();  // the bulk loads below must see the chunk
    // Pieces 0 .. 2 * pieces - 1: k's rows, then v's (fwd_v_off further at the destination,
    // and at the source unless it is the op's input: fwd_own_v_off).
    const uint8_t* src = (own ? p.fwd_own_k : p.fwd_src) + from;
    uint8_t* dst = p.fwd_dst + to;
    const uint32_t pieces = (n + kFwdPiece - 1) / kFwdPiece;
    const uint32_t total = 2 * pieces;
    for (uint32_t i = 0; i < total && i < kFwdStages; ++i)
      load_piece(p, own, src, n, pieces, i, g + i, smem, bars);
    for (uint32_t i = 0; i < total; ++i) {
      const uint32_t s = (g + i) % kFwdStages;
      cutlass::arch::ClusterTransactionBarrier::wait(bars + s, ((g + i) / kFwdStages) & 1);
      const uint32_t k = i < pieces ? i : i - pieces;
      const uint64_t off = (i < pieces ? 0 : p.fwd_v_off) + static_cast<uint64_t>(k) * kFwdPiece;
      const uint32_t bytes = piece_bytes(n, k);
      const uint32_t staged = static_cast<uint32_t>(__cvta_generic_to_shared(smem + s * kFwdPiece));
      asm volatile("cp.async.bulk.global.shared::cta.bulk_group [%0], [%1], %2;" ::"l"(dst + off),
                   "r"(staged), "r"(bytes)
                   : "memory");
      asm volatile("cp.async.bulk.commit_group;" ::: "memory");
      if (i + kFwdStages < total) {
        // Buffer s is refilled only once the store above has read it.
        asm volatile("cp.async.bulk.wait_group.read 0;" ::: "memory");
        load_piece(p, own, src, n, pieces, i + kFwdStages, g + i + kFwdStages, smem, bars);
      }
    }
    g += total;
    // The item's writes complete, then its flag at the next rank (release, system scope).
    asm volatile("cp.async.bulk.wait_group 0;" ::: "memory");
    comm::fence_proxy_async_global();
    __threadfence_system();
    comm::st_release_sys(p.fwd_flags + (b * world + pos - 1) * chunks + chunk, e);
  }

  // One lane (the caller elects it) runs the whole role. smem: kForwardSmemBytes, 128-aligned.
  CUTLASS_DEVICE static void forward(Params const& p, uint8_t* smem) {
    if (p.fwd_dst == nullptr || p.fwd_counter == nullptr || p.fwd_world < 2) return;
    uint64_t* bars = reinterpret_cast<uint64_t*>(smem + kFwdStages * kFwdPiece);
#pragma unroll
    for (int s = 0; s < kFwdStages; ++s) cutlass::arch::ClusterTransactionBarrier::init(bars + s, 1);
    cutlass::arch::fence_barrier_init();
    uint64_t e = p.kv_ready_value;
    if (p.kv_ready_epoch != nullptr) e += p.kv_ready_epoch_scale * __ldg(p.kv_ready_epoch);
    const int per_step = p.fwd_batch * p.fwd_chunks;
    const int items = (p.fwd_world - 1) * per_step;
    uint32_t g = 0;  // pieces issued by this warp: buffer g % kFwdStages, parity (g / kFwdStages) & 1
    for (int t = atomicAdd(p.fwd_counter, 1); t < items; t = atomicAdd(p.fwd_counter, 1))
      forward_item(p, t < per_step && p.fwd_own_k != nullptr, t, e, g, smem, bars);
  }
};

}  // namespace mkernel::attention
