// Host side of one kernel instantiation: Arguments -> Params (TMA descriptors, scheduler,
// hooks), grid from the SM count, launch. Included by the generated instantiations only.
#pragma once

// CuTe picks a wgmma of N = kBlockN for the S GEMM only among the shapes it is built with: the
// default set stops at 8, 16, 24, 32, 64, 96, 128, 192, 256 (and a few more), so a 144-, 160- or
// 176-key block became 9-11 wgmmas of N = 16 or 5 of N = 32 per k-step (attn14: the 128x160
// tile's S GEMM ran as 40 HGMMA.64x32x16 per block, 5x the A-operand reads from shared memory —
// why it measured 5-12% slower in sessions 6-7). The extended set has every multiple of 8.
// Every attention kernel TU includes this header first (instantiations/, attention_variants_*);
// AttnTraits static_asserts that the S GEMM's atom covers the whole block.
#ifndef CUTE_SM90_EXTENDED_MMA_SHAPES_ENABLED
#define CUTE_SM90_EXTENDED_MMA_SHAPES_ENABLED
#endif

#include <cuda_runtime.h>

#include <cmath>
#include <type_traits>

#include "attention_api.h"
#include "attention_kernel_sm90.cuh"
#include "kv_forward_hooks.cuh"
#include "split_tail_merge.cuh"

