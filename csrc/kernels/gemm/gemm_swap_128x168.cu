// gemm15: 333 tokens in two 168-wide token tiles (336: 0.9% padding, where 2 x 176 = 352 pads
// 5.7%), as cuBLAS's nvjet_sm90_tst_*x168 kernels do. 168 = 21 eight-row swizzle atoms builds only
// with the Stage2D mainloop (sm90_mma_stage2d.hpp: each stage's TMA layout built 2-D). The
// epilogue stores from the registers (CUTLASS's TMA epilogue wants its subtile N a multiple of
// 16, and 168 has no such divisor).
// 128x168, cooperative (384 threads), no cluster, as many stages as fit (6): 8192 weight rows
// make 64 x 2 = 128 tiles, one per CTA (swap:1's structure with 168 instead of 176).
#include "gemm_swap_sm90.cuh"

namespace mkernel::gemm_swap::detail {
using Cfg_swap_128x168 =
    SwapConfig<cute::Shape<cute::_128, cute::Int<168>, cute::_64>,
               cute::Shape<cute::_1, cute::_1, cute::_1>, cutlass::gemm::PersistentScheduler,
               /*Pingpong=*/false, /*DirectStore=*/true, /*Stages=*/0, /*OneConsumer=*/false,
               /*Stage2D=*/1>;
}  // namespace mkernel::gemm_swap::detail
MKERNEL_GEMM_SWAP_INSTANTIATE(Cfg_swap_128x168, swap_128x168)
