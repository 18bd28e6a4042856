// Swapped-operand GEMM, 64x176 tiles, ping-pong consumers, persistent: 333 tokens in 2 x 176
// on 8192 weight rows make 256 tiles, two per SM; each consumer warpgroup its own tile, one's
// epilogue and pipeline waits under the other's MMAs (the cooperative 128x176 tile ran 4.9
// TF/s per SM in s6 run 3 where cuBLAS sustains ~5.7).
#include "gemm_swap_sm90.cuh"

namespace mkernel::gemm_swap::detail {
using Swap64x176Ping =
    SwapConfig<cute::Shape<cute::_64, cute::Int<176>, cute::_64>,
               cute::Shape<cute::_1, cute::_1, cute::_1>, cutlass::gemm::PersistentScheduler,
               /*Pingpong=*/true>;
}  // namespace mkernel::gemm_swap::detail
MKERNEL_GEMM_SWAP_INSTANTIATE(Swap64x176Ping, swap_64x176_ping)
