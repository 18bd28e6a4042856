// Non-causal variants with AttnTraits bit 24 (kEarlyNextTile, session 50): the consumers work
// out the next static tile's coordinates right after a tile's last PV GEMM instead of after its
// epilogue (s50b's timeline: the scheduler's divisions cost ~730 cycles a tile on the path from
// the epilogue to the next first S GEMM). Same tiles, same output bits as the bases:
//   17172616 = 395400 + bit 24 (128x128: O in a V stage, the split tail, bits 17-18),
//   18516104 = 1738888 + bit 24 (the non-causal default from 4096 keys: 128x144, lazy rescale,
//              the narrow top block, the split tail).
// A causal call runs 136 (the dispatcher).
#include "attention_launch.cuh"

namespace mkernel::attention {

cudaError_t run_bf16_d128_m128_variant_early(const Problem& p, const Launch& l) {
  using E = cutlass::bfloat16_t;
  const NoHooks::Params h{};
  if (p.causal) return cudaErrorInvalidValue;  // the dispatcher runs 136
  switch (p.variant) {
    case 17172616: return launch_attention<E, 128, 128, 128, false, NoHooks, 395400 | kEarlyNextTileBit>(p, l, h);
    case 18516104:
      return launch_attention<E, 128, 128, 144, false, NoHooks,
                              2184 | (1 << 17) | (1 << 19) | (1 << 20) | kEarlyNextTileBit>(p, l, h);
    default: return cudaErrorInvalidValue;
  }
}

}  // namespace mkernel::attention
