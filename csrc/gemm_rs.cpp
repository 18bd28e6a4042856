// mkernel.gemm_rs: a GEMM fused with a reduce-scatter of its output (row-parallel linear under
// sequence parallelism).
//
//   x [M, k], w [N, k] (the reduction dimension K is sharded over the ranks)
//     ->  out = reduce_scatter(x @ w.T)  [M / world_size, N]   (M % world_size == 0)
//
// Holds the op's validator and its Meta, CPU-reference and CUDA kernels.
#include <torch/library.h>

#include "gemm_engine.h"
#include "ops_validation.h"

namespace mkernel {
namespace {
constexpr const char* kOp = "mkernel.gemm_rs";
}  // namespace

GemmSizes validate_gemm_rs(const at::Tensor& x, const at::Tensor& w, int64_t group,
                           int64_t world_size) {
  validation::check_group(kOp, group, world_size);
  validation::check_linear_operands(kOp, x, "[M, k]", w, "[N, k]", "k");
  TORCH_SYM_CHECK((x.sym_size(0) % world_size).sym_eq(0), kOp,
                  ": x's row count M must be divisible by world_size to be reduce-scattered (x: ",
                  x.sym_sizes(), ", world_size: ", world_size, ")");
  return {x.sym_size(0) / world_size, w.sym_size(0), x.sym_size(1)};
}

namespace {

at::Tensor gemm_rs_meta(const at::Tensor& x, const at::Tensor& w, int64_t group,
                        int64_t world_size) {
  const GemmSizes sizes = validate_gemm_rs(x, w, group, world_size);
  return x.new_empty_symint({sizes.rows, sizes.n});
}

at::Tensor gemm_rs_cpu(const at::Tensor& x, const at::Tensor& w, int64_t group,
                       int64_t world_size) {
  validate_gemm_rs(x, w, group, world_size);
  if (world_size == 1) return reference_gemm(x, w);  // nothing to reduce
  TORCH_CHECK_NOT_IMPLEMENTED(false, kOp, ": the CPU reference kernel has not landed yet");
}

#ifdef MKERNEL_WITH_CUDA
at::Tensor gemm_rs_cuda(const at::Tensor& x, const at::Tensor& w, int64_t group,
                        int64_t world_size) {
  validate_gemm_rs(x, w, group, world_size);
  if (world_size == 1) return engine_gemm(kOp, x, w);  // nothing to reduce
  TORCH_CHECK_NOT_IMPLEMENTED(false, kOp, ": the CUDA kernel has not landed yet");
}
#endif  // MKERNEL_WITH_CUDA

}  // namespace

TORCH_LIBRARY_IMPL(mkernel, Meta, m) { m.impl("gemm_rs", &gemm_rs_meta); }
TORCH_LIBRARY_IMPL(mkernel, CPU, m) { m.impl("gemm_rs", &gemm_rs_cpu); }
#ifdef MKERNEL_WITH_CUDA
TORCH_LIBRARY_IMPL(mkernel, CUDA, m) { m.impl("gemm_rs", &gemm_rs_cuda); }
#endif  // MKERNEL_WITH_CUDA

}  // namespace mkernel
