// Swapped-operand GEMM, 64x16 tiles (weights rows x tokens), 128-deep k-blocks, ping-pong
// consumers, persistent: 9 to 16 tokens (one wgmma N of 16, no padding to 64) on 8192 weight
// rows make 128 tiles, one per SM, each a TMA stream of its 64 rows of B with ~10 stages of
// 20 KB in flight (the GEMV keeps B in registers: 3.3 TB/s at M=16 where M=1 streams 3.8).
#include "gemm_swap_sm90.cuh"

namespace mkernel::gemm_swap::detail {
using Swap64x16Ping =
    SwapConfig<cute::Shape<cute::_64, cute::_16, cute::_128>,
               cute::Shape<cute::_1, cute::_1, cute::_1>, cutlass::gemm::PersistentScheduler,
               /*Pingpong=*/true>;
}  // namespace mkernel::gemm_swap::detail
MKERNEL_GEMM_SWAP_INSTANTIATE(Swap64x16Ping, swap_64x16_ping)
