// Non-causal variants of the bf16 d=128 128x128 plain kernel with attn15's bits (AttnTraits):
//   bit 17: lazy O rescale (FA4's conditional rescaling: a row's max moves only by more than 2^8
//           in the exponent; a warp whose rows all kept theirs skips O's 64 FMULs per block)
//   bit 18: only consumer warpgroup 0 waits on the K / V full barriers (FA3's mainloop: the
//           ping-pong orders warpgroup 1's GEMM issues after warpgroup 0's, made after its waits)
// on 2184's mainloop (O in the V stage of the tile's last block, K 3 + V 3, the split tail):
//   133256 = 2184 + bit 17, 264328 = 2184 + bit 18, 395400 = 2184 + bits 17 + 18,
//   166024 = 34952 + bit 17: the lazy rescale on attn14's 128x144 tile (K 2 + V 3 stages of
//            36 KiB; +1.75% over 2184 at S = 8192 in s12run2 without it).
// A causal call with one of them runs 136 (the dispatcher, as for the attn14 bits: causal has
// its own default). A file of its own so that its kernels compile beside the other variant files.
#include "attention_launch.cuh"

namespace mkernel::attention {

cudaError_t run_bf16_d128_m128_n128_variant_attn15(const Problem& p, const Launch& l) {
  using E = cutlass::bfloat16_t;
  const NoHooks::Params h{};
  if (p.causal) return cudaErrorInvalidValue;  // the dispatcher runs 136
  switch (p.variant) {
    case 133256: return launch_attention<E, 128, 128, 128, false, NoHooks, 133256>(p, l, h);
    case 264328: return launch_attention<E, 128, 128, 128, false, NoHooks, 264328>(p, l, h);
    case 395400: return launch_attention<E, 128, 128, 128, false, NoHooks, 395400>(p, l, h);
    case 166024: return launch_attention<E, 128, 128, 144, false, NoHooks, 2184 | (1 << 17)>(p, l, h);
    default: return cudaErrorInvalidValue;
  }
}

}  // namespace mkernel::attention
