// Host API of mkernel's small-M kernel: D[M,N] = A[M,K] · B[N,K]ᵀ for M <= 16
// (decode), bf16/fp16 in and out, fp32 accumulation.
//
// At M <= 16 the GEMM is a stream of B (N·K·2 bytes) through the SMs: the
// persistent tile kernels keep at most a few tiles per SM in flight and ran at
// 0.61-0.92x cuBLAS there (device run 1). This kernel (gemv_sm90.cu) is a
// plain grid of small blocks that keeps the whole GPU's load queue full of
// 16-byte reads of B.
//
// Kept apart from gemm::ConfigId: it is not a tile configuration of the
// engine, and the engine's plan dispatches to it by M alone (gemm.cpp), so a
// shape always runs the same variant and gives the same bits.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <string>

#include "gemm_api.h"

namespace mkernel::gemv {

// Rows of A one launch handles: the 8 columns of an m16n8k16 MMA, twice (two
// MMAs share each fragment of B from 9 rows on).
constexpr int kMaxRows = 16;

// How a block streams B: `warps` warps split K, each owning `row_tiles` tiles of
// 16 rows of B. stages == 0: registers, `unroll` 64-element K steps of loads in
// flight per lane (double-buffered); stages > 0: cp.async into shared memory,
// `stages` steps in flight per lane. `blocks_per_sm`: how many fit on an SM.
struct Variant {
  int warps;
  int unroll;
  int row_tiles;
  int stages;
  int blocks_per_sm;
  // Row-split (session 9): the warps of a block split B's rows (one 16-row tile each) and share
  // A's K slice staged in shared memory; K split over the `splits` blocks of a cluster.
  bool rows = false;
  // K-chunked (session 9): warps split K as in the register variants, A's slice of each round
  // of the block staged in shared memory (double-buffered, a barrier per round).
  bool kchunk = false;
};
constexpr int kNumVariants = 16;
Variant variant(int index);

// What runs: a variant, and over how many blocks each 16-row tile's K is split
// (cp.async variants only; their fp32 partials are added in slice order, by
// whichever block of the tile finishes last: the bits do not depend on timing).
struct Plan {
  int variant = 0;
  int splits = 1;
};
// "gemv/w<warps>u<unroll>r<row_tiles>", "gemv/w<warps>s<stages>[/k<splits>]" or
// "gemv/rows_w<warps>u<unroll>[/k<splits>]" or "gemv/ks_w<warps>r<row_tiles>"
// (what gemm_plan reports).
std::string plan_name(const Plan& plan);

// The plan config "auto" runs for this shape (deterministic: no timing).
Plan select_plan(int m, int n, int k, int sm_count);

// `variant` with its by-shape K split: the row-split variants split K over the most blocks
// (at most 8, one cluster) that still fit one wave on `sm_count` SMs; the others 1.
Plan plan_for_variant(int variant, int m, int n, int k, int sm_count);

// Why the problem can't run with this plan (nullptr if it can): M, alignment,
// grouped problems, splits.
const char* can_implement(const gemm::Problem& p, const Plan& plan);

// Device workspace the plan needs (0 without splits): zero before its first
// use; every launch leaves it zero, so one workspace serves every launch on a
// stream (the engine's split-K workspace included: same layout of tickets).
size_t workspace_size(const gemm::Problem& p, const Plan& plan);

// Launches on `stream`; returns the launch error.
cudaError_t run(const gemm::Problem& p, const Plan& plan, cudaStream_t stream,
                void* workspace = nullptr);

}  // namespace mkernel::gemv
