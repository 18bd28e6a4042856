// The native backward's host entry points (attention_bwd_api.h): checks, then the runtime ->
// template switch over (dtype, head dim, causal) and the three launches.
#include <cstdint>

#include "attention_bwd_kernel.cuh"

namespace mkernel::attention {

namespace {

// 64 query rows x 64 keys per step, 8 warps (4 x 2 over every GEMM's output): dK + dV take 64
// fp32 registers per thread at d = 128, S and dP 32, dQ 32 (transient).
constexpr int kBwdBlockM = 64;
constexpr int kBwdBlockN = 64;
constexpr int kBwdWarps = 8;

template <class Element, int kHeadDim, bool kCausal>
cudaError_t launch_backward(const BwdProblem& p, cudaStream_t stream) {
  using T = bwd::BwdTraits<Element, kHeadDim, kBwdBlockM, kBwdBlockN, kBwdWarps, kCausal>;
  const int64_t rows = int64_t(p.batch) * p.seq_q * p.heads;
  const unsigned row_blocks = static_cast<unsigned>((rows + 7) / 8);  // a warp per row
  bwd::attention_bwd_preprocess<Element, kHeadDim><<<row_blocks, 256, 0, stream>>>(p);
  cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess) return err;

  auto* main_kernel = bwd::attention_bwd_main<T>;
  err = cudaFuncSetAttribute(main_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, T::kSmemBytes);
  if (err != cudaSuccess) return err;
  const dim3 grid((p.seq_kv + T::kBlockN - 1) / T::kBlockN, p.heads_kv, p.batch);
  main_kernel<<<grid, T::kThreads, T::kSmemBytes, stream>>>(p);
  err = cudaGetLastError();
  if (err != cudaSuccess) return err;

  bwd::attention_bwd_convert_dq<Element, kHeadDim><<<row_blocks, 256, 0, stream>>>(p);
  return cudaGetLastError();
}

template <class Element, int kHeadDim>
cudaError_t launch_causal(const BwdProblem& p, cudaStream_t stream) {
  return p.causal ? launch_backward<Element, kHeadDim, true>(p, stream)
                  : launch_backward<Element, kHeadDim, false>(p, stream);
}

bool aligned16(const void* ptr) { return (reinterpret_cast<uintptr_t>(ptr) & 15u) == 0; }

}  // namespace

const char* can_implement_backward(const BwdProblem& p) {
  if (p.dtype != DType::kBF16 && p.dtype != DType::kFP16) return "dtype must be bf16 or fp16";
  if (p.head_dim != 64 && p.head_dim != 128) return "head_dim must be 64 or 128";
  if (p.batch < 1 || p.seq_q < 1 || p.seq_kv < 1 || p.heads < 1 || p.heads_kv < 1)
    return "batch, seq_q, seq_kv, heads and heads_kv must be >= 1";
  if (p.heads % p.heads_kv != 0) return "heads must be a multiple of heads_kv";
  if (p.batch > 65535 || p.heads_kv > 65535) return "batch and heads_kv must be <= 65535 (grid)";
  const void* ptrs[] = {p.q, p.k, p.v, p.out, p.dout, p.lse, p.dq, p.dk, p.dv, p.dq_accum, p.delta};
  for (const void* ptr : ptrs)
    if (ptr == nullptr || !aligned16(ptr)) return "every tensor must be non-null and 16-byte aligned";
  return nullptr;
}

cudaError_t run_backward(const BwdProblem& p, cudaStream_t stream, const char** reason) {
  const char* why = can_implement_backward(p);
  if (reason != nullptr) *reason = why;
  if (why != nullptr) return cudaErrorInvalidValue;
  const bool bf16 = p.dtype == DType::kBF16;
  if (p.head_dim == 128)
    return bf16 ? launch_causal<cutlass::bfloat16_t, 128>(p, stream)
                : launch_causal<cutlass::half_t, 128>(p, stream);
  return bf16 ? launch_causal<cutlass::bfloat16_t, 64>(p, stream)
              : launch_causal<cutlass::half_t, 64>(p, stream);
}

}  // namespace mkernel::attention
