// The merge entry of ring attention: folds a partial result (out_part, lse_part) of one KV
// block into the running (out_acc, lse_acc), in fp32 (attention_api.h, merge_partial).
// One thread per (b, i, h) row and 4-element chunk of d: memory-bound, one pass.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cmath>

#include "attention_api.h"

namespace mkernel::attention {
namespace {

template <class T>
__device__ __forceinline__ float to_float(T x) {
  return static_cast<float>(x);
}

template <class T>
__global__ void merge_kernel(float* __restrict__ out_acc, float* __restrict__ lse_acc,
                             const T* __restrict__ out_part, const float* __restrict__ lse_part,
                             int seq, int heads, int head_dim, long long rows,
                             long long out_batch_stride, long long lse_head_stride) {
  const int chunks = head_dim / 4;
  const long long idx = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (idx >= rows * chunks) return;
  const long long row = idx / chunks;  // (b, i, h) in out's [b, s, h, d] order
  const int c = static_cast<int>(idx - row * chunks) * 4;
  const int h = static_cast<int>(row % heads);
  const long long bi = row / heads;
  const int i = static_cast<int>(bi % seq);
  const long long b = bi / seq;
  const long long lse_idx = (b * heads + h) * lse_head_stride + i;
  const float la = lse_acc[lse_idx];
  const float lp = lse_part[lse_idx];
  const float mx = fmaxf(la, lp);
  float wa = 0.f, wp = 0.f;
  if (mx != -INFINITY) {
    const float ea = __expf(la - mx), ep = __expf(lp - mx);
    wa = ea / (ea + ep);
    wp = ep / (ea + ep);
  }
  const long long off = b * out_batch_stride + (static_cast<long long>(i) * heads + h) * head_dim + c;
  float* o = out_acc + off;
  const T* op = out_part + off;
#pragma unroll
  for (int e = 0; e < 4; ++e) o[e] = o[e] * wa + to_float(op[e]) * wp;
  // lse_acc is updated by a second kernel (merge_lse_kernel): a row's chunks run in different
  // threads (and blocks), and every one of them reads the old value.
}

__global__ void merge_lse_kernel(float* __restrict__ lse_acc, const float* __restrict__ lse_part,
                                 long long n, int seq, long long lse_head_stride) {
  const long long t = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (t >= n) return;
  const long long i = (t / seq) * lse_head_stride + t % seq;
  const float la = lse_acc[i], lp = lse_part[i];
  const float mx = fmaxf(la, lp);
  lse_acc[i] = mx == -INFINITY ? -INFINITY : mx + __logf(__expf(la - mx) + __expf(lp - mx));
}

}  // namespace

cudaError_t merge_partial(const Merge& m, cudaStream_t stream) {
  if (m.head_dim % 4 != 0 || m.batch < 1 || m.seq < 1 || m.heads < 1) return cudaErrorInvalidValue;
  const long long rows = static_cast<long long>(m.batch) * m.seq * m.heads;
  const long long threads = rows * (m.head_dim / 4);
  const int block = 256;
  const unsigned grid = static_cast<unsigned>((threads + block - 1) / block);
  const long long obs = m.out_batch_stride > 0
                            ? m.out_batch_stride
                            : static_cast<long long>(m.seq) * m.heads * m.head_dim;
  const long long lhs = m.lse_head_stride > 0 ? m.lse_head_stride : m.seq;
  if (m.part_dtype == DType::kBF16) {
    merge_kernel<__nv_bfloat16><<<grid, block, 0, stream>>>(
        m.out_acc, m.lse_acc, static_cast<const __nv_bfloat16*>(m.out_part), m.lse_part, m.seq,
        m.heads, m.head_dim, rows, obs, lhs);
  } else {
    merge_kernel<__half><<<grid, block, 0, stream>>>(
        m.out_acc, m.lse_acc, static_cast<const __half*>(m.out_part), m.lse_part, m.seq, m.heads,
        m.head_dim, rows, obs, lhs);
  }
  const long long n = rows;  // (b, h, i) rows of lse
  merge_lse_kernel<<<static_cast<unsigned>((n + block - 1) / block), block, 0, stream>>>(
      m.lse_acc, m.lse_part, n, m.seq, lhs);
  return cudaGetLastError();
}

}  // namespace mkernel::attention
