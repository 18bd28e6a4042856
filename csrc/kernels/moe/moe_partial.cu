// The several-node combine's owner-side partial sums (see moe_partial_api.h): one CTA per token
// slot at a time (grid-stride), its k rows and weights in shared memory, threads across H.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "../comm/fp32_accum.cuh"
#include "moe_partial_api.h"

namespace mkernel::moe_partial {
namespace {

constexpr int kThreads = 256;

using comm::Elem;  // fp32 accumulation: one rounding rule for every reduction

// V consecutive elements per thread (16-byte loads of y when V * sizeof(TIn) == 16; the launch
// picks V = 1 unless h and the pointers allow it). Every element takes the same operations in
// the same order whatever V.
template <class TIn, class TOut, int V>
__global__ void __launch_bounds__(kThreads, 4) partial_kernel(const TIn* __restrict__ y,
                                                           const int64_t* __restrict__ rows,
                                                           const float* __restrict__ w,
                                                           TOut* __restrict__ out, int64_t n, int k,
                                                           int64_t h) {
  struct alignas(sizeof(TIn) * V) InVec { TIn v[V]; };
  struct alignas(sizeof(TOut) * V) OutVec { TOut v[V]; };
  __shared__ int64_t row[kMaxChoices];
  __shared__ float weight[kMaxChoices];
  const int64_t hv = h / V;
  for (int64_t t = blockIdx.x; t < n; t += gridDim.x) {
    if (threadIdx.x < k) {
      row[threadIdx.x] = rows[t * k + threadIdx.x];
      weight[threadIdx.x] = w[t * k + threadIdx.x];
    }
    __syncthreads();
    for (int64_t c = threadIdx.x; c < hv; c += kThreads) {
      float acc[V];
#pragma unroll
      for (int i = 0; i < V; ++i) acc[i] = 0.0f;
      for (int j = 0; j < k; ++j) {
        // A choice not held here adds exactly +0 in the ATen sequence (masked row times w), which
        // leaves acc's bits unchanged (acc is never -0: it starts at +0 and x + (-x) is +0).
        if (row[j] < 0) continue;
        const InVec in = reinterpret_cast<const InVec*>(y + row[j] * h)[c];
#pragma unroll
        for (int i = 0; i < V; ++i) acc[i] = __fadd_rn(acc[i], __fmul_rn(Elem<TIn>::load(in.v[i]), weight[j]));
      }
      OutVec o;
#pragma unroll
      for (int i = 0; i < V; ++i) o.v[i] = Elem<TOut>::store(acc[i]);
      reinterpret_cast<OutVec*>(out + t * h)[c] = o;
    }
    __syncthreads();  // row / weight are rewritten for the next slot
  }
}

template <class TIn, class TOut>
cudaError_t launch_out(const TIn* y, const int64_t* rows, const float* w, TOut* out, int64_t n, int k,
                       int64_t h, int grid, cudaStream_t s) {
  constexpr int kV = 16 / sizeof(TIn);
  const bool vec = h % kV == 0 && reinterpret_cast<uintptr_t>(y) % 16 == 0 &&
                   reinterpret_cast<uintptr_t>(out) % (sizeof(TOut) * kV) == 0;
  if (vec) {
    partial_kernel<TIn, TOut, kV><<<grid, kThreads, 0, s>>>(y, rows, w, out, n, k, h);
  } else {
    partial_kernel<TIn, TOut, 1><<<grid, kThreads, 0, s>>>(y, rows, w, out, n, k, h);
  }
  return cudaGetLastError();
}

template <class TIn>
cudaError_t launch_in(const void* y, const int64_t* rows, const float* w, void* out, moe_ep::DType out_dtype,
                      int64_t n, int k, int64_t h, int grid, cudaStream_t s) {
  const auto* yy = static_cast<const TIn*>(y);
  switch (out_dtype) {
    case moe_ep::DType::kFP32:
      return launch_out(yy, rows, w, static_cast<float*>(out), n, k, h, grid, s);
    case moe_ep::DType::kBF16:
      return launch_out(yy, rows, w, static_cast<__nv_bfloat16*>(out), n, k, h, grid, s);
    case moe_ep::DType::kFP16:
      return launch_out(yy, rows, w, static_cast<__half*>(out), n, k, h, grid, s);
  }
  return cudaErrorInvalidValue;
}

}  // namespace

cudaError_t launch(const void* y, moe_ep::DType y_dtype, const int64_t* rows, const float* w, void* out,
                   moe_ep::DType out_dtype, int64_t n, int k, int64_t h, int sm_count, cudaStream_t s) {
  if (n == 0 || h == 0) return cudaSuccess;
  if (k < 1 || k > kMaxChoices) return cudaErrorInvalidValue;
  const int grid = static_cast<int>(n < 8LL * sm_count ? n : 8LL * sm_count);
  switch (y_dtype) {
    case moe_ep::DType::kBF16:
      return launch_in<__nv_bfloat16>(y, rows, w, out, out_dtype, n, k, h, grid, s);
    case moe_ep::DType::kFP16:
      return launch_in<__half>(y, rows, w, out, out_dtype, n, k, h, grid, s);
    case moe_ep::DType::kFP32:
      return launch_in<float>(y, rows, w, out, out_dtype, n, k, h, grid, s);
  }
  return cudaErrorInvalidValue;
}

}  // namespace mkernel::moe_partial
