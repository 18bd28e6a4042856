// Host API of mkernel's swapped-operand GEMM for small and mid M (17 <= M <=
// ~512 rows of A, decode batches): D[M,N] = A[M,K] · B[N,K]ᵀ computed as
// Dᵀ[N,M] = B · Aᵀ, so B's rows (the weights) are the MMA's M and A's rows
// (the tokens) its N.
//
// Why: a wgmma tile is a multiple of 64 rows of its M operand, but any multiple
// of 8 (up to 256) of its N operand. With A's rows on M, 333 tokens pad to 384
// rows (15% of the tensor-core work wasted; the engine ran 333x8192x8192 at
// 0.67-0.87x cuBLAS, device run 1 of 2026-12-01); on N they pad to 2 x 176 =
// 352 (5.7%), and 8192 weight rows make 64 x 2 = 128 tiles of 128x176: one
// wave on 132 SMs. For M <= 64 on narrow weights (3584 rows: 28 tiles of 128)
// a stream-K schedule spreads K over every SM instead.
//
// Kept apart from gemm::ConfigId (like the GEMV, gemv_api.h): it sums K in
// another order than the engine's tile configs (other bits), so it is not one
// of the engine tuner's same-bits candidates; the small-M tuner
// (gemm_autotune.cpp, engine_smallm_plan) times it against the engine's plan
// and caches the choice per shape (shared by ranks through the plan table).
#pragma once

#include <cuda_runtime.h>

#include <cstddef>

#include "gemm_api.h"

namespace mkernel::gemm_swap {

constexpr int kNumVariants = 33;

// How a stream-K kernel splits the work (a launch argument: variants share a kernel). The
// heuristic is CUTLASS's (data-parallel when the tiles fill at least half a wave).
struct Decomposition {
  enum Mode { kHeuristic, kDataParallel, kStreamK, kSplitK };
  Mode mode = kHeuristic;
  int splits = 1;  // kSplitK: K ranges per output tile
};

// "swap_128x176_c2x1" etc.: the tile in the swapped problem (B rows x A rows).
const char* variant_name(int variant);

// Why the problem can't run with this variant (nullptr if it can).
const char* can_implement(const gemm::Problem& p, int variant, int sm_count);

// Bytes of CUTLASS workspace (stream-K partials and locks; any content: the
// kernel initialises what it uses on the launch's stream).
size_t workspace_size(const gemm::Problem& p, int variant, int sm_count);

// Whether the variant's workspace must come zeroed, and is left zeroed by every launch (its
// first 64 KiB are tickets, as in the engine's split-K scratch: engine_workspace serves it);
// otherwise any content (CUTLASS initialises what it uses on the launch's stream).
bool zeroed_workspace(int variant);

// Launches on `stream`; `reason` gets CUTLASS's status text on failure.
cudaError_t run(const gemm::Problem& p, int variant, int sm_count, void* workspace,
                cudaStream_t stream, const char** reason = nullptr);

// Variants worth timing for this shape (at most `capacity`), by tile fit:
// returns how many were written to `out`.
int candidates(int m, int n, int k, int sm_count, int* out, int capacity);

}  // namespace mkernel::gemm_swap
