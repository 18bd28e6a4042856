// The attention engine's host entry points (attention_api.h): checks, then the runtime ->
// template switch over (dtype, head dim) into the generated instantiations.
#include <cmath>

#include "attention_api.h"

namespace mkernel::attention {

#define ATTN_CASE(tag, ctype, hdim, bm, bn, causal)                                  \
  cudaError_t run_##tag##_d##hdim##_m##bm##_n##bn(const Problem& p, const Launch& l, \
                                                  const HookArgs* h);
#include "instances.inc"
#undef ATTN_CASE

// The built mainloop variants (benchmarks/bench_attention.py --variants; variant 0 = the default
// kernel, which for bf16 d=128 128x128 plain kernels is attention_api.h kDefaultVariantNonCausal /
// kDefaultVariantCausal; the bits are documented there, the kernels are attention_variants_*.cu).
constexpr int kVariants[] = {8,      9,      64,     136,    137,    392,    649,    1033,
                             1160,   2184,   4105,   6280,   8201,   10376,  18568,  22664,
                             34952,  67720,  100488, 133256, 137352, 166024, 264328, 268424,
                             395400, 399496, 690312, 952456, 1738888, 2492552,
                             2508936, 6686856, 6703240, 8784008, 10127496,
                             10897544, 15075464, 17172616, 18516104, 25561224, 26904712,
                            33949832, 35293320, 42338440, 43681928};

// attention_variants_*.cu: the bf16 d=128 128x128 plain kernel's mainloop variants.
cudaError_t run_bf16_d128_m128_n128_variant_noncausal(const Problem& p, const Launch& l);
cudaError_t run_bf16_d128_m128_n128_variant_causal(const Problem& p, const Launch& l);
// attention_variants_claimed.cu: the variants with claimed tiles (bit 12), both modes.
cudaError_t run_bf16_d128_m128_n128_variant_claimed(const Problem& p, const Launch& l);
// attention_variants_early.cu: the next tile's coordinates before the epilogue (bit 24).
cudaError_t run_bf16_d128_m128_variant_early(const Problem& p, const Launch& l);
// attention_variants_mailbox.cu: the static tiles handed to the consumers decoded (bit 25).
cudaError_t run_bf16_d128_m128_variant_mailbox(const Problem& p, const Launch& l);
// attention_variants_timeline.cu: the measurement builds (bit 23), non-causal.
cudaError_t run_bf16_d128_m128_variant_timeline(const Problem& p, const Launch& l);
// attention_variants_prefetch.cu: the variants with the next tile's Q prefetched (bit 13).
cudaError_t run_bf16_d128_m128_n128_variant_prefetch(const Problem& p, const Launch& l);
// attention_variants_odirect.cu: the variants with O stored from registers (bit 14).
cudaError_t run_bf16_d128_m128_n128_variant_odirect(const Problem& p, const Launch& l);
// attention_variants_widekv.cu: the non-causal variants with longer KV blocks (bits 15-16).
cudaError_t run_bf16_d128_m128_widekv_variant(const Problem& p, const Launch& l);
// attention_variants_lazy.cu: the non-causal variants with attn15's bits 17-18.
cudaError_t run_bf16_d128_m128_n128_variant_attn15(const Problem& p, const Launch& l);
// attention_variants_narrow.cu: the non-causal variants with attn16's bits 19-20 (128x144),
// and their hooked kernel (the KV-wait policy, flags by keys).
cudaError_t run_bf16_d128_m128_narrow_variant(const Problem& p, const Launch& l);
// attention_variants_cross.cu: the non-causal variants with attn17's cross-tile overlap (bits
// 21-22, on 395400).
cudaError_t run_bf16_d128_m128_n128_variant_cross(const Problem& p, const Launch& l);
cudaError_t run_bf16_d128_m128_n144_hooked(const Problem& p, const Launch& l, const HookArgs& h);

static_assert(kDefaultWideKvNonCausal == 0 || kDefaultWideKvNonCausal == 34952 ||
                  kDefaultWideKvNonCausal == 67720 || kDefaultWideKvNonCausal == 100488 ||
                  kDefaultWideKvNonCausal == 166024 || kDefaultWideKvNonCausal == 690312 ||
                  kDefaultWideKvNonCausal == 952456 || kDefaultWideKvNonCausal == 1738888,
              "kDefaultWideKvNonCausal: 0 or a built longer-KV-block variant (it keeps 2184's bits; "
              "166024: + attn15's bit 17; 690312 / 952456 / 1738888: + attn16's bits 19-20)");

