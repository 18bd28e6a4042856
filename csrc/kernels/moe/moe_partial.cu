// The several-node combine's owner-side partial sums (see moe_partial_api.h): one CTA per token
// slot at a time (grid-stride), its k rows and weights in shared memory, threads across H.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "moe_partial_api.h"

namespace mkernel::moe_partial {
namespace {

constexpr int kThreads = 256;

template <class T> struct Elem;
template <> struct Elem<float> {
  __device__ static float load(float v) { return v; }
  __device__ static float store(float v) { return v; }
};
template <> struct Elem<__nv_bfloat16> {
  __device__ static float load(__nv_bfloat16 v) { return __bfloat162float(v); }
  __device__ static __nv_bfloat16 store(float v) { return __float2bfloat16_rn(v); }
};
template <> struct Elem<__half> {
  __device__ static float load(__half v) { return __half2float(v); }
  __device__ static __half store(float v) { return __float2half_rn(v); }
};

template <class TIn, class TOut>
__global__ void __launch_bounds__(kThreads) partial_kernel(const TIn* __restrict__ y,
                                                           const int64_t* __restrict__ rows,
                                                           const float* __restrict__ w,
                                                           TOut* __restrict__ out, int64_t n, int k,
                                                           int64_t h) {
  __shared__ int64_t row[kMaxChoices];
  __shared__ float weight[kMaxChoices];
  for (int64_t t = blockIdx.x; t < n; t += gridDim.x) {
    if (threadIdx.x < k) {
      row[threadIdx.x] = rows[t * k + threadIdx.x];
      weight[threadIdx.x] = w[t * k + threadIdx.x];
    }
    __syncthreads();
    for (int64_t c = threadIdx.x; c < h; c += kThreads) {
      float acc = 0.0f;
      for (int j = 0; j < k; ++j) {
        // A choice not held here adds exactly +0 in the ATen sequence (masked row times w), which
        // leaves acc's bits unchanged (acc is never -0: it starts at +0 and x + (-x) is +0).
        if (row[j] >= 0) acc = __fadd_rn(acc, __fmul_rn(Elem<TIn>::load(y[row[j] * h + c]), weight[j]));
      }
      out[t * h + c] = Elem<TOut>::store(acc);
    }
    __syncthreads();  // row / weight are rewritten for the next slot
  }
}

template <class TIn>
cudaError_t launch_in(const void* y, const int64_t* rows, const float* w, void* out, moe_ep::DType out_dtype,
                      int64_t n, int k, int64_t h, int grid, cudaStream_t s) {
  const auto* yy = static_cast<const TIn*>(y);
  switch (out_dtype) {
    case moe_ep::DType::kFP32:
      partial_kernel<TIn, float><<<grid, kThreads, 0, s>>>(yy, rows, w, static_cast<float*>(out), n, k, h);
      break;
    case moe_ep::DType::kBF16:
      partial_kernel<TIn, __nv_bfloat16><<<grid, kThreads, 0, s>>>(yy, rows, w, static_cast<__nv_bfloat16*>(out),
                                                                   n, k, h);
      break;
    case moe_ep::DType::kFP16:
      partial_kernel<TIn, __half><<<grid, kThreads, 0, s>>>(yy, rows, w, static_cast<__half*>(out), n, k, h);
      break;
  }
  return cudaGetLastError();
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
