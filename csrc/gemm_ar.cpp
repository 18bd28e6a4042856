// mkernel.gemm_ar: a GEMM fused with an all-reduce of its output (row-parallel linear without
// sequence parallelism; inference).
//
//   x [M, k], w [N, k] (the reduction dimension K is sharded over the ranks)
//     ->  out = allreduce(x @ w.T)  [M, N]
//
// Holds the op's validator and its Meta, CPU-reference and CUDA kernels.
#include <torch/library.h>

#include "gemm_engine.h"
#include "ops_validation.h"

namespace mkernel {
namespace {
constexpr const char* kOp = "mkernel.gemm_ar";
}  // namespace

GemmSizes validate_gemm_ar(const at::Tensor& x, const at::Tensor& w, int64_t group,
                           int64_t world_size) {
  validation::check_group(kOp, group, world_size);
  validation::check_linear_operands(kOp, x, "[M, k]", w, "[N, k]", "k");
  return {x.sym_size(0), w.sym_size(0), x.sym_size(1)};
}

namespace {

at::Tensor gemm_ar_meta(const at::Tensor& x, const at::Tensor& w, int64_t group,
                        int64_t world_size) {
  const GemmSizes sizes = validate_gemm_ar(x, w, group, world_size);
  return x.new_empty_symint({sizes.rows, sizes.n});
}

at::Tensor gemm_ar_cpu(const at::Tensor& x, const at::Tensor& w, int64_t group,
                       int64_t world_size) {
  validate_gemm_ar(x, w, group, world_size);
  if (world_size == 1) return reference_gemm(x, w);  // nothing to reduce
  TORCH_CHECK_NOT_IMPLEMENTED(false, kOp, ": the CPU reference kernel has not landed yet");
}

#ifdef MKERNEL_WITH_CUDA
at::Tensor gemm_ar_cuda(const at::Tensor& x, const at::Tensor& w, int64_t group,
                        int64_t world_size) {
  validate_gemm_ar(x, w, group, world_size);
  if (world_size == 1) return engine_gemm(kOp, x, w);  // nothing to reduce
  TORCH_CHECK_NOT_IMPLEMENTED(false, kOp, ": the CUDA kernel has not landed yet");
}
#endif  // MKERNEL_WITH_CUDA

}  // namespace

TORCH_LIBRARY_IMPL(mkernel, Meta, m) { m.impl("gemm_ar", &gemm_ar_meta); }
TORCH_LIBRARY_IMPL(mkernel, CPU, m) { m.impl("gemm_ar", &gemm_ar_cpu); }
#ifdef MKERNEL_WITH_CUDA
TORCH_LIBRARY_IMPL(mkernel, CUDA, m) { m.impl("gemm_ar", &gemm_ar_cuda); }
#endif  // MKERNEL_WITH_CUDA

}  // namespace mkernel
