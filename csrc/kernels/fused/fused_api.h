// Host API of the fused GEMM + communication kernels (plain C++, no torch): the engine's hooked
// kernel with FusedHooks (fused_hooks.cuh), instantiated for the tile configs listed in
// fused_dispatch.cu.
#pragma once

#include <cuda_runtime.h>

#include "../gemm/gemm_api.h"
#include "fused_params.h"

namespace mkernel::fused {

// The tile configs with a fused kernel.
bool fused_supported(gemm::ConfigId id);

// The config a fused launch of an [m, n, k] GEMM on sm_count SMs runs (a shape model, the same
// on every rank: it reads shapes and the SM count only).
gemm::ConfigId fused_config(int m, int n, int k, int sm_count);

// The configs worth measuring for that launch, fused_config first (shapes and the SM count
// only: the same list on every rank): writes at most kMaxFusedConfigs into out, returns the count.
constexpr int kMaxFusedConfigs = 2;
int fused_configs(int m, int n, int k, int sm_count, gemm::ConfigId* out);

// Launches the fused kernel on l.stream (l.splits must be 1). m_order: device permutation of
// the M units, or null. Returns the launch error; a reason for a rejected problem in *reason.
cudaError_t run_fused(const gemm::Problem& p, gemm::ConfigId id, const gemm::Launch& l,
                      const int* m_order, const FusedParams& hooks, const char** reason);

// ag_gemm with TMA loads from the peers' memory (MKERNEL_FUSED_AG_PEER_TMA; fused_peer_tma.cuh):
// the rows of M unit block b come from source b * block_m / rows_per_source, loaded from
// a_src[s] ([rows_per_source, K]: this rank's x for s == rank, peer s's own slot of its gathered
// buffer otherwise). fused_peer_block_m: the config's block_m, or 0 where no such kernel exists
// (rows_per_source must be a multiple of it).
int fused_peer_block_m(gemm::ConfigId id);
cudaError_t run_fused_peer_a(const gemm::Problem& p, gemm::ConfigId id, const gemm::Launch& l,
                             const int* m_order, const FusedParams& hooks,
                             const void* const* a_src, int sources, int rows_per_source,
                             const char** reason);

}  // namespace mkernel::fused
