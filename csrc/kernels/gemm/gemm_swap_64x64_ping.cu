// Swapped-operand GEMM, 64x64 tiles (weights rows x tokens), ping-pong consumers, persistent:
// up to 64 tokens, 8192 weight rows make 128 tiles — one per SM, each streaming its 64 rows of
// the weights, where the engine's 64x128 tiles (tokens on M) keep 64 SMs busy and the
// cooperative swapped tiles need 128 weight rows (64 tiles) or stream-K's fix-up.
#include "gemm_swap_sm90.cuh"

namespace mkernel::gemm_swap::detail {
using Swap64x64Ping =
    SwapConfig<cute::Shape<cute::_64, cute::_64, cute::_64>,
               cute::Shape<cute::_1, cute::_1, cute::_1>, cutlass::gemm::PersistentScheduler,
               /*Pingpong=*/true>;
}  // namespace mkernel::gemm_swap::detail
MKERNEL_GEMM_SWAP_INSTANTIATE(Swap64x64Ping, swap_64x64_ping)
