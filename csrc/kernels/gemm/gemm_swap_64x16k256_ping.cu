// Swapped-operand GEMM, 64x16 tiles with 256-deep k-blocks, ping-pong consumers, persistent:
// swap_64x16_ping (128-deep k-blocks: each TMA box reads 256 B of each of its 64 weight rows)
// with 512 B per row per box. At 16 tokens the op streams the weights from HBM (134 MB for
// 8192x8192 in ~37 us, 3.65 TB/s) where the M=1 GEMV, which reads 1-2 KB runs of each row,
// reaches 3.8: longer runs per row open fewer DRAM pages per byte. 5 stages of 40 KB.
#include "gemm_swap_sm90.cuh"

namespace mkernel::gemm_swap::detail {
using Swap64x16K256Ping =
    SwapConfig<cute::Shape<cute::_64, cute::_16, cute::_256>,
               cute::Shape<cute::_1, cute::_1, cute::_1>, cutlass::gemm::PersistentScheduler,
               /*Pingpong=*/true>;
}  // namespace mkernel::gemm_swap::detail
MKERNEL_GEMM_SWAP_INSTANTIATE(Swap64x16K256Ping, swap_64x16k256_ping)
