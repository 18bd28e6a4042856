// Mainloop variants of the bf16 d=128 128x128 plain kernel, non-causal, measured side by side with the
// default in one benchmark run (Problem::variant; AttnTraits::kVariant says what each bit does):
//   1: the softmax's row max / row sum as 4 partial chains
//   3: 1 + exp2 of 2 of every 8 scores on the FMA pipe (exp2_fma)
//   5: 1 + exp2 of 4 of every 8 scores on the FMA pipe
//   9: 1 + V one stage deeper than K (K 2, V 3)
//   13: 5 + 9
//   17: 1 + P converted to bf16 on the integer pipe instead of F2FP
//   21: 5 + 17
//   33: 1 + O rescaled at the end of a step (FA3's place for d <= 128), not between the GEMMs
// The one that measures fastest becomes the default (AttnTraits), and these files go.
#include "attention_launch.cuh"

namespace mkernel::attention {

cudaError_t run_bf16_d128_m128_n128_variant_noncausal(const Problem& p, const Launch& l) {
  using E = cutlass::bfloat16_t;
  const NoHooks::Params h{};
  switch (p.variant) {
    case 1: return launch_attention<E, 128, 128, 128, false, NoHooks, 1>(p, l, h);
    case 3: return launch_attention<E, 128, 128, 128, false, NoHooks, 3>(p, l, h);
    case 5: return launch_attention<E, 128, 128, 128, false, NoHooks, 5>(p, l, h);
    case 9: return launch_attention<E, 128, 128, 128, false, NoHooks, 9>(p, l, h);
    case 13: return launch_attention<E, 128, 128, 128, false, NoHooks, 13>(p, l, h);
    case 17: return launch_attention<E, 128, 128, 128, false, NoHooks, 17>(p, l, h);
    case 21: return launch_attention<E, 128, 128, 128, false, NoHooks, 21>(p, l, h);
    case 33: return launch_attention<E, 128, 128, 128, false, NoHooks, 33>(p, l, h);
    default: return cudaErrorInvalidValue;
  }
}

}  // namespace mkernel::attention
