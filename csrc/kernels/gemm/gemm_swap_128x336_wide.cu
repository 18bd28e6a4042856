// Swapped-operand GEMM with all tokens in one tile: 128 weight rows x 336 tokens (3 TMA boxes /
// wgmmas of 112; 333 tokens pad to 336), 64-deep k-blocks, 3 stages of 58 KB, the weight blocks'
// k-blocks spread over every SM, split tiles summed through tickets (gemm_swap_wide_sm90.cuh).
// 333 tokens x 8192 weight rows: 64 tiles x 128 k-blocks = 62.1 per CTA on 132 SMs.
#include "gemm_swap_wide_sm90.cuh"

MKERNEL_GEMM_SWAP_WIDE_INSTANTIATE(112, 3, 3, swap_128x336_wide)
