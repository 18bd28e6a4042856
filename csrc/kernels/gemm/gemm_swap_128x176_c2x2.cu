// Swapped-operand GEMM, 128x176 tiles, 2x2 clusters: the tokens' tile is multicast to the two
// CTAs along the weights rows and the weights' tile to the two along the tokens, so each
// byte of both leaves L2 once per cluster (177 to 352 tokens: two token tiles).
#include "gemm_swap_sm90.cuh"

namespace mkernel::gemm_swap::detail {
using Swap128x176Cluster2x2 =
    SwapConfig<cute::Shape<cute::_128, cute::Int<176>, cute::_64>,
               cute::Shape<cute::_2, cute::_2, cute::_1>, cutlass::gemm::PersistentScheduler>;
}  // namespace mkernel::gemm_swap::detail
MKERNEL_GEMM_SWAP_INSTANTIATE(Swap128x176Cluster2x2, swap_128x176_c2x2)
