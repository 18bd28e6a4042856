// Swapped-operand GEMM, 128x176 tiles on every SM: each CTA an equal range of (tile, k-block)
// iterations, split tiles summed through tickets (gemm_swap_ticket_sm90.cuh). 333 tokens x 3584
// weight rows make 56 tiles for 132 SMs (data-parallel: 76 idle), x 8192 rows 128 (4 idle).
#include "gemm_swap_ticket_sm90.cuh"

namespace mkernel::gemm_swap::detail {
using Swap128x176Ticket =
    SwapConfig<cute::Shape<cute::_128, cute::Int<176>, cute::_64>,
               cute::Shape<cute::_1, cute::_1, cute::_1>, cutlass::gemm::PersistentScheduler>;
}  // namespace mkernel::gemm_swap::detail
MKERNEL_GEMM_SWAP_TICKET_INSTANTIATE(Swap128x176Ticket, swap_128x176_tk)
