// Swapped-operand GEMM, 128x112 tiles, stream-K: 333 tokens in 3 x 112 = 336 (0.9% padding;
// 2 x 176 pads to 352, and a 168-wide tile does not build: CuTe's smem/epilogue layouts want
// the tile's N a multiple of 16). 8192 weight rows make 192 tiles, 1.45 waves of 132 SMs:
// stream-K spreads their k-blocks evenly.
#include "gemm_swap_sm90.cuh"

namespace mkernel::gemm_swap::detail {
using Swap128x112StreamK =
    SwapConfig<cute::Shape<cute::_128, cute::Int<112>, cute::_64>,
               cute::Shape<cute::_1, cute::_1, cute::_1>, cutlass::gemm::StreamKScheduler>;
}  // namespace mkernel::gemm_swap::detail
MKERNEL_GEMM_SWAP_INSTANTIATE(Swap128x112StreamK, swap_128x112_streamk)
