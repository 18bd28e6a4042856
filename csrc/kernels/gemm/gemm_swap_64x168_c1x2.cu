// gemm15: 333 tokens in two 168-wide token tiles (336: 0.9% padding, where 2 x 176 = 352 pads
// 5.7%), as cuBLAS's nvjet_sm90_tst_*x168 kernels do. 168 = 21 eight-row swizzle atoms builds only
// with the Stage2D mainloop (sm90_mma_stage2d.hpp: each stage's TMA layout built 2-D). The
// epilogue stores from the registers (CUTLASS's TMA epilogue wants its subtile N a multiple of
// 16, and 168 has no such divisor).
// 64x168 in 1x2 clusters (only the weight tile multicast: 32 rows per CTA, whole swizzle
// atoms), 7 stages, non-persistent, one consumer warpgroup: 3584 weight rows -> 112 CTAs.
#include "gemm_swap_sm90.cuh"

namespace mkernel::gemm_swap::detail {
using Cfg_swap_64x168_c1x2 =
    SwapConfig<cute::Shape<cute::_64, cute::Int<168>, cute::_64>,
               cute::Shape<cute::_1, cute::_2, cute::_1>, cutlass::gemm::PersistentScheduler,
               /*Pingpong=*/false, /*DirectStore=*/true, /*Stages=*/7, /*OneConsumer=*/true,
               /*Stage2D=*/1>;
}  // namespace mkernel::gemm_swap::detail
MKERNEL_GEMM_SWAP_INSTANTIATE(Cfg_swap_64x168_c1x2, swap_64x168_c1x2)
