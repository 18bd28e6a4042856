// CuTe's TMA descriptors encoded through a driver entry point looked up once per process.
//
// Why: a CUTLASS 3.x kernel builds its TMA descriptors on the host at every launch (they hold
// the tensors' addresses): the swapped GEMM three (weights, tokens, the epilogue's store).
// Each goes through CUTLASS_CUDA_DRIVER_WRAPPER_CALL(cuTensorMapEncodeTiled), which
// cutlass/cuda_host_adapter.hpp defines as a lookup of the driver function by name
// (cudaGetDriverEntryPoint[ByVersion]) on every call: three string lookups in the runtime per
// launch, a host cost others have measured and removed the same way (NVIDIA/cutlass#3003;
// TransformerEngine caches its driver entry points). The small-M path launches kernels of
// 20-75 us, where eager calls pay for their host time (benchmarks/NOTES.md, "Small M, session
// 11"). Here the lookup runs once (a function-local static), then each encode is a direct call.
//
// Include it before any CUTLASS/CuTe header of the translation unit: the macro is read where
// CuTe's TMA code (cute/atom/copy_traits_sm90_tma.hpp) is parsed (included later, it changes
// nothing). The GEMM engine's and the swapped GEMM's units include it first (gemm_sm90.cuh,
// gemm_swap_sm90.cuh); an inline CuTe template instantiated alike in a unit without it (the
// fused and attention kernels) may keep CUTLASS's lookup there, or take this one (the linker
// keeps one copy): both encode the same descriptor.
#pragma once

#include <cuda.h>
#include <cudaTypedefs.h>  // at global scope before CUTLASS includes it inside its namespace
#include <cuda_runtime_api.h>

#include "cutlass/cuda_host_adapter.hpp"

namespace mkernel::driver {

// The driver's `name` at ABI version `version`, or nullptr.
inline void* entry_point(const char* name, int version) {
  void* fn = nullptr;
  cudaDriverEntryPointQueryResult found = cudaDriverEntryPointSymbolNotFound;
  const cudaError_t err =
      cudaGetDriverEntryPointByVersion(name, &fn, version, cudaEnableDefault, &found);
  return err == cudaSuccess && found == cudaDriverEntryPointSuccess ? fn : nullptr;
}

template <class... Args>
CUresult cached_cuTensorMapEncodeTiled(Args... args) {
  static const auto fn = reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(
      entry_point("cuTensorMapEncodeTiled", 12000));
  return fn != nullptr ? fn(args...) : CUDA_ERROR_UNKNOWN;
}

template <class... Args>
CUresult cached_cuTensorMapEncodeIm2col(Args... args) {
  static const auto fn = reinterpret_cast<PFN_cuTensorMapEncodeIm2col_v12000>(
      entry_point("cuTensorMapEncodeIm2col", 12000));
  return fn != nullptr ? fn(args...) : CUDA_ERROR_UNKNOWN;
}

}  // namespace mkernel::driver

#undef CUTLASS_CUDA_DRIVER_WRAPPER_CALL
#define CUTLASS_CUDA_DRIVER_WRAPPER_CALL(func) ::mkernel::driver::cached_##func
