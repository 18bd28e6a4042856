// Mainloop variants of the bf16 d=128 128x128 plain kernel, side by side with the default in
// one benchmark run (Problem::variant; AttnTraits::kVariant says what each bit changes):
//   1: the softmax's row max / row sum as 4 partial chains
//   3: 1 + exp2 of 2 of every 8 scores on the FMA pipe (exp2_fma)
//   5: 1 + exp2 of 4 of every 8 scores on the FMA pipe
// The one that measures fastest becomes the default (AttnTraits), and this file goes.
#include "attention_launch.cuh"

namespace mkernel::attention {

cudaError_t run_bf16_d128_m128_n128_variant(const Problem& p, const Launch& l) {
  using E = cutlass::bfloat16_t;
  const NoHooks::Params h{};
#define MKERNEL_ATTN_VARIANT(v)                                                             \
  case v:                                                                                   \
    return p.causal ? launch_attention<E, 128, 128, 128, true, NoHooks, v>(p, l, h)         \
                    : launch_attention<E, 128, 128, 128, false, NoHooks, v>(p, l, h);
  switch (p.variant) {
    MKERNEL_ATTN_VARIANT(1)
    MKERNEL_ATTN_VARIANT(3)
    MKERNEL_ATTN_VARIANT(5)
    default:
      return cudaErrorInvalidValue;
  }
#undef MKERNEL_ATTN_VARIANT
}

}  // namespace mkernel::attention
