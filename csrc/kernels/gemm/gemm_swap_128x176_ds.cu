// gemm15's control: swap:1's tile (128x176, cooperative, no cluster, one tile per CTA at 8192
// weight rows) with the epilogue the 168-wide variants use (stored from the registers, no TMA
// store; its smem goes to one more stage), so a run separates the 168 tile's gain from the
// epilogue's cost. PersistentScheduler (swap:1 runs the stream-K kernel data-parallel).
#include "gemm_swap_sm90.cuh"

namespace mkernel::gemm_swap::detail {
using Cfg_swap_128x176_ds =
    SwapConfig<cute::Shape<cute::_128, cute::Int<176>, cute::_64>,
               cute::Shape<cute::_1, cute::_1, cute::_1>, cutlass::gemm::PersistentScheduler,
               /*Pingpong=*/false, /*DirectStore=*/true, /*Stages=*/0, /*OneConsumer=*/false,
               /*Stage2D=*/0>;
}  // namespace mkernel::gemm_swap::detail
MKERNEL_GEMM_SWAP_INSTANTIATE(Cfg_swap_128x176_ds, swap_128x176_ds)
