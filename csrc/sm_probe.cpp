// mkernel._sm_probe / _sm_probe_fit / _gpu_globaltimer: the SM-placement probe
// (kernels/fused/sm_probe_api.h), measurement ops for benchmarks/fused_diag.py (section `mps`):
// how MPS places the CTAs of ranks that launch persistent grids at the same time. Not part of
// the product's API (leading underscore).
#include <ATen/ATen.h>
#include <torch/library.h>

#include <cstdint>

#ifdef MKERNEL_WITH_CUDA
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAException.h>

#include "kernels/fused/sm_probe_api.h"
#endif

namespace mkernel {
namespace {

#ifdef MKERNEL_WITH_CUDA
// ctas x kProbeWords int64 on the current CUDA device: per CTA its arrival and leaving
// (%globaltimer ns), %smid | %nsmid << 32 and %clusterid.x | %cluster_ctarank << 32.
at::Tensor sm_probe(int64_t ctas, int64_t cluster, int64_t smem_bytes, int64_t start_ns,
                    int64_t hold_ns) {
  constexpr const char* kOp = "mkernel._sm_probe";
  TORCH_CHECK(ctas >= 1 && ctas <= 4096, kOp, ": ctas must be in [1, 4096], got ", ctas);
  TORCH_CHECK(cluster >= 1 && cluster <= 8 && ctas % cluster == 0, kOp,
              ": cluster must be in [1, 8] and divide ctas, got cluster ", cluster, " for ",
              ctas, " CTAs");
  TORCH_CHECK(smem_bytes >= 0 && smem_bytes <= 227 * 1024, kOp,
              ": smem_bytes must be in [0, 227 KiB], got ", smem_bytes);
  TORCH_CHECK(start_ns >= 0 && hold_ns >= 0, kOp, ": start_ns and hold_ns must be >= 0");
  at::Tensor out = at::zeros({ctas, fused::kProbeWords},
                             at::TensorOptions().dtype(at::kLong).device(at::kCUDA));
  fused::SmProbeArgs a;
  a.ctas = static_cast<int>(ctas);
  a.cluster = static_cast<int>(cluster);
  a.smem_bytes = static_cast<int>(smem_bytes);
  a.start_ns = static_cast<uint64_t>(start_ns);
  a.hold_ns = static_cast<uint64_t>(hold_ns);
  a.out = reinterpret_cast<uint64_t*>(out.data_ptr<int64_t>());
  const cudaError_t err = fused::sm_probe(a, at::cuda::getCurrentCUDAStream());
  TORCH_CHECK(err == cudaSuccess, kOp, ": launch failed: ", cudaGetErrorString(err));
  return out;
}

int64_t sm_probe_fit(int64_t cluster, int64_t smem_bytes) {
  int clusters = 0;
  const cudaError_t err =
      fused::sm_probe_fit(static_cast<int>(cluster), static_cast<int>(smem_bytes), &clusters);
  TORCH_CHECK(err == cudaSuccess, "mkernel._sm_probe_fit: ", cudaGetErrorString(err));
  return clusters;
}

// The GPU's %globaltimer (ns) now: one kernel on the current stream, then a synchronize.
int64_t gpu_globaltimer() {
  at::Tensor t = at::zeros({1}, at::TensorOptions().dtype(at::kLong).device(at::kCUDA));
  const cudaError_t err = fused::gpu_globaltimer(reinterpret_cast<uint64_t*>(t.data_ptr<int64_t>()),
                                                 at::cuda::getCurrentCUDAStream());
  TORCH_CHECK(err == cudaSuccess, "mkernel._gpu_globaltimer: ", cudaGetErrorString(err));
  return t.item<int64_t>();
}
#else
[[noreturn]] void no_cuda(const char* op) {
  TORCH_CHECK(false, op, ": needs mkernel built with CUDA (a measurement op for GPUs)");
}
at::Tensor sm_probe(int64_t, int64_t, int64_t, int64_t, int64_t) { no_cuda("mkernel._sm_probe"); }
int64_t sm_probe_fit(int64_t, int64_t) { no_cuda("mkernel._sm_probe_fit"); }
int64_t gpu_globaltimer() { no_cuda("mkernel._gpu_globaltimer"); }
#endif

}  // namespace
}  // namespace mkernel

// No tensor arguments: one kernel for every dispatch key.
TORCH_LIBRARY_IMPL(mkernel, CompositeExplicitAutograd, m) {
  m.impl("_sm_probe", &mkernel::sm_probe);
  m.impl("_sm_probe_fit", &mkernel::sm_probe_fit);
  m.impl("_gpu_globaltimer", &mkernel::gpu_globaltimer);
}
