// Communication hooks of the attention kernel, as compile-time policies (as the GEMM engine's):
//  (a) wait_kv: before the producer warp issues the TMA loads of a KV block, wait until the
//      flag guarding it holds >= a value (the block has arrived from a peer: ring attention);
//  (b) the merge of a partial result (out, lse) with the next block's is a separate fp32 kernel
//      (attention_merge.cu), so the engine's epilogue stays the plain one.
// NoHooks compiles (a) away: the plain kernel pays nothing.
#pragma once

#include <cstdint>

#include "../comm/group_sync.cuh"
#include "cutlass/cutlass.h"

namespace mkernel::attention {

// The KV flags the producer's load lane has acquired so far in this launch, one bit per flag
// slot (batch * flag_batch_stride + head_kv * flag_head_stride + flag) below kSlots: in shared
// memory (the producer warpgroup runs on 24 registers), written and read by that lane only.
// Flags only move up within a launch, and an acquire + proxy fence by this lane orders every
// later TMA load it issues, so a flag seen once needs no second acquire in any later tile
// (KvFlagHooks::Params::remember). Ring attention's whole mode has batch * W * chunks flags
// (<= 16 chunks per shard): every slot up to b * W = 32.
struct SeenFlags {
  static constexpr int kSlots = 512;
  uint32_t bits[kSlots / 32];
  CUTLASS_DEVICE void clear() {
    for (int i = 0; i < kSlots / 32; ++i) bits[i] = 0;
  }
};

struct NoHooks {
  struct Params {};
  static constexpr bool kWaitsForKV = false;
  static constexpr bool kZigzag = false;  // the zigzag ring mode (Problem::zz_*) is compiled out
  static constexpr bool kForwardsKV = false;  // no forwarding role (kv_forward_hooks.cuh)
  static constexpr int kForwardSmemBytes = 0;
  static constexpr bool kClaimsTiles = false;  // the static tile order only (tile_handoff.cuh)
  CUTLASS_DEVICE static bool late_claim(Params const&) { return false; }
  template <int kBlockN>
  CUTLASS_DEVICE static int wait_kv(Params const&, SeenFlags*, int, int, int) {
    return 0;
  }
};

// The plain kernel with claimed tiles (variant bit 12, attn12; attention_api.h kClaimTilesBit):
// no KV wait, the CTAs claim work tiles from a per-call counter (tile_handoff.cuh) in the
// scheduler's linear order (causal: longest first), and each CTA claims its next tile only once
// its load lane has issued the current tile's last K/V load (late_claim), i.e. a few KV blocks
// before its consumers finish that tile — FA3's dynamic scheduler. Why: causal tiles differ up to
// S/128-fold, and the static list (CTA c runs c, c + G, ...) over L2 sections left the busiest CTA
// with 1.6% / 2.4% more work than the mean at S = 8192 / 16384 (b*S = 16k, 32 heads; a
// simulation of the schedule, NOTES attn12), about the causal gap to cuDNN there; claimed at
// the end of a tile, the simulated excess is 0.25-0.35%. A claim made when the previous tile
// starts (the hooked kernels' handoff) is worse than static for unequal tiles (2.7-3.5%
// simulated: a CTA that has just started a long tile takes the next one too).
struct ClaimTilesHooks {
  struct Params {
    int* tile_counter = nullptr;  // zero at launch (launch_claimed zeroes it on the stream)
  };
  static constexpr bool kWaitsForKV = false;
  static constexpr bool kZigzag = false;
  static constexpr bool kForwardsKV = false;
  static constexpr int kForwardSmemBytes = 0;
  static constexpr bool kClaimsTiles = true;
  CUTLASS_DEVICE static bool late_claim(Params const&) { return true; }
  template <int kBlockN>
  CUTLASS_DEVICE static int wait_kv(Params const&, SeenFlags*, int, int, int) {
    return 0;
  }
};

struct KvFlagHooks {
  struct Params {
    const uint64_t* kv_ready = nullptr;  // [batch * heads_kv * flags_per_head]
    int blocks_per_flag = 1;
    int flag_batch_stride = 1;  // flags between batches (attention_api.h, HookArgs)
    int flag_head_stride = 1;   // flags between kv heads (0: one flag for every head)
    uint64_t kv_ready_value = 0;
    const uint64_t* kv_ready_epoch = nullptr;  // expected += kv_ready_epoch_scale * *kv_ready_epoch
    uint64_t kv_ready_epoch_scale = 0;
    uint64_t timeout_ns = 0;
    comm::WaitDiagnostic* diag = nullptr;
    int32_t rank = -1, group = -1, peer = -1;  // for the diagnostic record
    // Non-null: the CTAs claim work tiles from this counter (zero at launch) instead of the
    // static order (tile_handoff.cuh; ring attention's whole-sequence mode).
    int* tile_counter = nullptr;
    // Nonzero: the load lane skips the wait for a block whose flag it already acquired in the
    // same tile (HookArgs::skip_seen_flags; wait_kv's return value).
    int skip_seen = 0;
    // Nonzero: ... or in an earlier tile of this launch (SeenFlags; HookArgs::remember_flags).
    int remember = 0;
    // Nonzero (with tile_counter): the load lane frees the handoff slot only once it has issued
    // the tile's last load (ClaimTilesHooks' late claim; HookArgs::late_claim).
    int late_claim = 0;
    // Nonzero: no wait at all (HookArgs::measure_no_wait; flags released before the launch).
    int no_wait = 0;
    // Kernels whose key block is not a multiple of 128 keys (the 128x144 tile): flags count
    // keys_per_flag keys each, flags_per_row per row (HookArgs::keys_per_flag, flags_per_head);
    // a block may straddle two flags.
    int keys_per_flag = 0;
    int flags_per_row = 0;
    // The own-shard-first split (HookArgs::phase_split_keys; attention_kernel_sm90.cuh
    // save_state / restore_state): the first phases' running state, and per tile one release
    // count per consumer thread, zeroed by the launch.
    int phase_split_keys = 0;
    float* phase_ws = nullptr;
    uint64_t* phase_flags = nullptr;
  };
  static constexpr bool kWaitsForKV = true;
  static constexpr bool kZigzag = true;  // ring attention: the zigzag ring mode is built in
  static constexpr bool kForwardsKV = false;
  static constexpr int kForwardSmemBytes = 0;
  static constexpr bool kClaimsTiles = true;  // when Params::tile_counter is set
  // Late (ClaimTilesHooks) or when the previous tile starts (the hooked kernels' first handoff).
  CUTLASS_DEVICE static bool late_claim(Params const& p) { return p.late_claim != 0; }

