// Swapped-operand GEMM, 128x64 tiles, stream-K: up to 64 tokens on weights
// whose 128-row tiles are fewer than the SMs (3584 rows: 28 tiles for 132 SMs).
#include "gemm_swap_sm90.cuh"

namespace mkernel::gemm_swap::detail {
using Swap128x64StreamK =
    SwapConfig<cute::Shape<cute::_128, cute::_64, cute::_64>,
               cute::Shape<cute::_1, cute::_1, cute::_1>, cutlass::gemm::StreamKScheduler>;
}  // namespace mkernel::gemm_swap::detail
MKERNEL_GEMM_SWAP_INSTANTIATE(Swap128x64StreamK, swap_128x64_streamk)
