// Host API of mkernel's small-M kernel: D[M,N] = A[M,K] · B[N,K]ᵀ for M <= 8
// (decode), bf16/fp16 in and out, fp32 accumulation.
//
// At M <= 8 the GEMM is a stream of B (N·K·2 bytes) through the SMs: the
// persistent tile kernels keep at most a few tiles per SM in flight and run at
// ~0.7x cuBLAS there. This kernel (gemv_sm90.cu) is a plain grid of small
// blocks that keeps the whole GPU's load queue full of 16-byte reads of B.
//
// Kept apart from gemm::ConfigId: it is not a tile configuration of the
// engine, and the engine's plan dispatches to it by M alone (gemm.cpp), so a
// shape always runs the same variant and gives the same bits.
#pragma once

#include <cuda_runtime.h>

#include "gemm_api.h"

namespace mkernel::gemv {

// Rows of A one launch handles: the 8 columns of one m16n8k16 MMA.
constexpr int kMaxRows = 8;

// How a block streams B: `warps` warps split K, each owning `row_tiles` tiles of
// 16 rows of B. stages == 0: registers, `unroll` 64-element K steps of loads in
// flight per lane (double-buffered); stages > 0: cp.async into shared memory,
// `stages` steps in flight per lane.
struct Variant {
  int warps;
  int unroll;
  int row_tiles;
  int stages;
};
constexpr int kNumVariants = 10;
Variant variant(int index);
// "gemv/w<warps>u<unroll>r<row_tiles>" or "gemv/w<warps>s<stages>" (what gemm_plan reports).
const char* variant_name(int index);

// The variant config "auto" runs for this shape (deterministic: no timing).
int select_variant(int m, int n, int k, int sm_count);

// Why the problem can't run (nullptr if it can): M, alignment, grouped problems.
const char* can_implement(const gemm::Problem& p);

// Launches variant `index` on `stream`; returns the launch error.
cudaError_t run(const gemm::Problem& p, int index, cudaStream_t stream);

}  // namespace mkernel::gemv
