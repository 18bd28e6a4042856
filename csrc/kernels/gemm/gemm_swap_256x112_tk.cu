// Swapped-operand GEMM, 256x112 tiles on every SM (gemm_swap_ticket_sm90.cuh): each consumer
// warpgroup 128 weight rows x 112 tokens (two m64n112k16 per k-step). Per FMA a quarter fewer
// TMA bytes into shared memory than 128x112 (0.026 against 0.034 B) and half the tokens' L2
// reads; session 10's 256x176 ran slower than 128x176, but with CUTLASS's stream-K turnstile and
// the register-stored epilogue: here with tickets and the TMA epilogue, this separates the wider
// weights tile's rate from those.
#include "gemm_swap_ticket_sm90.cuh"

namespace mkernel::gemm_swap::detail {
using Swap256x112Ticket =
    SwapConfig<cute::Shape<cute::_256, cute::Int<112>, cute::_64>,
               cute::Shape<cute::_1, cute::_1, cute::_1>, cutlass::gemm::PersistentScheduler>;
}  // namespace mkernel::gemm_swap::detail
MKERNEL_GEMM_SWAP_TICKET_INSTANTIATE(Swap256x112Ticket, swap_256x112_tk)
