// One device-to-device copy asked of the copy engines (CUDA only).
//
// A plain cudaMemcpyAsync between two buffers of one GPU may run as a kernel on the SMs (NVIDIA/
// nccl#2177: ~1.6 TB/s, i.e. an SM kernel; benchmarks/NOTES.md "xnode7"), which waits forever
// behind a persistent grid that fills this process's SMs while it waits for what the copy
// brings. cudaMemcpyBatchAsync's PreferOverlapWithCompute hint asks for the copy engines (the
// submission NCCL's copy-engine collectives use). It is a hint, and the batch call may refuse:
// callers that must not touch the SMs treat cudaErrorNotSupported / cudaErrorInvalidValue as
// "no copy-engine submission here" (the net path falls back to a plain copy and notes it;
// ag_gemm's copy-engine route is then not offered).
#pragma once

#ifdef MKERNEL_WITH_CUDA

#include <cuda_runtime.h>

#include <cstddef>

namespace mkernel::comm {

// Enqueues dst[0, bytes) = src[0, bytes) on `stream` (source read in stream order) as a batch of
// one copy with the PreferOverlapWithCompute hint. Returns the runtime's answer;
// cudaErrorNotSupported when built with CUDA < 12.8 (no batch API).
inline cudaError_t ce_copy_async(void* dst, const void* src, size_t bytes, cudaStream_t stream) {
#if CUDART_VERSION >= 12080
  void* dsts[1] = {dst};
  const void* srcs[1] = {src};
  size_t sizes[1] = {bytes};
  cudaMemcpyAttributes attr{};
  attr.srcAccessOrder = cudaMemcpySrcAccessOrderStream;
  attr.flags = cudaMemcpyFlagPreferOverlapWithCompute;
  size_t first = 0;
#if CUDART_VERSION >= 13000
  return cudaMemcpyBatchAsync(dsts, srcs, sizes, 1, &attr, &first, 1, stream);
#else
  size_t fail = 0;
  return cudaMemcpyBatchAsync(dsts, const_cast<void**>(srcs), sizes, 1, &attr, &first, 1, &fail,
                              stream);
#endif
#else
  (void)dst, (void)src, (void)bytes, (void)stream;
  return cudaErrorNotSupported;
#endif
}

}  // namespace mkernel::comm

#endif  // MKERNEL_WITH_CUDA
