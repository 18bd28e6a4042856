// Swapped-operand GEMM, 128x16 tiles, stream-K: 9 to 16 tokens; 8192 weight rows make 64
// tiles of 128, so stream-K spreads their k-blocks over every SM (each SM one contiguous
// stretch of B, fp32 partials of 128x16 only: 8 KB per split tile).
#include "gemm_swap_sm90.cuh"

namespace mkernel::gemm_swap::detail {
using Swap128x16StreamK =
    SwapConfig<cute::Shape<cute::_128, cute::_16, cute::_64>,
               cute::Shape<cute::_1, cute::_1, cute::_1>, cutlass::gemm::StreamKScheduler>;
}  // namespace mkernel::gemm_swap::detail
MKERNEL_GEMM_SWAP_INSTANTIATE(Swap128x16StreamK, swap_128x16_streamk)
