// Swapped-operand GEMM, 128x176 tiles (weights rows x tokens), 2x1 clusters
// (the two CTAs of a cluster share the tokens' tile by TMA multicast),
// persistent: 8192 weight rows and up to 352 tokens make 128 tiles, one wave.
#include "gemm_swap_sm90.cuh"

namespace mkernel::gemm_swap::detail {
using Swap128x176Cluster2x1 =
    SwapConfig<cute::Shape<cute::_128, cute::Int<176>, cute::_64>,
               cute::Shape<cute::_2, cute::_1, cute::_1>, cutlass::gemm::PersistentScheduler>;
}  // namespace mkernel::gemm_swap::detail
MKERNEL_GEMM_SWAP_INSTANTIATE(Swap128x176Cluster2x1, swap_128x176_c2x1)
