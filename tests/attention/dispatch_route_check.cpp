// Host check of attention_dispatch.cu's routing (attn12), compiled by g++ with stub kernels
// (test_dispatch_route.py): which kernel entry a call reaches and with which variant, for the
// defaults of attention_api.h — a claimed default (bit 12) goes to the claimed variants only with
// a tile counter, and the glue's uses_tile_counter agrees with that.
#include <cstdio>

#include "kernels/attention/attention_api.h"

namespace mkernel::attention {
int g_entry =
    0;  // 1: an instantiation, 2 / 3: variants non-causal / causal, 4: claimed, 5: prefetch,
        // 6: O from registers (attn13), 7: longer KV blocks (attn14), 8: attn15's bits 17-18,
        // 9: attn16's narrow top block (bits 19-20), 10: the ring's 128x144 hooked kernel,
        // 11: attn17's cross-tile overlap (bits 21-22), 12: the timeline builds (bit 23),
        // 13: the next tile early (bit 24), 14: the tile mailbox (bit 25)
int g_variant = -1;
#define ATTN_CASE(tag, ctype, hdim, bm, bn, causal)                                               \
  cudaError_t run_##tag##_d##hdim##_m##bm##_n##bn(const Problem& p, const Launch&, const HookArgs*) { \
    g_entry = 1;                                                                                  \
    g_variant = p.variant;                                                                        \
    return cudaSuccess;                                                                           \
  }
#include "kernels/attention/instances.inc"
#undef ATTN_CASE
#define STUB(name, id)                                       \
  cudaError_t name(const Problem& p, const Launch&) {        \
    g_entry = id;                                            \
    g_variant = p.variant;                                   \
    return cudaSuccess;                                      \
  }
STUB(run_bf16_d128_m128_n128_variant_noncausal, 2)
STUB(run_bf16_d128_m128_n128_variant_causal, 3)
STUB(run_bf16_d128_m128_n128_variant_claimed, 4)
STUB(run_bf16_d128_m128_n128_variant_prefetch, 5)
STUB(run_bf16_d128_m128_n128_variant_odirect, 6)
STUB(run_bf16_d128_m128_widekv_variant, 7)
STUB(run_bf16_d128_m128_n128_variant_attn15, 8)
STUB(run_bf16_d128_m128_narrow_variant, 9)
STUB(run_bf16_d128_m128_n128_variant_cross, 11)
STUB(run_bf16_d128_m128_variant_timeline, 12)
STUB(run_bf16_d128_m128_variant_early, 13)
STUB(run_bf16_d128_m128_variant_mailbox, 14)
#undef STUB
// The ring's opt-in 128x144 hooked kernel (MKERNEL_RING_BLOCK_N=144; session 26).
cudaError_t run_bf16_d128_m128_n144_hooked(const Problem& p, const Launch&, const HookArgs&) {
  g_entry = 10;
  g_variant = p.variant;
  return cudaSuccess;
}
}  // namespace mkernel::attention

#include "kernels/attention/attention_dispatch.cu"

using namespace mkernel::attention;

static int failures = 0;
static void expect(bool ok, const char* what) {
  if (!ok) {
    std::printf("FAIL: %s (entry %d, variant %d)\n", what, g_entry, g_variant);
    ++failures;
  }
}

