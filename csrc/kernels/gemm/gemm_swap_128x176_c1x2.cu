// gemm14: the structure of cuBLAS's 333x8192x8192 kernel (nvjet_sm90_tst_128x168_64x5_2x1, grid
// 2 x 64 = 128 CTAs) as far as CUTLASS builds it: 128x176 tiles (168 does not build: a stage of
// 21 eight-row atoms is not a whole period of the 128-byte swizzle in CuTe's stage layout),
// 64-deep k-blocks, 5 stages pinned, cooperative consumers (384 threads), 1x2 clusters: the two
// token tiles of one weight block in one cluster, the weight tile (the streamed operand)
// multicast, so each weight byte leaves L2 once per cluster. 8192 weight rows make 64 x 2 = 128
// tiles: the persistent grid is 128 CTAs, one tile each (data-parallel, as cuBLAS's).
#include "gemm_swap_sm90.cuh"

namespace mkernel::gemm_swap::detail {
using Swap128x176Cluster1x2 =
    SwapConfig<cute::Shape<cute::_128, cute::Int<176>, cute::_64>,
               cute::Shape<cute::_1, cute::_2, cute::_1>, cutlass::gemm::PersistentScheduler,
               /*Pingpong=*/false, /*DirectStore=*/false, /*Stages=*/5>;
}  // namespace mkernel::gemm_swap::detail
MKERNEL_GEMM_SWAP_INSTANTIATE(Swap128x176Cluster1x2, swap_128x176_c1x2)
