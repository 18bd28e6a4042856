// Swapped-operand GEMM, 128x112 tiles on every SM (gemm_swap_ticket_sm90.cuh): 333 tokens in
// 3 x 112 = 336 (0.9% padding; 2 x 176 = 352 pads 5.7%), the tiles' k-blocks spread evenly over
// all SMs with ticketed partial sums. CUTLASS's stream-K ran this tile slower than 128x176
// (s9 run 3: > 82.5 us against 74.9 at 333x8192x8192); whether that was its fixup or the
// narrower tile's rate is what this variant separates.
#include "gemm_swap_ticket_sm90.cuh"

namespace mkernel::gemm_swap::detail {
using Swap128x112Ticket =
    SwapConfig<cute::Shape<cute::_128, cute::Int<112>, cute::_64>,
               cute::Shape<cute::_1, cute::_1, cute::_1>, cutlass::gemm::PersistentScheduler>;
}  // namespace mkernel::gemm_swap::detail
MKERNEL_GEMM_SWAP_TICKET_INSTANTIATE(Swap128x112Ticket, swap_128x112_tk)
