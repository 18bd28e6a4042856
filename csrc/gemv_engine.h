// Torch-facing entry to the small-M kernel (csrc/kernels/gemm/gemv_sm90.cu):
// what config "auto" of the GEMM engine runs at M <= 16.
#pragma once

#include <ATen/ATen.h>

#include <cstdint>

#ifdef MKERNEL_WITH_CUDA
#include "kernels/gemm/gemv_api.h"
#endif

namespace mkernel {

#ifdef MKERNEL_WITH_CUDA
// Whether the GEMV kernel can take a [m, k] · [n, k]ᵀ on `sm_count` SMs, and
// its by-shape plan (*plan). False for m > 16 or MKERNEL_GEMM_GEMV=0. Config
// "auto" runs this plan up to 8 rows; from 9 to 16 the small-M tuner's choice
// (engine_small_plan, gemm_engine.h), this plan when there is none.
bool gemv_planned(int64_t m, int64_t n, int64_t k, int sm_count, gemv::Plan* plan);

// out [m, n] = a [m, k] · b [n, k]ᵀ with `plan` on the current stream (its
// workspace from engine_workspace). Returns false (and launches nothing) when
// the kernel cannot take these operands (e.g. misaligned), so the caller can
// fall back to the engine.
bool engine_gemv(const char* op, const at::Tensor& a, const at::Tensor& b, const at::Tensor& out,
                 const gemv::Plan& plan);
#endif

}  // namespace mkernel
