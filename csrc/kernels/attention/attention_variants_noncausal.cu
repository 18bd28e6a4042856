// Mainloop variants of the bf16 d=128 128x128 plain kernel, non-causal, for side-by-side
// measurements with the default (Problem::variant, MKERNEL_ATTN_VARIANT; AttnTraits::kVariant
// says what each bit does). Session 8's device run 2 measured bits 0-5 (benchmarks/NOTES.md,
// Attention engine item 5): 9 (deep V ring + 4-chain reductions) won by 2-9% and is now the
// default (attention_launch.cuh kDefaultVariant); the FMA-pipe exp2 (bits 1-2) lost 15-25%,
// the integer-pipe P conversion (bit 4), the late O rescale (bit 5) and the 4-chain reductions
// alone (bit 0) 1-4%: their code stays (off), their kernels are no longer built.
//   8: the deep V ring alone (not yet measured: bit 0 alone measured -1..-4%)
//   9: the default (8 + the 4-chain row reductions)
//   64: the default before session 8 (no bits; bit 6 only makes it a separate instantiation)
#include "attention_launch.cuh"

namespace mkernel::attention {

cudaError_t run_bf16_d128_m128_n128_variant_noncausal(const Problem& p, const Launch& l) {
  using E = cutlass::bfloat16_t;
  const NoHooks::Params h{};
  switch (p.variant) {
    case 8: return launch_attention<E, 128, 128, 128, false, NoHooks, 8>(p, l, h);
    case 9: return launch_attention<E, 128, 128, 128, false, NoHooks, 9>(p, l, h);
    case 64: return launch_attention<E, 128, 128, 128, false, NoHooks, 64>(p, l, h);
    default: return cudaErrorInvalidValue;
  }
}

}  // namespace mkernel::attention