namespace mkernel::attention {

// kBlockM: the query rows of one CTA (64 per consumer warpgroup: 128 or 192), or 256 = a
// cluster of two 128-row CTAs sharing every K/V block by TMA multicast (non-causal).
// The mainloop variant bits (AttnTraits::kVariant) the default kernel of bf16, d = 128, the
// 128x128 tile, no hooks is built with: 9 = a V ring one stage deeper than K (+ the 4-chain
// row reductions), measured +3..+9% over the old default at S = 2048-16384 in session 8's
// device run 2, where its correctness tests ran too (benchmarks/NOTES.md, Attention engine
// item 5). Since session 9 it stays the causal default, and the non-causal plain kernel runs
// 136 (since s10 run 2 its split-tail form 2184, attention_api.h): O in the V stage of the tile's
// last block (no O buffer) and its 32 KiB as a third K stage (K 3 + V 3), without the 4-chain
// reductions; session 9's run 2 (benchmarks/NOTES.md): +0.7% / +2.8% over 9 at S = 4096 / 8192
// non-causal (0.996x / 0.995x cuDNN), -2.0% / +0.2% causal (inside the bench's pinned-column
// handicap, NOTES run 3: causal stays 9 until measured fairly); its correctness tests ran in that
// run. The KV-wait hooked kernel (KvFlagHooks) of the same tile runs 9 in both modes (tested in
// that run: bit for bit the plain variant 9's result, test_attention_hooks.py); 136 with hooks has
// not run on a GPU. Every other kernel (fp16, d = 64, other tiles) keeps variant 0 until it is
// measured and tested with it.
// The plain kernels' defaults, kDefaultVariantNonCausal (2184) and kDefaultVariantCausal (137352
// = 136 with claimed tiles and the lazy O rescale since session 43; 6280, without the lazy
// rescale, since s11 run 2; 9 before), are
// in attention_api.h (the glue asks uses_split_tail whether the default wants a workspace);
// kDefaultVariant is the KV-wait hooked kernels' (and the forwarding one's base).
// Session 10 (attn11): the bench's pinned columns read up to 3.6% below the default column
// running the same kernel (host-side cost and a fixed predecessor counted; fixed in
// benchmarks/bench_attention.py), so causal 136 / 1160 against 9 is measured again there.
inline constexpr int kDefaultVariant = 9;
// Bit 12 (claimed tiles) in a plain default: the dispatcher routes default calls that carry a
// tile counter through the claimed variants (attention_dispatch.cu effective_variant; the torch
// glue allocates one). The kernel built here for the default path runs for callers without a
// counter (ring attention's per-step engine calls): a claimed causal default falls back to 9,
// the causal default before s11 run 2 (what those callers ran until then), a claimed non-causal
// one to its own bits without bit 12.
inline constexpr int kDefaultBitsCausal =
    (kDefaultVariantCausal & kClaimTilesBit) != 0 ? kDefaultVariant : kDefaultVariantCausal;
inline constexpr int kDefaultBitsNonCausal = kDefaultVariantNonCausal & ~kClaimTilesBit;
static_assert((kDefaultBitsCausal & ~kPrefetchNextQBit) == 9 ||
                  (kDefaultBitsCausal & ~kPrefetchNextQBit) == 136 ||
                  (kDefaultBitsCausal & ~kPrefetchNextQBit) == 1160,
              "the plain causal default: a variant the causal tests cover");
static_assert((kDefaultVariantCausal & kClaimTilesBit) == 0 || kDefaultVariantCausal == 4105 ||
                  kDefaultVariantCausal == 6280 || kDefaultVariantCausal == 22664 ||
                  kDefaultVariantCausal == 137352 || kDefaultVariantCausal == 399496,
              "a claimed causal default must be a built claimed variant (4105, 6280 = 136 claimed, "
              "22664 = 6280 + bit 14, 137352 / 399496 = 6280 + bit 17 / bits 17 + 18)");
static_assert((kDefaultVariantNonCausal & kClaimTilesBit) == 0 || kDefaultVariantNonCausal == 6280,
              "a claimed non-causal default must be a built claimed variant (6280)");
// The forwarding hook policy (ring attention's engine forwarding, KvForwardHooks) of the same
// tile: its 32 KiB of staging buffers leave no room for variant 9's extra V stage beside an O
// buffer, so it runs variant 9 with O in a V stage (bit 7: K 2 + V 3 stages, no O buffer).
// Session 9 run 2: the ring tests passed with it (W = 2, 4, 8); its mainloop as a plain kernel
// (variant 649) measured +6..+8% over the old hooked one (64) and -0.1..-1.5% against 9.
inline constexpr int kForwardDefaultVariant = kDefaultVariant | 128;
// Variant bit 10 (AttnTraits::kSplitMasked): masked and wholly visible KV blocks in two consumer
// loops. Opt-in for the causal hooked kernels of the same tile (HookArgs::split_masked: 9 + 1024
// KV-wait, 137 + 1024 forwarding) and as plain variants 1033 / 1160 until a GPU run measures it.
inline constexpr int kSplitMaskedBit = 1024;

// kVariant: AttnTraits::kVariant (mainloop variants under measurement); -1: the default
// (kDefaultVariant where it applies, else 0).
template <class Element, int kHeadDim, int kBlockM, int kBlockN, bool kCausal, class Hooks,
          int kVariant = -1>
cudaError_t launch_attention(const Problem& pr, const Launch& l,
                             typename Hooks::Params const& hooks) {
  constexpr int kClusterM = kBlockM == 256 ? 2 : 1;
  // Problem::k_own: whole KV blocks from own_key_start on, inside seq_kv.
  if (pr.k_own != nullptr && (pr.v_own == nullptr || pr.own_key_start <= 0 ||
                              pr.own_key_start % kBlockN != 0 || pr.own_key_start >= pr.seq_kv))
    return cudaErrorInvalidValue;
  // The KV-wait hook policy (KvFlagHooks) runs variant 9, the plain causal default: released
  // flags must give the plain variant 9's result bit for bit (tests/attention/test_attention_hooks.py).
  constexpr bool kDefaultApplies = std::is_same_v<Element, cutlass::bfloat16_t> && kHeadDim == 128 &&
                                   kBlockM == 128 && kBlockN == 128;
  constexpr bool kPlainNonCausal = std::is_same_v<Hooks, NoHooks> && !kCausal;
  constexpr bool kPlainCausal = std::is_same_v<Hooks, NoHooks> && kCausal;
  constexpr int kBits =
      kVariant >= 0 ? kVariant
                    : (!kDefaultApplies
                           ? 0
                           : (Hooks::kForwardsKV
                                  ? kForwardDefaultVariant
                                  : (kPlainNonCausal ? kDefaultBitsNonCausal
                                                     : (kPlainCausal ? kDefaultBitsCausal
                                                                     : kDefaultVariant))));
  // Bit 7 (O in a V stage) sizes the K/V rings around the hook policy's own shared memory;
  // bit 9 (a measurement variant of the plain kernel) as if it were the forwarding policy's.
  constexpr int kReserve = (kBits & 128) == 0 ? 0
                           : ((kBits & 512) != 0 ? KvForwardHooks::kForwardSmemBytes
                                                 : Hooks::kForwardSmemBytes) + 256;
  using Traits = AttnTraits<Element, kHeadDim, kBlockN, kCausal, kBlockM / 64 / kClusterM, kClusterM,
                            kBits, kReserve>;
  static_assert(Traits::kBlockM * kClusterM == kBlockM, "kBlockM: 64 rows per consumer warpgroup");
  using Kernel = AttentionFwdSm90<Traits, Hooks>;
  using Mainloop = typename Kernel::Mainloop;
  using Epilogue = typename Kernel::Epilogue;
  using Scheduler = typename Kernel::Scheduler;

  typename Kernel::Params params;
  params.mainloop = Mainloop::to_underlying_arguments(typename Mainloop::Arguments{
      static_cast<const Element*>(pr.q), static_cast<const Element*>(pr.k),
      static_cast<const Element*>(pr.v), pr.batch, pr.seq_q, pr.seq_kv, pr.heads, pr.heads_kv,
      pr.softmax_scale, pr.q_batch_stride, pr.kv_batch_stride, pr.causal ? pr.zz_world : 0,
      pr.zz_rank, pr.zz_chunk, static_cast<const Element*>(pr.k_own),
      static_cast<const Element*>(pr.v_own), pr.own_key_start});
  params.epilogue = Epilogue::to_underlying_arguments(typename Epilogue::Arguments{
      static_cast<Element*>(pr.out), pr.lse, pr.batch, pr.seq_q, pr.heads, pr.out_batch_stride,
      pr.lse_head_stride});
  // The scheduler walks query blocks, or query-block pairs with a cluster (kernel get_tile).
  const int m_blocks = (pr.seq_q + kBlockM - 1) / kBlockM;
  params.scheduler = Scheduler::make_params(
      m_blocks, pr.heads, pr.batch,
      2ll * pr.seq_kv * kHeadDim * static_cast<long long>(sizeof(Element)),
      pr.l2_section_mb > 0 ? static_cast<long long>(pr.l2_section_mb) << 20
                           : (kCausal ? kL2SectionBytesWide : kL2SectionBytes));
  // Zigzag ring mode (hooked causal kernels): CTAs take whole pairs of tiles (get_zigzag).
  params.scheduler.zz_pairs = Hooks::kZigzag && kCausal && pr.zz_world > 0 && m_blocks % 2 == 0;
  // Claimed tiles (tile_handoff.cuh) take the linear order: longest first, greedily.
  if constexpr (Hooks::kClaimsTiles) {
    if (hooks.tile_counter != nullptr) params.scheduler.zz_pairs = 0;
  }
  params.hooks = hooks;
  // The own-shard-first split (HookArgs::phase_split_keys): claimed tiles only; the flags are
  // the caller's to zero (like the tile counter: launches may share them).
  if constexpr (Kernel::kPhases) {
    if (hooks.phase_ws != nullptr) {
      if (hooks.tile_counter == nullptr || hooks.phase_flags == nullptr ||
          hooks.phase_split_keys <= 0 || hooks.phase_split_keys % kBlockN != 0 || kClusterM != 1)
        return cudaErrorInvalidValue;
      static_assert(Kernel::kNumMmaThreads == 2 * Traits::kBlockM,
                    "phase_ws_floats assumes 128 consumer threads per 64 query rows");
      params.scheduler.phase_split = hooks.phase_split_keys / kBlockN;
    }
  }

  int sm_count = l.sm_count;
  if (sm_count <= 0) {
    int device = 0;
    cudaError_t e = cudaGetDevice(&device);
    if (e != cudaSuccess) return e;
    e = cudaDeviceGetAttribute(&sm_count, cudaDevAttrMultiProcessorCount, device);
    if (e != cudaSuccess) return e;
  }
  auto kernel = attention_fwd_kernel<Kernel>;
  cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                       Kernel::kSmemBytes);
  if (e != cudaSuccess) return e;
  if constexpr (kClusterM == 1) {
    const int grid = Scheduler::grid_size(params.scheduler, sm_count);
    if (grid <= 0) return cudaSuccess;
    int pieces = 0;  // Traits::kSplitTail: the last round's pieces (0: not split)
    if constexpr (Traits::kSplitTail) {
      const int n_blocks = (pr.seq_kv + kBlockN - 1) / kBlockN;
      pieces = Scheduler::set_split_tail(params.scheduler, grid, n_blocks,
                                         pr.split_ws != nullptr ? pr.split_ws_pieces : 0);
      if (pieces > 0) {
        params.epilogue.split_o = pr.split_ws;
        params.epilogue.split_lse =
            pr.split_ws + static_cast<int64_t>(pr.split_ws_pieces) * kBlockM * kHeadDim;
      }
    }
    kernel<<<grid, Kernel::kThreads, Kernel::kSmemBytes, l.stream>>>(params);
    e = cudaGetLastError();
    if constexpr (Traits::kSplitTail) {
      if (e == cudaSuccess && pieces > 0) {
        SplitMergeParams<typename Scheduler::Params> mp{
            params.scheduler, params.epilogue.split_o, params.epilogue.split_lse, pr.out, pr.lse,
            pr.seq_q, pr.heads,
            pr.out_batch_stride > 0 ? pr.out_batch_stride
                                    : static_cast<int64_t>(pr.seq_q) * pr.heads * kHeadDim,
            pr.lse_head_stride > 0 ? pr.lse_head_stride : static_cast<int64_t>(pr.seq_q)};
        const int rows = (params.scheduler.tiles - params.scheduler.full_tiles) * kBlockM;
        split_tail_merge_kernel<Scheduler, Element, kHeadDim, kBlockM>
            <<<(rows + 7) / 8, 256, 0, l.stream>>>(mp);
        e = cudaGetLastError();
      }
    }
    return e;
  } else {
    // As many clusters as can be resident at once (a GPC's SM count need not be even), at
    // most one per tile pair, at most sm_count / 2 (a caller's SM budget).
    cudaLaunchConfig_t cfg{};
    cudaLaunchAttribute attr[1];
    attr[0].id = cudaLaunchAttributeClusterDimension;
    attr[0].val.clusterDim.x = kClusterM;
    attr[0].val.clusterDim.y = 1;
    attr[0].val.clusterDim.z = 1;
    cfg.blockDim = dim3(Kernel::kThreads, 1, 1);
    cfg.dynamicSmemBytes = Kernel::kSmemBytes;
    cfg.stream = l.stream;
    cfg.attrs = attr;
    cfg.numAttrs = 1;
    // The resident-cluster count of this kernel, per device, asked once (a host query per
    // call would cost more than a short attention call); a benign race writes the same value.
    static int resident_by_device[64] = {};
    int device = 0;
    e = cudaGetDevice(&device);
    if (e != cudaSuccess) return e;
    int resident = device < 64 ? resident_by_device[device] : 0;
    if (resident <= 0) {
      cfg.gridDim = dim3(static_cast<unsigned>(kClusterM * 64), 1, 1);
      e = cudaOccupancyMaxActiveClusters(&resident, kernel, &cfg);
      if (e != cudaSuccess) return e;
      if (device < 64) resident_by_device[device] = resident;
    }
    int clusters = Scheduler::grid_size(params.scheduler, sm_count / kClusterM);
    clusters = resident > 0 && resident < clusters ? resident : clusters;
    if (clusters <= 0) return cudaSuccess;
    cfg.gridDim = dim3(static_cast<unsigned>(clusters * kClusterM), 1, 1);
    e = cudaLaunchKernelEx(&cfg, kernel, params);
    if (e != cudaSuccess) return e;
    return cudaGetLastError();
  }
}

