// gemm15's second control: variant 23's kernel (64x176, 4x2 clusters, 7 stages, non-persistent,
// one consumer warpgroup: the default pick below 8192 weight rows since s14run1) with the
// epilogue the 168-wide variants use (stored from the registers, no TMA store), so a run
// separates swap_64x168_c4x2's tile gain from the epilogue's cost at 333x3584x8192.
#include "gemm_swap_sm90.cuh"

namespace mkernel::gemm_swap::detail {
using Cfg_swap_64x176_c4x2_ds =
    SwapConfig<cute::Shape<cute::_64, cute::Int<176>, cute::_64>,
               cute::Shape<cute::_4, cute::_2, cute::_1>, cutlass::gemm::PersistentScheduler,
               /*Pingpong=*/false, /*DirectStore=*/true, /*Stages=*/7, /*OneConsumer=*/true>;
}  // namespace mkernel::gemm_swap::detail
MKERNEL_GEMM_SWAP_INSTANTIATE(Cfg_swap_64x176_c4x2_ds, swap_64x176_c4x2_ds)
