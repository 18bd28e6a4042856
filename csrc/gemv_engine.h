// Torch-facing entry to the small-M kernel (csrc/kernels/gemm/gemv_sm90.cu):
// what config "auto" of the GEMM engine runs at M <= 8.
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <string>

namespace mkernel {

#ifdef MKERNEL_WITH_CUDA
// The GEMV variant config "auto" runs for a [m, k] · [n, k]ᵀ on `sm_count` SMs,
// or -1 when the GEMM engine's tile kernels run it (m > 8, or
// MKERNEL_GEMM_GEMV=0). Chosen by shape alone, so a shape always gives the same bits.
int gemv_planned(int64_t m, int64_t n, int64_t k, int sm_count);

// out [m, n] = a [m, k] · b [n, k]ᵀ with GEMV variant `variant` on the current
// stream. Returns false (and launches nothing) when the kernel cannot take
// these operands (e.g. misaligned), so the caller can fall back to the engine.
bool engine_gemv(const char* op, const at::Tensor& a, const at::Tensor& b, const at::Tensor& out,
                 int variant);

// "gemv/w<warps>u<unroll>r<row_tiles>", what gemm_plan reports.
std::string gemv_plan_name(int variant);
#endif

}  // namespace mkernel