  // One flag slot: a remembered one costs a shared-memory bit test, else the bounded wait, the
  // proxy fence, and (remember) its bit. Only slot stays live across the wait (the load lane
  // has 24 registers; the params are reloaded from the constant bank).
  CUTLASS_DEVICE static void acquire(Params const& p, SeenFlags* seen, int slot) {
    if (p.remember != 0 && slot < SeenFlags::kSlots &&
        ((seen->bits[slot >> 5] >> (slot & 31)) & 1u) != 0)
      return;
    uint64_t expected = p.kv_ready_value;
    // The counter only changes between launches (ring attention: the group's op epoch).
    if (p.kv_ready_epoch != nullptr) expected += p.kv_ready_epoch_scale * __ldg(p.kv_ready_epoch);
    comm::WaitSite site;
    site.op = comm::kOpRingAttention;
    site.what = comm::kWaitPeerFlag;
    site.peer = p.peer;
    site.index = slot;
    comm::wait_geq(p.kv_ready + slot, expected, p.timeout_ns, p.diag, p.group, p.rank, site);
    comm::fence_proxy_async_global();  // the TMA loads that follow must see the block
    if (p.remember != 0 && slot < SeenFlags::kSlots) seen->bits[slot >> 5] |= 1u << (slot & 31);
  }

  // Called by the producer's issuing lane before the loads of KV block n_block (kBlockN keys):
  // for every block (a flag costs one system-scope acquire load, its CCTL and a proxy fence),
  // or with skip_seen only for the first block of each flag in a tile's walk (mainloop
  // load()); with remember, a flag this lane acquired in an earlier tile costs a shared-memory
  // bit test. Returns the lowest key block the caller may load without another wait: with
  // skip_seen the lowest block wholly inside the flags just acquired (a tile's walk goes down,
  // so the blocks it loads after n_block down to that one were released with them), else none
  // (INT_MAX). Blocks of 128-multiples: blocks_per_flag whole blocks per flag; other blocks
  // (128x144): flags by key range, one block under at most two.
  template <int kBlockN>
  CUTLASS_DEVICE static int wait_kv(Params const& p, SeenFlags* seen, int batch, int head_kv,
                                    int n_block) {
    if (p.kv_ready == nullptr || p.no_wait != 0) return 0;
    const int row = batch * p.flag_batch_stride + head_kv * p.flag_head_stride;
    if constexpr (kBlockN % 128 == 0) {
      const int flag = n_block / p.blocks_per_flag;
      acquire(p, seen, row + flag);
      return p.skip_seen != 0 ? flag * p.blocks_per_flag : 0x7fffffff;
    } else {
      const int key0 = n_block * kBlockN;
      const int f0 = key0 / p.keys_per_flag;
      const int f1 = min((key0 + kBlockN - 1) / p.keys_per_flag, p.flags_per_row - 1);
      for (int f = f1; f >= f0; --f) acquire(p, seen, row + f);
      return p.skip_seen != 0 ? (f0 * p.keys_per_flag + kBlockN - 1) / kBlockN : 0x7fffffff;
    }
  }
};

}  // namespace mkernel::attention
