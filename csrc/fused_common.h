// Torch glue shared by the fused GEMM + communication ops (ag_gemm, gemm_rs, gemm_ar) on CUDA:
// the group's symmetric state, the launch of the fused kernel (kernels/fused/fused_api.h), the
// M-unit order, and the once-per-process notes of a fallback.
#pragma once

#ifdef MKERNEL_WITH_CUDA

#include <ATen/ATen.h>

#include <cstdint>
#include <vector>

#include "comm/symmetric_group.h"
#include "kernels/fused/fused_api.h"

namespace mkernel::fused_glue {

// The engine Problem of a [rows, k] · w[n, k]ᵀ -> d GEMM whose A lives at `a` (device memory
// of w's dtype).
gemm::Problem problem(const char* op, const void* a, const at::Tensor& w, void* d, int64_t rows,
                      int64_t n, int64_t k);

// Launches the fused kernel on the current stream with `hooks`; errors name `op`. `order` is
// the priority of each source rank (lower = earlier) for ordering the M units by the rows' owners
// (rank_rows rows per rank), or empty for the natural order.
void launch(const char* op, const gemm::Problem& p, gemm::ConfigId config, const at::Tensor& like,
            const fused::FusedParams& hooks, const std::vector<int>& order, int64_t rank_rows);

// Logs (once per process and `what`) that `op` runs unfused and why.
void note_fallback(const char* op, const char* why);

// Whether the current stream is capturing a CUDA graph.
bool capturing();

}  // namespace mkernel::fused_glue

#endif  // MKERNEL_WITH_CUDA
