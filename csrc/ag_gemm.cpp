// mkernel.ag_gemm: all-gather of row shards fused with a GEMM (column-parallel linear under
// sequence parallelism).
//
//   x [m, K] (this rank's rows), w [N, K]  ->  out = allgather(x) @ w.T  [world_size * m, N]
//   and, if return_gathered, the gathered x [world_size * m, K] (for the weight gradient);
//   otherwise a 0-element tensor of x's dtype and device.
//
// Holds the op's validator and its Meta, CPU-reference and CUDA kernels.
#include <torch/library.h>

#include <tuple>

#include "gemm_engine.h"
#include "ops_validation.h"

namespace mkernel {
namespace {
constexpr const char* kOp = "mkernel.ag_gemm";
}  // namespace

AgGemmSizes validate_ag_gemm(const at::Tensor& x, const at::Tensor& w, int64_t group,
                             int64_t world_size) {
  validation::check_group(kOp, group, world_size);
  validation::check_linear_operands(kOp, x, "[m, K]", w, "[N, K]", "K");
  return {x.sym_size(0) * world_size, w.sym_size(0), x.sym_size(1)};
}

namespace {

std::tuple<at::Tensor, at::Tensor> ag_gemm_meta(const at::Tensor& x, const at::Tensor& w,
                                                int64_t group, int64_t world_size,
                                                bool return_gathered) {
  const AgGemmSizes sizes = validate_ag_gemm(x, w, group, world_size);
  at::Tensor out = x.new_empty_symint({sizes.rows, sizes.n});
  at::Tensor gathered =
      return_gathered ? x.new_empty_symint({sizes.rows, sizes.k}) : x.new_empty({0});
  return {out, gathered};
}

// At world size 1 there is nothing to gather: the op is a GEMM (and a copy of x).
std::tuple<at::Tensor, at::Tensor> world_one(const at::Tensor& out, const at::Tensor& x,
                                             bool return_gathered) {
  return {out, return_gathered ? x.clone() : x.new_empty({0})};
}

std::tuple<at::Tensor, at::Tensor> ag_gemm_cpu(const at::Tensor& x, const at::Tensor& w,
                                               int64_t group, int64_t world_size,
                                               bool return_gathered) {
  validate_ag_gemm(x, w, group, world_size);
  if (world_size == 1) return world_one(reference_gemm(x, w), x, return_gathered);
  TORCH_CHECK_NOT_IMPLEMENTED(false, kOp, ": the CPU reference kernel has not landed yet");
}

#ifdef MKERNEL_WITH_CUDA
std::tuple<at::Tensor, at::Tensor> ag_gemm_cuda(const at::Tensor& x, const at::Tensor& w,
                                                int64_t group, int64_t world_size,
                                                bool return_gathered) {
  validate_ag_gemm(x, w, group, world_size);
  if (world_size == 1) return world_one(engine_gemm(kOp, x, w), x, return_gathered);
  TORCH_CHECK_NOT_IMPLEMENTED(false, kOp, ": the CUDA kernel has not landed yet");
}
#endif  // MKERNEL_WITH_CUDA

}  // namespace

TORCH_LIBRARY_IMPL(mkernel, Meta, m) { m.impl("ag_gemm", &ag_gemm_meta); }
TORCH_LIBRARY_IMPL(mkernel, CPU, m) { m.impl("ag_gemm", &ag_gemm_cpu); }
#ifdef MKERNEL_WITH_CUDA
TORCH_LIBRARY_IMPL(mkernel, CUDA, m) { m.impl("ag_gemm", &ag_gemm_cuda); }
#endif  // MKERNEL_WITH_CUDA

}  // namespace mkernel