// Variant bit 12 (attention_api.h kClaimTilesBit): the plain kernel of mainloop variant kBase
// with claimed tiles (ClaimTilesHooks: a late claim per tile from Problem::tile_counter, which
// is zeroed here on the launch stream first — a memset node in a captured graph, so every
// replay starts from zero). The tiles' arithmetic is kBase's: the same output bit for bit.
template <class Element, int kHeadDim, int kBlockM, int kBlockN, bool kCausal, int kBase>
cudaError_t launch_claimed(const Problem& pr, const Launch& l) {
  if (pr.tile_counter == nullptr) return cudaErrorInvalidValue;
  cudaError_t e = cudaMemsetAsync(pr.tile_counter, 0, sizeof(int), l.stream);
  if (e != cudaSuccess) return e;
  ClaimTilesHooks::Params h;
  h.tile_counter = pr.tile_counter;
  return launch_attention<Element, kHeadDim, kBlockM, kBlockN, kCausal, ClaimTilesHooks, kBase>(pr, l, h);
}

// The KV-wait policy's device parameters from the host's HookArgs.
inline KvFlagHooks::Params flag_params(const Problem& pr, const HookArgs* h) {
  KvFlagHooks::Params hp;
  hp.kv_ready = h->kv_ready;
  hp.blocks_per_flag = h->blocks_per_flag;
  hp.flag_head_stride = h->flag_head_stride >= 0 ? h->flag_head_stride : h->flags_per_head;
  hp.flag_batch_stride =
      h->flag_batch_stride >= 0 ? h->flag_batch_stride : pr.heads_kv * h->flags_per_head;
  hp.kv_ready_value = h->kv_ready_value;
  hp.kv_ready_epoch = h->kv_ready_epoch;
  hp.kv_ready_epoch_scale = h->kv_ready_epoch_scale;
  hp.timeout_ns = static_cast<uint64_t>(h->timeout_s * 1e9);
  hp.diag = static_cast<comm::WaitDiagnostic*>(h->diag);
  hp.rank = h->rank;
  hp.group = h->group;
  hp.peer = h->peer;
  hp.tile_counter = h->tile_counter;
  hp.skip_seen = h->skip_seen_flags ? 1 : 0;
  hp.remember = h->remember_flags ? 1 : 0;
  hp.late_claim = h->late_claim ? 1 : 0;
  hp.no_wait = h->measure_no_wait ? 1 : 0;
  hp.keys_per_flag = h->keys_per_flag;
  hp.flags_per_row = h->flags_per_head;
  hp.phase_split_keys = h->phase_split_keys;
  hp.phase_ws = h->phase_split_keys > 0 ? h->phase_ws : nullptr;
  hp.phase_flags = h->phase_split_keys > 0 ? h->phase_flags : nullptr;
  return hp;
}