namespace {

using RunFn = cudaError_t (*)(const Problem&, const Launch&, const HookArgs*);
struct Case {
  DType dtype;
  int head_dim;
  int block_m;
  int block_n;
  bool causal;  // the causal kernel is built too
  RunFn run;
};
constexpr DType dtype_of_bf16 = DType::kBF16;
constexpr DType dtype_of_fp16 = DType::kFP16;
constexpr Case kCases[] = {
#define ATTN_CASE(tag, ctype, hdim, bm, bn, causal) \
  {dtype_of_##tag, hdim, bm, bn, causal, &run_##tag##_d##hdim##_m##bm##_n##bn},
#include "instances.inc"
#undef ATTN_CASE
};

const Case* find_tile(const Problem& p, int bm, int bn) {
  for (const Case& c : kCases) {
    if (c.dtype == p.dtype && c.head_dim == p.head_dim && c.block_m == bm && c.block_n == bn &&
        (c.causal || !p.causal))
      return &c;
  }
  return nullptr;
}

// Default tiles that exist only as plain (unhooked) kernels or change block_n, so the hooked
// kernels (ring attention: its flags count block_n-sized KV blocks) never get them: bf16
// d=128 with at least kPlainD128MinSeq queries runs kPlainD128Tile[causal] when it is not
// {0, 0}. Set from measurements (benchmarks/NOTES.md, session 7).
constexpr int kPlainD128Tile[2][2] = {{0, 0}, {0, 0}};  // [causal] = {block_m, block_n}
constexpr int kPlainD128MinSeq = 2048;

const Case* find_case(const Problem& p, bool hooked) {
  int bm = p.block_m > 0 ? p.block_m : block_m(p.head_dim, p.causal, p.seq_q);
  int bn = p.block_n > 0 ? p.block_n : block_n(p.head_dim);
  const int* plain = kPlainD128Tile[p.causal ? 1 : 0];
  if (!hooked && p.block_m <= 0 && p.block_n <= 0 && plain[0] > 0 && p.dtype == DType::kBF16 &&
      p.head_dim == 128 && p.seq_q >= kPlainD128MinSeq) {
    bm = plain[0];
    bn = plain[1];
  }
  const Case* c = find_tile(p, bm, bn);
  // The default tile by shape may not be built for this dtype (192x128 is bf16 only): the
  // 128x128 tile runs everywhere.
  if (c == nullptr && p.block_m <= 0 && p.block_n <= 0) c = find_tile(p, 128, 128);
  return c;
}

}  // namespace

// The default tile (benchmarks/NOTES.md, run 2): 128x128, except d=64 non-causal with at least
// 2048 queries: 192x128 (three consumer warpgroups), 11-17% faster at S = 4096/8192 and 3.5%
// slower at S = 1024, where 192-row tiles leave more of the last wave idle.
int block_m(int head_dim, bool causal, int seq_q) {
  return head_dim == 64 && !causal && seq_q >= 2048 ? 192 : 128;
}
int block_n(int /*head_dim*/) { return 128; }

const char* can_implement(const Problem& p) { return can_implement(p, false); }

bool uses_split_tail(const Problem& p) {
  if (p.causal || p.dtype != DType::kBF16 || p.head_dim != 128 || p.zz_world > 0) return false;
  if ((p.block_m != 0 && p.block_m != 128) || (p.block_n != 0 && p.block_n != 128)) return false;
  if (p.block_m <= 0 && p.block_n <= 0 && kPlainD128Tile[0][0] > 0 && p.seq_q >= kPlainD128MinSeq)
    return false;  // the default tile is another one then
  const int v = p.variant != 0 ? p.variant : kDefaultVariantNonCausal;
  return (v & kSplitTailBit) != 0;
}

namespace {
// The variant a plain call runs: p.variant, or for a default call of the bf16 d=128 128x128
// plain kernel kDefaultVariant{Causal,NonCausal} (0 elsewhere: the instantiation's own kernel).
int effective_variant(const Problem& p) {
  if (p.variant != 0) return p.variant;
  if (p.dtype != DType::kBF16 || p.head_dim != 128 || p.zz_world > 0) return 0;
  if ((p.block_m != 0 && p.block_m != 128) || (p.block_n != 0 && p.block_n != 128)) return 0;
  if (p.block_m <= 0 && p.block_n <= 0 && kPlainD128Tile[p.causal ? 1 : 0][0] > 0 &&
      p.seq_q >= kPlainD128MinSeq)
    return 0;  // the default tile is another one then
  return p.causal ? kDefaultVariantCausal : kDefaultVariantNonCausal;
}
}  // namespace

bool uses_tile_counter(const Problem& p) {
  // Bit 12: a measurement variant, or a default that has it (the dispatcher then runs that
  // claimed variant for default calls, run() only: hooked calls take the hooked kernels).
  return (effective_variant(p) & kClaimTilesBit) != 0;
}

const char* can_implement(const Problem& p, bool hooked) {
  if (p.q == nullptr || p.k == nullptr || p.v == nullptr || p.out == nullptr || p.lse == nullptr)
    return "a tensor pointer is null";
  if (p.batch < 1 || p.seq_q < 1 || p.seq_kv < 1 || p.heads < 1 || p.heads_kv < 1)
    return "batch, seq_q, seq_kv, heads and heads_kv must be >= 1";
  if (p.heads % p.heads_kv != 0) return "heads must be a multiple of heads_kv";
  if (p.head_dim != 64 && p.head_dim != 128) return "head_dim must be 64 or 128";
  if (!(p.softmax_scale > 0.f) || !std::isfinite(p.softmax_scale))
    return "softmax_scale must be finite and > 0";
  if (p.variant != 0) {
    bool built = false;
    for (int v : kVariants) built = built || v == p.variant;
    if (!built) return "variant: not a built mainloop variant (attention_dispatch.cu kVariants)";
    if (hooked) return "variant: the mainloop variants are plain kernels only (no hooks)";
    if (p.dtype != DType::kBF16 || p.head_dim != 128 || p.zz_world > 0 ||
        (p.block_m != 0 && p.block_m != 128) || (p.block_n != 0 && p.block_n != 128))
      return "variant: built for bf16, head_dim 128, the 128x128 tile only";
    if ((p.variant & kClaimTilesBit) != 0 && p.tile_counter == nullptr)
      return "variant: a claimed-tiles variant (bit 12) needs Problem::tile_counter";
  }
  const bool hooked_144 = hooked && p.block_n == 144;
  if (hooked_144 && (p.dtype != DType::kBF16 || p.head_dim != 128 || p.causal ||
                     (p.block_m != 0 && p.block_m != 128)))
    return "the hooked 128x144 kernel is built for bf16, head_dim 128, non-causal only";
  if (!hooked_144 && find_case(p, hooked) == nullptr)
    return "no kernel built for this block_m/block_n with this dtype, head_dim and causal mode "
           "(instances.inc)";
  if (p.causal && p.zz_world > 0) {
    if (p.zz_rank < 0 || p.zz_rank >= p.zz_world || p.zz_chunk <= 0 || p.zz_chunk % 128 != 0 ||
        p.seq_q != 2 * p.zz_chunk || p.seq_kv != 2 * p.zz_chunk * p.zz_world)
      return "zigzag ring mode: zz_chunk a multiple of 128, seq_q = 2 zz_chunk, seq_kv = "
             "2 zz_chunk zz_world, 0 <= zz_rank < zz_world";
  }
  for (const void* ptr : {p.q, p.k, p.v, static_cast<const void*>(p.out)}) {
    if (reinterpret_cast<uintptr_t>(ptr) % 16 != 0) return "q, k, v and out must be 16-byte aligned";
  }
  // k_own / v_own: TMA descriptors of their own (the mainloop's Params::tma_k[1]).
  if ((p.k_own == nullptr) != (p.v_own == nullptr)) return "k_own and v_own: both or neither";
  if (p.k_own != nullptr && (reinterpret_cast<uintptr_t>(p.k_own) % 16 != 0 ||
                             reinterpret_cast<uintptr_t>(p.v_own) % 16 != 0))
    return "k_own and v_own must be 16-byte aligned";
  return nullptr;
}

namespace {
cudaError_t dispatch(const Problem& p, const Launch& l, const HookArgs* h, const char** reason) {
  const bool hooked = h != nullptr && h->kv_ready != nullptr;
  if (const char* why = can_implement(p, hooked)) {
    if (reason != nullptr) *reason = why;
    return cudaErrorInvalidValue;
  }
  if (hooked && p.block_n == 144) {
    if (h->keys_per_flag <= 0 || h->fwd_dst != nullptr) {
      if (reason != nullptr)
        *reason =
            "the hooked 128x144 kernel counts flags by keys (HookArgs::keys_per_flag > 0) "
            "and has no forwarding policy";
      return cudaErrorInvalidValue;
    }
    return run_bf16_d128_m128_n144_hooked(p, l, *h);
  }
  if (!hooked && p.variant == 0 && (effective_variant(p) & kClaimTilesBit) != 0 &&
      p.tile_counter != nullptr) {
    // A default with claimed tiles (bit 12): the claimed variant's kernel. Without a counter
    // (a caller that allocates none, e.g. ring attention's per-step engine calls) the static
    // kernel of the same mainloop runs below (kDefaultBits*: the same output bit for bit).
    Problem pv = p;
    pv.variant = effective_variant(p);
    return run_bf16_d128_m128_n128_variant_claimed(pv, l);
  }
  if (!hooked && p.variant == 0 && kDefaultWideKvNonCausal != 0 && !p.causal && p.block_m <= 0 &&
      p.block_n <= 0 && p.seq_kv >= kDefaultWideKvMinSeqKv &&
      effective_variant(p) == kDefaultVariantNonCausal) {
    // A non-causal default on a longer KV block (attention_api.h kDefaultWideKvNonCausal).
    Problem pv = p;
    pv.variant = kDefaultWideKvNonCausal;
    if ((pv.variant & kNarrowTopBit) != 0) return run_bf16_d128_m128_narrow_variant(pv, l);
    if ((pv.variant & kAttn15Mask) != 0) return run_bf16_d128_m128_n128_variant_attn15(pv, l);
    return run_bf16_d128_m128_widekv_variant(pv, l);
  }
  if (p.variant != 0) {
    if ((p.variant & kTimelineBit) != 0) {  // first: the measurement builds carry other bits
      if (!p.causal) return run_bf16_d128_m128_variant_timeline(p, l);
      Problem pc = p;
      pc.variant = 136;
      return run_bf16_d128_m128_n128_variant_causal(pc, l);
    }
    if ((p.variant & kTileMailboxBit) != 0) {
      if (!p.causal) return run_bf16_d128_m128_variant_mailbox(p, l);
      Problem pc = p;
      pc.variant = 136;
      return run_bf16_d128_m128_n128_variant_causal(pc, l);
    }
    if ((p.variant & kEarlyNextTileBit) != 0) {
      if (!p.causal) return run_bf16_d128_m128_variant_early(p, l);
      Problem pc = p;
      pc.variant = 136;
      return run_bf16_d128_m128_n128_variant_causal(pc, l);
    }
    if ((p.variant & kCrossTileBit) != 0) {  // first: 2508936 / 6703240 carry bit 14 too
      if (!p.causal) return run_bf16_d128_m128_n128_variant_cross(p, l);
      Problem pc = p;  // causal: 136 (the bits are built non-causal; causal has its default)
      pc.variant = 136;
      return run_bf16_d128_m128_n128_variant_causal(pc, l);
    }
    if ((p.variant & kClaimTilesBit) != 0) return run_bf16_d128_m128_n128_variant_claimed(p, l);
    if ((p.variant & kPrefetchNextQBit) != 0) return run_bf16_d128_m128_n128_variant_prefetch(p, l);
    if ((p.variant & kODirectBit) != 0) return run_bf16_d128_m128_n128_variant_odirect(p, l);
    if ((p.variant & kNarrowTopBit) != 0) {
      if (!p.causal) return run_bf16_d128_m128_narrow_variant(p, l);
      Problem pc = p;  // causal: 136 (bit 19 is built non-causal only)
      pc.variant = 136;
      return run_bf16_d128_m128_n128_variant_causal(pc, l);
    }
    if ((p.variant & kAttn15Mask) != 0) {
      if (!p.causal) return run_bf16_d128_m128_n128_variant_attn15(p, l);
      Problem pc = p;  // causal: 136 (the bits are measured non-causal; causal has its default)
      pc.variant = 136;
      return run_bf16_d128_m128_n128_variant_causal(pc, l);
    }
    if ((p.variant & kWideKvMask) != 0) {
      if (!p.causal) return run_bf16_d128_m128_widekv_variant(p, l);
      Problem pc = p;  // causal: the 128x128 tile's 136 (bit 11 is non-causal only anyway)
      pc.variant = 136;
      return run_bf16_d128_m128_n128_variant_causal(pc, l);
    }
    return p.causal ? run_bf16_d128_m128_n128_variant_causal(p, l)
                    : run_bf16_d128_m128_n128_variant_noncausal(p, l);
  }
  return find_case(p, hooked)->run(p, l, h);
}
}  // namespace

cudaError_t run(const Problem& p, const Launch& l, const char** reason) {
  return dispatch(p, l, nullptr, reason);
}

cudaError_t run_hooked(const Problem& p, const Launch& l, const HookArgs& h, const char** reason) {
  return dispatch(p, l, &h, reason);
}

}  // namespace mkernel::attention
