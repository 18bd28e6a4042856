// Mainloop variants of the bf16 d=128 128x128 plain kernel, non-causal, for side-by-side
// measurements with the default (Problem::variant, MKERNEL_ATTN_VARIANT; AttnTraits::kVariant
// says what each bit does). Session 8's device run 2 measured bits 0-5 (benchmarks/NOTES.md,
// Attention engine item 5): 9 (deep V ring + 4-chain reductions) won by 2-9% and is now the
// default (attention_launch.cuh kDefaultVariant); the FMA-pipe exp2 (bits 1-2) lost 15-25%,
// the integer-pipe P conversion (bit 4), the late O rescale (bit 5) and the 4-chain reductions
// alone (bit 0) 1-4%: their code stays (off), their kernels are no longer built.
//   8: the deep V ring alone (session 9 run 1: -2.5..+2.5% against 9)
//   9: 8 + the 4-chain row reductions (the causal default; the non-causal one until session 9)
//   64: the default before session 8 (no bits; bit 6 only makes it a separate instantiation)
// Session 9 (bit 7: O in the V stage of the tile's last block, no O buffer; bit 8: the freed
// 32 KiB to V instead of K; AttnTraits):
//   136: 8 + bit 7: K 3 + V 3 stages (the non-causal default since session 9's run 2)
//   137: 9 + bit 7 (K 3 + V 3, 4-chain reductions)
//   392: 8 + bits 7, 8: K 2 + V 4 stages
//   649: 9 + bits 7, 9: K 2 + V 3 stages, 32 KiB left unused (the mainloop of ring attention's
//        engine-forwarding kernel, KvForwardHooks, as a plain kernel)
// Branch ring11 (bit 10: masked and wholly visible KV blocks in two consumer loops, FA3's split;
// the same result bit for bit as without it; not yet measured on a GPU):
//   1033: 9 + bit 10 (the causal default's mainloop; the hooked causal kernels' with
//         HookArgs::split_masked)
//   1160: 136 + bit 10 (the non-causal default's mainloop: only a ragged last block masks)
// attn11 (bit 11: the last, partial round of tiles split along the KV blocks, non-causal; the
// non-causal default since s10 run 2, +2.6 / +3.5% over 136 at S = 8192 / 16384):
//   2184: 136 + bit 11 (causal calls run 136: the bit is non-causal only)
#include "attention_launch.cuh"

namespace mkernel::attention {

cudaError_t run_bf16_d128_m128_n128_variant_noncausal(const Problem& p, const Launch& l) {
  using E = cutlass::bfloat16_t;
  const NoHooks::Params h{};
  switch (p.variant) {
    case 8: return launch_attention<E, 128, 128, 128, false, NoHooks, 8>(p, l, h);
    case 9: return launch_attention<E, 128, 128, 128, false, NoHooks, 9>(p, l, h);
    case 64: return launch_attention<E, 128, 128, 128, false, NoHooks, 64>(p, l, h);
    case 136: return launch_attention<E, 128, 128, 128, false, NoHooks, 136>(p, l, h);
    case 137: return launch_attention<E, 128, 128, 128, false, NoHooks, 137>(p, l, h);
    case 392: return launch_attention<E, 128, 128, 128, false, NoHooks, 392>(p, l, h);
    case 649: return launch_attention<E, 128, 128, 128, false, NoHooks, 649>(p, l, h);
    case 1033: return launch_attention<E, 128, 128, 128, false, NoHooks, 1033>(p, l, h);
    case 1160: return launch_attention<E, 128, 128, 128, false, NoHooks, 1160>(p, l, h);
    case 2184: return launch_attention<E, 128, 128, 128, false, NoHooks, 2184>(p, l, h);
    default: return cudaErrorInvalidValue;
  }
}

}  // namespace mkernel::attention
