// Mainloop variants of the bf16 d=128 128x128 plain kernel with the next tile's Q prefetched
// into L2 (variant bit 13, attn12; AttnTraits::kPrefetchNextQ): after the current tile's last
// K/V load, the load lane issues a TMA prefetch of the Q tile of its next static tile, so the
// Q load at the tile boundary reads L2 instead of HBM. The data path is unchanged: bit for bit
// the base variant's output. A file of its own so that its kernels compile beside the others.
//   8201: 9 + bit 13 (the causal default's mainloop; a non-causal call runs 9 + bit 13)
//   10376: 2184 + bit 13 (the non-causal default's; a causal call runs 136 + bit 13)
#include "attention_launch.cuh"

namespace mkernel::attention {

cudaError_t run_bf16_d128_m128_n128_variant_prefetch(const Problem& p, const Launch& l) {
  using E = cutlass::bfloat16_t;
  const NoHooks::Params h{};
  switch (p.variant) {
    case 8201:
      return p.causal ? launch_attention<E, 128, 128, 128, true, NoHooks, 8201>(p, l, h)
                      : launch_attention<E, 128, 128, 128, false, NoHooks, 8201>(p, l, h);
    case 10376:
      return p.causal ? launch_attention<E, 128, 128, 128, true, NoHooks, 136 | 8192>(p, l, h)
                      : launch_attention<E, 128, 128, 128, false, NoHooks, 10376>(p, l, h);
    default: return cudaErrorInvalidValue;
  }
}

}  // namespace mkernel::attention
