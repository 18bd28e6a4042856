// gemm14: the structure of cuBLAS's 333x3584x8192 kernel (nvjet_sm90_tst_64x168_64x7_4x2, grid
// 8 x 14 = 112 CTAs) as far as CUTLASS builds it: 64x176 tiles (168 does not build, see
// gemm_swap_128x176_c1x2.cu), 64-deep k-blocks, 7 stages pinned, 4x2 clusters (four weight
// blocks share each token tile, two token tiles share each weight tile, both by TMA multicast),
// CUTLASS's non-persistent kernel (one consumer warpgroup, 256 threads, one tile per CTA): 3584
// weight rows make 56 x 2 = 112 CTAs in 14 clusters of 8, as cuBLAS's grid.
#include "gemm_swap_sm90.cuh"

namespace mkernel::gemm_swap::detail {
using Swap64x176Cluster4x2 =
    SwapConfig<cute::Shape<cute::_64, cute::Int<176>, cute::_64>,
               cute::Shape<cute::_4, cute::_2, cute::_1>, cutlass::gemm::PersistentScheduler,
               /*Pingpong=*/false, /*DirectStore=*/false, /*Stages=*/7, /*OneConsumer=*/true>;
}  // namespace mkernel::gemm_swap::detail
MKERNEL_GEMM_SWAP_INSTANTIATE(Swap64x176Cluster4x2, swap_64x176_c4x2)
