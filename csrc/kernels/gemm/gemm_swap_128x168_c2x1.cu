// gemm15: 333 tokens in two 168-wide token tiles (336: 0.9% padding, where 2 x 176 = 352 pads
// 5.7%), as cuBLAS's nvjet_sm90_tst_*x168 kernels do. 168 = 21 eight-row swizzle atoms builds only
// with the Stage2D mainloop (sm90_mma_stage2d.hpp: each stage's TMA layout built 2-D). The
// epilogue stores from the registers (CUTLASS's TMA epilogue wants its subtile N a multiple of
// 16, and 168 has no such divisor).
// 128x168 in 2x1 clusters (two weight blocks of one token tile, the token tile multicast
// to both), 5 stages: cuBLAS's 128x168_64x5_2x1 read literally (m = weight rows first).
#include "gemm_swap_sm90.cuh"

namespace mkernel::gemm_swap::detail {
using Cfg_swap_128x168_c2x1 =
    SwapConfig<cute::Shape<cute::_128, cute::Int<168>, cute::_64>,
               cute::Shape<cute::_2, cute::_1, cute::_1>, cutlass::gemm::PersistentScheduler,
               /*Pingpong=*/false, /*DirectStore=*/true, /*Stages=*/5, /*OneConsumer=*/false,
               /*Stage2D=*/1>;
}  // namespace mkernel::gemm_swap::detail
MKERNEL_GEMM_SWAP_INSTANTIATE(Cfg_swap_128x168_c2x1, swap_128x168_c2x1)
