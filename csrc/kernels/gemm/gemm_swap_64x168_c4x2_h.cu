// gemm15: 333 tokens in two 168-wide token tiles (336: 0.9% padding, where 2 x 176 = 352 pads
// 5.7%), as cuBLAS's nvjet_sm90_tst_*x168 kernels do. 168 = 21 eight-row swizzle atoms builds only
// with the Stage2D mainloop (sm90_mma_stage2d.hpp: each stage's TMA layout built 2-D). The
// epilogue stores from the registers (CUTLASS's TMA epilogue wants its subtile N a multiple of
// 16, and 168 has no such divisor).
// 64x168 in 4x2 clusters (the token tile multicast to four weight blocks, the weight
// tile to two token tiles), 7 stages, CUTLASS's non-persistent kernel (one consumer
// warpgroup): 3584 weight rows -> 56 x 2 = 112 CTAs in 14 clusters of 8, cuBLAS's
// nvjet_sm90_tst_64x168_64x7_4x2 grid (variant 23 with 168).
// With TMA cache hints (Stage2D = 2): the weights (streamed once; a multicast cluster reads
// each weight byte once) evict-first, the tokens (5.5 MB at 333 x 8192, re-read by every weight
// block) evict-last, so the weights' stream does not push the tokens out of L2. CUTLASS's
// collective passes no hint; cuBLAS's choice is not known. swap_64x168_c4x2 otherwise.
#include "gemm_swap_sm90.cuh"

namespace mkernel::gemm_swap::detail {
using Cfg_swap_64x168_c4x2_h =
    SwapConfig<cute::Shape<cute::_64, cute::Int<168>, cute::_64>,
               cute::Shape<cute::_4, cute::_2, cute::_1>, cutlass::gemm::PersistentScheduler,
               /*Pingpong=*/false, /*DirectStore=*/true, /*Stages=*/7, /*OneConsumer=*/true,
               /*Stage2D=*/2>;
}  // namespace mkernel::gemm_swap::detail
MKERNEL_GEMM_SWAP_INSTANTIATE(Cfg_swap_64x168_c4x2_h, swap_64x168_c4x2_h)
