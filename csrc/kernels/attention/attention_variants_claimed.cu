// Mainloop variants of the bf16 d=128 128x128 plain kernel with claimed tiles (variant bit 12,
// attn12; attention_api.h kClaimTilesBit, ClaimTilesHooks in attention_hooks.cuh): the CTAs
// claim their work tiles from Problem::tile_counter, each its next one once its load lane has
// issued the current tile's last load, instead of running a static list. Same tiles, same
// arithmetic: bit for bit the base variant's output. A file of its own so that its kernels
// compile beside the other variant files.
//   4105: 9 + bit 12 (the causal default's mainloop; a non-causal call runs 9 claimed)
//   6280: 2184 + bit 12 (the non-causal default's: split tail too; a causal call runs 136
//         claimed, bit 11 being non-causal only)
//   22664: 6280 + bit 14 (attn13: O stored from registers, AttnTraits::kODirect; causal runs 136 +
//          bit 14 claimed — the causal default's mainloop with bit 14 — non-causal 18568 claimed)
#include "attention_launch.cuh"

namespace mkernel::attention {

// attention_variants_claimed_lazy.cu: 137352 / 268424 / 399496 (6280 + attn15's bits 17 / 18).
cudaError_t run_bf16_d128_m128_n128_variant_claimed_attn15(const Problem& p, const Launch& l);

cudaError_t run_bf16_d128_m128_n128_variant_claimed(const Problem& p, const Launch& l) {
  using E = cutlass::bfloat16_t;
  switch (p.variant) {
    case 4105:
      return p.causal ? launch_claimed<E, 128, 128, 128, true, 9>(p, l)
                      : launch_claimed<E, 128, 128, 128, false, 9>(p, l);
    case 6280:
      return p.causal ? launch_claimed<E, 128, 128, 128, true, 136>(p, l)
                      : launch_claimed<E, 128, 128, 128, false, 2184>(p, l);
    case 22664:
      return p.causal ? launch_claimed<E, 128, 128, 128, true, 136 | 16384>(p, l)
                      : launch_claimed<E, 128, 128, 128, false, 18568>(p, l);
    case 137352:
    case 268424:
    case 399496:
      return run_bf16_d128_m128_n128_variant_claimed_attn15(p, l);
    default: return cudaErrorInvalidValue;
  }
}

}  // namespace mkernel::attention
