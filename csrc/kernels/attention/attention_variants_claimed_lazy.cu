// Causal variants of the bf16 d=128 128x128 plain kernel with claimed tiles (bit 12) and attn15's
// bits (session 43), on the mainloop of 6280 causal (136 claimed; the causal default until session
// 43, when 137352 became it):
//   137352 = 6280 + bit 17 (lazy O rescale: a row's max moves only by more than 2^8 in the
//            exponent; a warp whose rows all kept theirs skips O's FMULs)
//   268424 = 6280 + bit 18 (only consumer warpgroup 0 waits on the K / V full barriers)
//   399496 = 6280 + bits 17 + 18
// Why (benchmarks/NOTES.md "Session 43"): the causal default falls to 0.95-0.98x cuDNN from
// S = 24k on, with the same L2 hit rate and DRAM bytes as cuDNN's kernel (Nsight Compute at 32k:
// 97.95% / 97.82%, 806 MB each) — a per-block cost, which cuDNN's longer tiles expose as its tile
// boundaries thin out. Bit 17 cut the non-causal block's consumer path by 49 SASS instructions.
// A non-causal call runs the static kernel of the same bits (133256 / 264328 / 395400: claiming
// measured ~1% slower non-causal). A file of its own so that its kernels compile beside the others.
#include "attention_launch.cuh"

namespace mkernel::attention {

cudaError_t run_bf16_d128_m128_n128_variant_attn15(const Problem& p, const Launch& l);

cudaError_t run_bf16_d128_m128_n128_variant_claimed_attn15(const Problem& p, const Launch& l) {
  using E = cutlass::bfloat16_t;
  if (!p.causal) {
    Problem pn = p;
    pn.variant = p.variant & ~kClaimTilesBit;
    return run_bf16_d128_m128_n128_variant_attn15(pn, l);
  }
  switch (p.variant) {
    case 137352:
      return launch_claimed<E, 128, 128, 128, true, 136 | kLazyRescaleBit>(p, l);
    case 268424:
      return launch_claimed<E, 128, 128, 128, true, 136 | kLeadWaitsBit>(p, l);
    case 399496:
      return launch_claimed<E, 128, 128, 128, true, 136 | kAttn15Mask>(p, l);
    default:
      return cudaErrorInvalidValue;
  }
}

}  // namespace mkernel::attention
