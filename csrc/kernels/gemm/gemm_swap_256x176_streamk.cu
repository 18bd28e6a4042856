// Swapped-operand GEMM, 256x176 tiles (each consumer warpgroup 128 weight rows x 176 tokens: two
// m64n176k16 per k-step), stream-K scheduler (decomposition chosen per variant at launch),
// epilogue stored from the registers (no shared-memory stage: 4 mainloop stages of 55 KB fit).
//
// Why 256 rows: at 333 tokens the swapped 128x176 tile runs at the SM's shared-memory bandwidth,
// not its tensor rate. Per k-step a warpgroup's wgmma reads (64 + N) x 32 B of shared memory for
// 64·N·16 FMAs, and TMA writes (M + N) x 2 B per k for M·N FMAs: 128x176 needs ~0.070 B/FMA
// (~142 B/clk at 2048 FMA/clk, over the SM's 128), 256x176 ~0.062 (127 B/clk), the ratio of
// cuBLAS's 128x256 tile; s10 run 1 measured cuBLAS at ~11% more FMAs per SM than our 128x176,
// that ratio. 8192 weight rows make only 64 tiles of 128 k-blocks: stream-K (or split-K by 2)
// puts ~62-64 k-blocks on each of 132 (128) SMs. 176 accumulator registers per consumer thread.
// (A 168-wide token tile, 333 tokens in 336, does not build: the TMA box of the tokens wants
// an even number of 8-row swizzle atoms.)
#include "gemm_swap_sm90.cuh"

namespace mkernel::gemm_swap::detail {
using Swap256x176StreamK =
    SwapConfig<cute::Shape<cute::_256, cute::Int<176>, cute::_64>,
               cute::Shape<cute::_1, cute::_1, cute::_1>, cutlass::gemm::StreamKScheduler,
               /*Pingpong=*/false, /*DirectStore=*/true>;
}  // namespace mkernel::gemm_swap::detail
MKERNEL_GEMM_SWAP_INSTANTIATE(Swap256x176StreamK, swap_256x176_streamk)