// The two hook policies of one (dtype, head dim, tile, causal) case.
template <class Element, int kHeadDim, int kBlockM, int kBlockN, bool kCausal>
cudaError_t launch_case(const Problem& pr, const Launch& l, const HookArgs* h) {
  if (h == nullptr || h->kv_ready == nullptr) {
    return launch_attention<Element, kHeadDim, kBlockM, kBlockN, kCausal, NoHooks>(
        pr, l, NoHooks::Params{});
  }
  const KvFlagHooks::Params hp = flag_params(pr, h);
  // HookArgs::split_masked: built for the causal bf16 d=128 128x128 case only (others ignore it).
  constexpr bool kSplitBuilt = kCausal && std::is_same_v<Element, cutlass::bfloat16_t> &&
                               kHeadDim == 128 && kBlockM == 128 && kBlockN == 128;
  if (h->fwd_dst == nullptr) {
    if constexpr (kSplitBuilt) {
      if (h->split_masked) {
        return launch_attention<Element, kHeadDim, kBlockM, kBlockN, kCausal, KvFlagHooks,
                                kDefaultVariant | kSplitMaskedBit>(pr, l, hp);
      }
    }
    return launch_attention<Element, kHeadDim, kBlockM, kBlockN, kCausal, KvFlagHooks>(pr, l, hp);
  }
  // The forwarding policy: compiled for the bf16 128x128 tile only (ring attention pins it).
  if constexpr (std::is_same_v<Element, cutlass::bfloat16_t> && kBlockM == 128 && kBlockN == 128) {
    if (h->fwd_world < 2 || h->fwd_row_bytes % 16 != 0 || h->fwd_chunk_rows < 1 ||
        h->fwd_seq % h->fwd_chunk_rows != 0 || h->fwd_flags == nullptr || h->fwd_src == nullptr ||
        h->fwd_counter == nullptr ||
        h->fwd_row_bytes * static_cast<uint64_t>(h->fwd_chunk_rows) >= (uint64_t{1} << 31))
      return cudaErrorInvalidValue;
    KvForwardHooks::Params fp;
    static_cast<KvFlagHooks::Params&>(fp) = hp;
    fp.fwd_src = static_cast<const uint8_t*>(h->fwd_src);
    // Step 0 from the op's input: bulk copies need 16-byte aligned sources (the rows are).
    if ((h->fwd_own_k == nullptr) != (h->fwd_own_v == nullptr) ||
        reinterpret_cast<uintptr_t>(h->fwd_own_k) % 16 != 0 ||
        reinterpret_cast<uintptr_t>(h->fwd_own_v) % 16 != 0)
      return cudaErrorInvalidValue;
    fp.fwd_own_k = static_cast<const uint8_t*>(h->fwd_own_k);
    fp.fwd_own_v_off = static_cast<uint64_t>(reinterpret_cast<uintptr_t>(h->fwd_own_v) -
                                             reinterpret_cast<uintptr_t>(h->fwd_own_k));
    fp.fwd_dst = static_cast<uint8_t*>(h->fwd_dst);
    fp.fwd_flags = h->fwd_flags;
    fp.fwd_v_off = h->fwd_v_off;
    fp.fwd_row_bytes = h->fwd_row_bytes;
    fp.fwd_world = h->fwd_world;
    fp.fwd_rank = h->fwd_rank;
    fp.fwd_batch = h->fwd_batch;
    fp.fwd_seq = h->fwd_seq;
    fp.fwd_chunk_rows = h->fwd_chunk_rows;
    fp.fwd_chunks = h->fwd_chunks;
    fp.fwd_causal = h->fwd_causal ? 1 : 0;
    fp.fwd_counter = h->fwd_counter;
    if constexpr (kSplitBuilt) {
      if (h->split_masked) {
        return launch_attention<Element, kHeadDim, kBlockM, kBlockN, kCausal, KvForwardHooks,
                                kForwardDefaultVariant | kSplitMaskedBit>(pr, l, fp);
      }
    }
    return launch_attention<Element, kHeadDim, kBlockM, kBlockN, kCausal, KvForwardHooks>(pr, l, fp);
  } else {
    return cudaErrorNotSupported;
  }
}

// The cluster tile (kBlockM 256): plain kernel only — under a KV-wait hook one CTA's wait
// would stall its peer's multicast loads.
template <class Element, int kHeadDim, int kBlockM, int kBlockN, bool kCausal>
cudaError_t launch_plain_case(const Problem& pr, const Launch& l, const HookArgs* h) {
  if (h != nullptr && h->kv_ready != nullptr) return cudaErrorInvalidValue;
  return launch_attention<Element, kHeadDim, kBlockM, kBlockN, kCausal, NoHooks>(pr, l, NoHooks::Params{});
}

}  // namespace mkernel::attention
