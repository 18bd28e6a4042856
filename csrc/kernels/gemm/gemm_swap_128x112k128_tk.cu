// Swapped-operand GEMM, 128x112 tiles with 128-deep k-blocks on every SM
// (gemm_swap_ticket_sm90.cuh): swap_128x112_tk with each ring stage twice as deep (61 KB, 3
// stages): per stage 8 wgmmas per warpgroup between waits instead of 4, and half the barrier
// round trips per FMA (a narrow tile does less MMA work per stage to hide them behind).
#include "gemm_swap_ticket_sm90.cuh"

namespace mkernel::gemm_swap::detail {
using Swap128x112K128Ticket =
    SwapConfig<cute::Shape<cute::_128, cute::Int<112>, cute::_128>,
               cute::Shape<cute::_1, cute::_1, cute::_1>, cutlass::gemm::PersistentScheduler>;
}  // namespace mkernel::gemm_swap::detail
MKERNEL_GEMM_SWAP_TICKET_INSTANTIATE(Swap128x112K128Ticket, swap_128x112k128_tk)
