// Non-causal variants of the bf16 d=128 plain kernel with longer KV blocks (variant bits 15-16,
// attn14; attention_api.h kWideKvShift): 2184's mainloop — O in the V stage of the tile's last
// block, the split tail — on a 128 x kBlockN tile, the rings sized by bit 7 (no O buffer):
//   34952 = 2184 + 1 << 15: 128x144, K 2 + V 3 stages of 36 KiB
//   67720 = 2184 + 2 << 15: 128x160, K 2 + V 2 stages of 40 KiB
//   100488 = 2184 + 3 << 15: 128x176, K 2 + V 2 stages of 44 KiB (FA3's d = 128 non-causal tile)
// The S GEMM is one wgmma of N = kBlockN per k-step (CuTe's extended shapes, attention_launch.cuh).
// A file of its own so that these kernels compile beside the other variant files.
#include "attention_launch.cuh"

namespace mkernel::attention {

cudaError_t run_bf16_d128_m128_widekv_variant(const Problem& p, const Launch& l) {
  using E = cutlass::bfloat16_t;
  const NoHooks::Params h{};
  if (p.causal) return cudaErrorInvalidValue;  // the dispatcher runs the 128x128 tile's 136
  switch (p.variant) {
    case 34952: return launch_attention<E, 128, 128, 144, false, NoHooks, 2184>(p, l, h);
    case 67720: return launch_attention<E, 128, 128, 160, false, NoHooks, 2184>(p, l, h);
    case 100488: return launch_attention<E, 128, 128, 176, false, NoHooks, 2184>(p, l, h);
    default: return cudaErrorInvalidValue;
  }
}

}  // namespace mkernel::attention
