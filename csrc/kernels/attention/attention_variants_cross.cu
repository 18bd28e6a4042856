// Non-causal variants of the bf16 d=128 128x128 plain kernel with attn17's cross-tile overlap
// (AttnTraits bit 21: a tile's last PV GEMM shares its turn with the next tile's first S GEMM,
// whose softmax runs under it; the consumers walk the CTA's static tile sequence in one call,
// mainloop mma_stream), on 395400's mainloop (O in the V stage of the tile's last block, the
// split tail, bits 17-18):
//   2492552 = 395400 + bit 21: Q double-buffered (K 2 + V 3 stages beside it),
//   6686856 = 2492552 + bit 22: one Q stage, released in the tile's last block step (K 3 + V 3),
//   2508936 / 6703240 = those + bit 14: O from registers, the V stage back after the last PV
//   GEMM (no cross-warpgroup meet in the epilogue: the warpgroups' epilogues stagger).
// All bit for bit 395400. A causal call with one of them runs 136 (the dispatcher).
#include "attention_launch.cuh"

namespace mkernel::attention {

cudaError_t run_bf16_d128_m128_n128_variant_cross(const Problem& p, const Launch& l) {
  using E = cutlass::bfloat16_t;
  const NoHooks::Params h{};
  if (p.causal) return cudaErrorInvalidValue;  // the dispatcher runs 136
  switch (p.variant) {
    case 2492552: return launch_attention<E, 128, 128, 128, false, NoHooks, 2492552>(p, l, h);
    case 6686856: return launch_attention<E, 128, 128, 128, false, NoHooks, 6686856>(p, l, h);
    case 2508936: return launch_attention<E, 128, 128, 128, false, NoHooks, 2508936>(p, l, h);
    case 6703240: return launch_attention<E, 128, 128, 128, false, NoHooks, 6703240>(p, l, h);
    default: return cudaErrorInvalidValue;
  }
}

}  // namespace mkernel::attention