int main() {
  static int counter = 0;
  Problem p{};
  p.q = p.k = p.v = reinterpret_cast<void*>(0x10000);
  p.out = reinterpret_cast<void*>(0x10000);
  p.lse = reinterpret_cast<float*>(0x10000);
  p.batch = 2; p.seq_q = p.seq_kv = 1800; p.heads = p.heads_kv = 24; p.head_dim = 128;
  p.softmax_scale = 0.088f; p.dtype = DType::kBF16;
  Launch l;
  const bool claimed_causal = (kDefaultVariantCausal & kClaimTilesBit) != 0;
  const bool claimed_noncausal = (kDefaultVariantNonCausal & kClaimTilesBit) != 0;
  for (int causal = 0; causal < 2; ++causal) {
    p.causal = causal != 0;
    const bool claimed = causal ? claimed_causal : claimed_noncausal;
    const int dflt = causal ? kDefaultVariantCausal : kDefaultVariantNonCausal;
    p.tile_counter = nullptr;
    expect(uses_tile_counter(p) == claimed, "uses_tile_counter of a default call");
    expect(run(p, l) == cudaSuccess && g_entry == 1 && g_variant == 0,
           "a default call without a counter runs the instantiation's kernel");
    p.tile_counter = &counter;
    expect(run(p, l) == cudaSuccess && g_entry == (claimed ? 4 : 1) &&
               g_variant == (claimed ? dflt : 0),
           "a default call with a counter: the claimed variant iff the default claims");
    HookArgs h;
    h.kv_ready = reinterpret_cast<const uint64_t*>(0x10000);
    expect(run_hooked(p, l, h) == cudaSuccess && g_entry == 1, "hooked calls: the instantiation");
    Problem f = p;
    f.dtype = DType::kFP16;
    expect(!uses_tile_counter(f) && run(f, l) == cudaSuccess && g_entry == 1, "fp16: no claim");
    Problem d = p;
    d.head_dim = 64;
    expect(!uses_tile_counter(d) && run(d, l) == cudaSuccess && g_entry == 1, "d=64: no claim");
    Problem t = p;
    t.block_m = 256;
    expect(!uses_tile_counter(t), "the cluster tile: no claim");
    Problem v = p;
    v.variant = 4105;
    expect(uses_tile_counter(v) && run(v, l) == cudaSuccess && g_entry == 4 && g_variant == 4105,
           "variant 4105 with a counter: the claimed entry");
    v.tile_counter = nullptr;
    const char* why = nullptr;
    expect(run(v, l, &why) == cudaErrorInvalidValue && why != nullptr,
           "variant 4105 without a counter: refused");
    v = p;
    v.variant = 9;
    expect(!uses_tile_counter(v) && run(v, l) == cudaSuccess && g_entry == (causal ? 3 : 2),
           "variant 9: the variant entry");
    v.variant = 8201;
    expect(run(v, l) == cudaSuccess && g_entry == 5, "variant 8201: the prefetch entry");
    v.variant = 18568;
    expect(!uses_tile_counter(v) && uses_split_tail(v) == !causal && run(v, l) == cudaSuccess &&
               g_entry == 6 && g_variant == 18568,
           "variant 18568: the O-from-registers entry (split tail non-causal)");
    v.variant = 22664;
    expect(uses_tile_counter(v) && run(v, l) == cudaSuccess && g_entry == 4 && g_variant == 22664,
           "variant 22664 (claimed + O from registers) with a counter: the claimed entry");
    for (int wide : {34952, 67720, 100488}) {
      v.variant = wide;
      expect(!uses_tile_counter(v) && uses_split_tail(v) == !causal && run(v, l) == cudaSuccess &&
                 g_entry == (causal ? 3 : 7) && g_variant == (causal ? 136 : wide),
             "a longer-KV-block variant: its entry non-causal (split tail), 136 causal");
    }
    for (int v15 : {133256, 264328, 395400, 166024}) {
      v.variant = v15;
      expect(!uses_tile_counter(v) && uses_split_tail(v) == !causal && run(v, l) == cudaSuccess &&
                 g_entry == (causal ? 3 : 8) && g_variant == (causal ? 136 : v15),
             "an attn15 variant (bits 17-18): its entry non-causal (split tail), 136 causal");
    }
    for (int v17 : {2492552, 6686856, 2508936, 6703240}) {
      v.variant = v17;
      expect(!uses_tile_counter(v) && uses_split_tail(v) == !causal && run(v, l) == cudaSuccess &&
                 g_entry == (causal ? 3 : 11) && g_variant == (causal ? 136 : v17),
             "an attn17 variant (bit 21, cross-tile): its entry non-causal (split tail), 136 causal");
    }
    for (int v23 : {8784008, 10127496, 10897544, 15075464, 25561224, 26904712, 42338440, 43681928}) {
      v.variant = v23;
      expect(!uses_tile_counter(v) && uses_split_tail(v) == !causal && run(v, l) == cudaSuccess &&
                 g_entry == (causal ? 3 : 12) && g_variant == (causal ? 136 : v23),
             "a timeline build (bit 23): its entry non-causal (split tail), 136 causal");
    }
    for (int v24 : {17172616, 18516104}) {
      v.variant = v24;
      expect(!uses_tile_counter(v) && uses_split_tail(v) == !causal && run(v, l) == cudaSuccess &&
                 g_entry == (causal ? 3 : 13) && g_variant == (causal ? 136 : v24),
             "a bit-24 variant (the next tile early): its entry non-causal (split tail), 136 causal");
    }
    for (int v25 : {33949832, 35293320}) {
      v.variant = v25;
      expect(!uses_tile_counter(v) && uses_split_tail(v) == !causal && run(v, l) == cudaSuccess &&
                 g_entry == (causal ? 3 : 14) && g_variant == (causal ? 136 : v25),
             "a bit-25 variant (the tile mailbox): its entry non-causal (split tail), 136 causal");
    }
    for (int v16 : {690312, 952456, 1738888}) {
      v.variant = v16;
      expect(!uses_tile_counter(v) && uses_split_tail(v) == !causal && run(v, l) == cudaSuccess &&
                 g_entry == (causal ? 3 : 9) && g_variant == (causal ? 136 : v16),
             "an attn16 variant (bit 19): its entry non-causal (split tail), 136 causal");
    }
    {
      Problem w = p;  // a default non-causal call with many keys: 2184, or the wide default
      w.seq_kv = kDefaultWideKvMinSeqKv;
      w.tile_counter = nullptr;
      const bool wide = kDefaultWideKvNonCausal != 0 && !causal;
      const int wide_entry = (kDefaultWideKvNonCausal & kNarrowTopBit) != 0 ? 9
                             : (kDefaultWideKvNonCausal & kAttn15Mask) != 0 ? 8 : 7;
      expect(run(w, l) == cudaSuccess && g_entry == (wide ? wide_entry : 1) &&
                 g_variant == (wide ? kDefaultWideKvNonCausal : 0),
             "a default call from kDefaultWideKvMinSeqKv keys on: the wide default iff set");
      w.seq_kv = kDefaultWideKvMinSeqKv - 1;
      expect(run(w, l) == cudaSuccess && g_entry == 1, "below the threshold: the instantiation");
      w.seq_kv = kDefaultWideKvMinSeqKv;
      w.block_n = 128;
      expect(run(w, l) == cudaSuccess && g_entry == 1, "a caller's block_n: no wide default");
    }
    expect(wide_kv_block_n(34952) == 144 && wide_kv_block_n(67720) == 160 &&
               wide_kv_block_n(100488) == 176 && wide_kv_block_n(2184) == 128,
           "wide_kv_block_n");
  }
  if (failures == 0) std::printf("OK\n");
  return failures == 0 ? 0 : 1;
}
