// Swapped-operand GEMM, 128x128 tiles, stream-K: 65 to 128 tokens (and 129 to
// 256 in two tiles), K spread over every SM.
#include "gemm_swap_sm90.cuh"

namespace mkernel::gemm_swap::detail {
using Swap128x128StreamK =
    SwapConfig<cute::Shape<cute::_128, cute::_128, cute::_64>,
               cute::Shape<cute::_1, cute::_1, cute::_1>, cutlass::gemm::StreamKScheduler>;
}  // namespace mkernel::gemm_swap::detail
MKERNEL_GEMM_SWAP_INSTANTIATE(Swap128x128StreamK, swap_128x128_streamk)
