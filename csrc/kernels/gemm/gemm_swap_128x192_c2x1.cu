// Swapped-operand GEMM, 128x192 tiles, 2x1 clusters, persistent: the tile cuBLAS's timing at
// 333x8192x8192 points to (one wave of 128 tiles, 384 padded tokens); beside the 176-wide one
// it tells the tile's per-SM rate from its padding.
#include "gemm_swap_sm90.cuh"

namespace mkernel::gemm_swap::detail {
using Swap128x192Cluster2x1 =
    SwapConfig<cute::Shape<cute::_128, cute::Int<192>, cute::_64>,
               cute::Shape<cute::_2, cute::_1, cute::_1>, cutlass::gemm::PersistentScheduler>;
}  // namespace mkernel::gemm_swap::detail
MKERNEL_GEMM_SWAP_INSTANTIATE(Swap128x192Cluster2x1, swap_128x192_c2x1)
