// Mainloop variants of the bf16 d=128 128x128 plain kernel whose epilogue stores O from
// registers (variant bit 14, attn13; AttnTraits::kODirect): no O in the V stage of the tile's
// last block, no cross-warpgroup meet (OInVStageFree), no stmatrix / TMA store per tile; the
// stage is released right after the last PV GEMM. The same bf16 values reach the same places:
// bit for bit the base variant's output. A file of its own so that its kernels compile beside
// the other variant files.
//   18568: 2184 + bit 14 (the non-causal default's mainloop with the split tail; a causal call
//          runs 136 + bit 14, bit 11 being non-causal only)
#include "attention_launch.cuh"

namespace mkernel::attention {

cudaError_t run_bf16_d128_m128_n128_variant_odirect(const Problem& p, const Launch& l) {
  using E = cutlass::bfloat16_t;
  const NoHooks::Params h{};
  switch (p.variant) {
    case 18568:
      return p.causal ? launch_attention<E, 128, 128, 128, true, NoHooks, 136 | 16384>(p, l, h)
                      : launch_attention<E, 128, 128, 128, false, NoHooks, 18568>(p, l, h);
    default: return cudaErrorInvalidValue;
  }
}

}  // namespace mkernel::attention
