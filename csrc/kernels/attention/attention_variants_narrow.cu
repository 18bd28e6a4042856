// Non-causal variants of the bf16 d=128 plain kernel with attn16's bits 19-20 (AttnTraits
// kNarrowTop / kNarrowS: the top block's PV GEMM / also its S GEMM on its at most 64 keys) on
// attn15's 128x144 tile (166024: K 2 + V 3, the lazy O rescale, the split tail):
//   690312 = 166024 + bit 19 (the narrow PV GEMM)
//   952456 = 690312 + bit 18 (only consumer warpgroup 0 waits on the K / V full barriers)
//   1738888 = 690312 + bit 20 (the narrow S GEMM too)
// At S = 4096 every tile's top block holds 64 of its 144 keys (4096 = 28 x 144 + 64): 166024
// computes it whole (1.9% of its tensor work). A causal call runs 136 (the dispatcher). A file
// of its own so that its kernels compile beside the other variant files.
#include "attention_launch.cuh"

namespace mkernel::attention {

cudaError_t run_bf16_d128_m128_narrow_variant(const Problem& p, const Launch& l) {
  using E = cutlass::bfloat16_t;
  const NoHooks::Params h{};
  if (p.causal) return cudaErrorInvalidValue;  // the dispatcher runs 136
  switch (p.variant) {
    case 690312: return launch_attention<E, 128, 128, 144, false, NoHooks, 2184 | (1 << 17) | (1 << 19)>(p, l, h);
    case 952456:
      return launch_attention<E, 128, 128, 144, false, NoHooks, 2184 | (1 << 17) | (1 << 18) | (1 << 19)>(p, l, h);
    case 1738888:
      return launch_attention<E, 128, 128, 144, false, NoHooks, 2184 | (1 << 17) | (1 << 19) | (1 << 20)>(p, l, h);
    default: return cudaErrorInvalidValue;
  }
}

// The ring's 128x144 hooked kernel (HookArgs::keys_per_flag): the plain non-causal default's
// mainloop (1738888: the 144-key block, lazy rescale, narrow top block; bit 11's split tail
// stays off without a workspace) under the KV-wait policy. Session 25 measured the plain
// 128x144 kernel 5-8 % ahead of the 128x128 one the hooked ring runs (ring_hooked_gap.py).
// No forwarding policy: its staging buffers do not fit beside this tile's K 2 + V 3 stages.
cudaError_t run_bf16_d128_m128_n144_hooked(const Problem& p, const Launch& l, const HookArgs& h) {
  using E = cutlass::bfloat16_t;
  if (p.causal || h.fwd_dst != nullptr || h.keys_per_flag <= 0 || h.flags_per_head <= 0)
    return cudaErrorInvalidValue;
  return launch_attention < E, 128, 128, 144, false, KvFlagHooks,
         2184 | (1 << 17) | (1 << 19) | (1 << 20) > (p, l, flag_params(p, &h));
}

}  // namespace mkernel::attention
