// Swapped-operand GEMM, 128x176 tiles, stream-K: when the tiles fill fewer
// SMs than there are (narrow weights), K is spread over every SM.
#include "gemm_swap_sm90.cuh"

namespace mkernel::gemm_swap::detail {
using Swap128x176StreamK =
    SwapConfig<cute::Shape<cute::_128, cute::Int<176>, cute::_64>,
               cute::Shape<cute::_1, cute::_1, cute::_1>, cutlass::gemm::StreamKScheduler>;
}  // namespace mkernel::gemm_swap::detail
MKERNEL_GEMM_SWAP_INSTANTIATE(Swap128x176StreamK, swap_128x176_streamk)
