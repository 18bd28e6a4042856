// The several-node combine's owner-side partial sums (see moe_partial_api.h): one CTA per token
// slot at a time (grid-stride), its k rows and weights in shared memory, threads across H.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cstdint>

#include "../comm/fp32_accum.cuh"
#include "moe_partial_api.h"

namespace mkernel::moe_partial {
namespace {

constexpr int kThreads = 256;

using comm::Elem;  // fp32 accumulation: one rounding rule for every reduction

// Where a slot's k (row, weight) pairs come from: the decoded tables (rows, w), or (moe17) the
// routes and weights as all-gathered ([n, 3k] 32-bit words per slot: k int64 route codes, then
// k fp32 weights), decoded here as moe_nodes.cpp's decode() + "held here" would: the row where
// the code is >= 0, names this rank and a row below y_rows, else -1.
struct Tables {
  const int64_t* rows;
  const float* w;
  __device__ __forceinline__ void load(int64_t t, int j, int k, int64_t& row, float& weight) const {
    row = rows[t * k + j];
    weight = w[t * k + j];
  }
};
struct Routed {
  const uint32_t* words;
  int me;
  int64_t y_rows;
  __device__ __forceinline__ void load(int64_t t, int j, int k, int64_t& row, float& weight) const {
    const uint32_t* slot = words + t * 3 * k;
    const int64_t code = static_cast<int64_t>(static_cast<uint64_t>(slot[2 * j]) |
                                              (static_cast<uint64_t>(slot[2 * j + 1]) << 32));
    // code >= 0: rank = floor(code / 2^32) and row = the rest, as decode's at::div(.., "floor").
    const int64_t rank = code >= 0 ? code >> 32 : -1;
    const int64_t r = code & 0xffffffffLL;
    row = rank == me && r < y_rows ? r : -1;
    weight = __uint_as_float(slot[2 * k + j]);
  }
};

// V consecutive elements per thread (16-byte loads of y when V * sizeof(TIn) == 16; the launch
// picks V = 1 unless h and the pointers allow it). Every element takes the same operations in
// the same order whatever V.
template <class TIn, class TOut, int V, class Source>
__global__ void __launch_bounds__(kThreads, 4) partial_kernel(const TIn* __restrict__ y, const Source src,
                                                           TOut* __restrict__ out, int64_t n, int k,
                                                           int64_t h) {
  struct alignas(sizeof(TIn) * V) InVec { TIn v[V]; };
  struct alignas(sizeof(TOut) * V) OutVec { TOut v[V]; };
  __shared__ int64_t row[kMaxChoices];
  __shared__ float weight[kMaxChoices];
  const int64_t hv = h / V;
  for (int64_t t = blockIdx.x; t < n; t += gridDim.x) {
    if (threadIdx.x < k) src.load(t, static_cast<int>(threadIdx.x), k, row[threadIdx.x], weight[threadIdx.x]);
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

template <class TIn, class TOut, class Source>
cudaError_t launch_out(const TIn* y, const Source& src, TOut* out, int64_t n, int k, int64_t h, int grid,
                       cudaStream_t s) {
  constexpr int kV = 16 / sizeof(TIn);
  const bool vec = h % kV == 0 && reinterpret_cast<uintptr_t>(y) % 16 == 0 &&
                   reinterpret_cast<uintptr_t>(out) % (sizeof(TOut) * kV) == 0;
  if (vec) {
    partial_kernel<TIn, TOut, kV, Source><<<grid, kThreads, 0, s>>>(y, src, out, n, k, h);
  } else {
    partial_kernel<TIn, TOut, 1, Source><<<grid, kThreads, 0, s>>>(y, src, out, n, k, h);
  }
  return cudaGetLastError();
}

template <class TIn, class Source>
cudaError_t launch_in(const void* y, const Source& src, void* out, moe_ep::DType out_dtype, int64_t n, int k,
                      int64_t h, int grid, cudaStream_t s) {
  const auto* yy = static_cast<const TIn*>(y);
  switch (out_dtype) {
    case moe_ep::DType::kFP32:
      return launch_out(yy, src, static_cast<float*>(out), n, k, h, grid, s);
    case moe_ep::DType::kBF16:
      return launch_out(yy, src, static_cast<__nv_bfloat16*>(out), n, k, h, grid, s);
    case moe_ep::DType::kFP16:
      return launch_out(yy, src, static_cast<__half*>(out), n, k, h, grid, s);
  }
  return cudaErrorInvalidValue;
}

template <class Source>
cudaError_t launch_source(const void* y, moe_ep::DType y_dtype, const Source& src, void* out,
                          moe_ep::DType out_dtype, int64_t n, int k, int64_t h, int sm_count, cudaStream_t s) {
  if (n == 0 || h == 0) return cudaSuccess;
  if (k < 1 || k > kMaxChoices) return cudaErrorInvalidValue;
  const int grid = static_cast<int>(n < 8LL * sm_count ? n : 8LL * sm_count);
  switch (y_dtype) {
    case moe_ep::DType::kBF16:
      return launch_in<__nv_bfloat16>(y, src, out, out_dtype, n, k, h, grid, s);
    case moe_ep::DType::kFP16:
      return launch_in<__half>(y, src, out, out_dtype, n, k, h, grid, s);
    case moe_ep::DType::kFP32:
      return launch_in<float>(y, src, out, out_dtype, n, k, h, grid, s);
  }
  return cudaErrorInvalidValue;
}

// moe17: slot t's routes and weights as 3k 32-bit words (launch_pack_routes).
__global__ void __launch_bounds__(256) pack_routes_kernel(const int64_t* __restrict__ route,
                                                          const float* __restrict__ w, int64_t t_rows,
                                                          int64_t slots, int k, uint32_t* __restrict__ out) {
  const int64_t total = slots * k;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t t = i / k;
    const int j = static_cast<int>(i - t * k);
    const int64_t code = t < t_rows ? route[i] : -1;
    const float weight = t < t_rows && code >= 0 ? w[i] : 0.0f;
    uint32_t* slot = out + t * 3 * k;
    slot[2 * j] = static_cast<uint32_t>(static_cast<uint64_t>(code));
    slot[2 * j + 1] = static_cast<uint32_t>(static_cast<uint64_t>(code) >> 32);
    slot[2 * k + j] = __float_as_uint(weight);
  }
}

}  // namespace

cudaError_t launch(const void* y, moe_ep::DType y_dtype, const int64_t* rows, const float* w, void* out,
                   moe_ep::DType out_dtype, int64_t n, int k, int64_t h, int sm_count, cudaStream_t s) {
  return launch_source(y, y_dtype, Tables{rows, w}, out, out_dtype, n, k, h, sm_count, s);
}

cudaError_t launch_routed(const void* y, moe_ep::DType y_dtype, const uint32_t* words, int me, int64_t y_rows,
                          void* out, moe_ep::DType out_dtype, int64_t n, int k, int64_t h, int sm_count,
                          cudaStream_t s) {
  return launch_source(y, y_dtype, Routed{words, me, y_rows}, out, out_dtype, n, k, h, sm_count, s);
}

cudaError_t launch_pack_routes(const int64_t* route, const float* w, int64_t t_rows, int64_t slots, int k,
                               uint32_t* out, int sm_count, cudaStream_t s) {
  if (slots == 0 || k == 0) return cudaSuccess;
  const int64_t total = slots * k;
  const int grid = static_cast<int>(std::max<int64_t>(1, std::min<int64_t>((total + 255) / 256, 4LL * sm_count)));
  pack_routes_kernel<<<grid, 256, 0, s>>>(route, w, t_rows, slots, k, out);
  return cudaGetLastError();
}

}  // namespace mkernel::moe_partial
