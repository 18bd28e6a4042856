// Device memory the substrate allocates beside PyTorch's caching allocator.
//
// A rank's freed tensors stay in torch's cache (reserved, not free), invisible to a raw
// cudaMalloc: the group's symmetric memory or an inter-node buffer could fail with gigabytes the
// process itself no longer uses (session 52: the W = 8 ring test on an 80 GB H100, eight ranks
// under MPS). torch's own allocations empty that cache and retry before they report out-of-
// memory; these do the same.
#pragma once

#include <c10/cuda/CUDACachingAllocator.h>
#include <cuda_runtime_api.h>

#include <cstddef>

namespace mkernel::comm {

// cudaMalloc; on cudaErrorMemoryAllocation the unused blocks of torch's cache go back to the
// device (all of this process's devices: torch has no per-device call) and it is tried once more.
inline cudaError_t malloc_after_torch_cache(void** ptr, size_t bytes) {
  cudaError_t err = cudaMalloc(ptr, bytes);
  if (err != cudaErrorMemoryAllocation) return err;
  cudaGetLastError();  // clear it: the retry's result is the one that counts
  c10::cuda::CUDACachingAllocator::emptyCache();
  return cudaMalloc(ptr, bytes);
}

}  // namespace mkernel::comm
