// mkernel.moe_combine: the reverse of moe_dispatch_gemm: the experts' outputs travel back to
// their tokens' ranks and are summed with the routing weights.
//
//   y [E_local, capacity, H] expert outputs, handle [T, k] int64 from moe_dispatch_gemm,
//   topk_weights [T, k] fp32
//     ->  out [T, H] = sum_j topk_weights[t, j] * y[the slot handle[t, j] points at]
//
// Holds the op's validator and its Meta, CPU-reference and CUDA kernels.
#include <torch/library.h>

#include "ops_validation.h"

namespace mkernel {
namespace {
constexpr const char* kOp = "mkernel.moe_combine";
}  // namespace

MoeCombineSizes validate_moe_combine(const at::Tensor& y, const at::Tensor& handle,
                                     const at::Tensor& topk_weights, int64_t group,
                                     int64_t world_size, const c10::SymInt& num_tokens) {
  using namespace validation;
  check_group(kOp, group, world_size);
  check_dim(kOp, "y", y, 3, "[E_local, capacity, H]");
  check_dim(kOp, "handle", handle, 2, "[T, k]");
  check_dim(kOp, "topk_weights", topk_weights, 2, "[T, k]");
  check_float_dtype(kOp, "y", y);
  check_dtype_in(kOp, "handle", handle, {at::kLong}, "the handle moe_dispatch_gemm returned");
  check_dtype_in(kOp, "topk_weights", topk_weights, {at::kFloat}, "routing weights");
  check_same_device(kOp, "handle", handle, "y", y);
  check_same_device(kOp, "topk_weights", topk_weights, "y", y);
  TORCH_SYM_CHECK(handle.sym_size(0).sym_eq(num_tokens), kOp,
                  ": num_tokens must equal the token count T of handle [T, k] (num_tokens: ",
                  num_tokens, ", handle: ", handle.sym_sizes(), ")");
  TORCH_SYM_CHECK(same_sizes(topk_weights, handle), kOp,
                  ": topk_weights must have the shape of handle [T, k] (handle: ",
                  handle.sym_sizes(), ", topk_weights: ", topk_weights.sym_sizes(), ")");
  check_contiguous(kOp, "y", y);
  check_contiguous(kOp, "handle", handle);
  check_contiguous(kOp, "topk_weights", topk_weights);
  return {num_tokens, y.sym_size(2)};
}

namespace {

at::Tensor moe_combine_meta(const at::Tensor& y, const at::Tensor& handle,
                            const at::Tensor& topk_weights, int64_t group, int64_t world_size,
                            c10::SymInt num_tokens) {
  const MoeCombineSizes sizes =
      validate_moe_combine(y, handle, topk_weights, group, world_size, num_tokens);
  return y.new_empty_symint({sizes.tokens, sizes.h});
}

at::Tensor moe_combine_cpu(const at::Tensor& y, const at::Tensor& handle,
                           const at::Tensor& topk_weights, int64_t group, int64_t world_size,
                           int64_t num_tokens) {
  validate_moe_combine(y, handle, topk_weights, group, world_size, num_tokens);
  TORCH_CHECK_NOT_IMPLEMENTED(false, kOp, ": the CPU reference kernel has not landed yet");
}

#ifdef MKERNEL_WITH_CUDA
at::Tensor moe_combine_cuda(const at::Tensor& y, const at::Tensor& handle,
                            const at::Tensor& topk_weights, int64_t group, int64_t world_size,
                            int64_t num_tokens) {
  validate_moe_combine(y, handle, topk_weights, group, world_size, num_tokens);
  TORCH_CHECK_NOT_IMPLEMENTED(false, kOp, ": the CUDA kernel has not landed yet");
}
#endif  // MKERNEL_WITH_CUDA

}  // namespace

TORCH_LIBRARY_IMPL(mkernel, Meta, m) { m.impl("moe_combine", &moe_combine_meta); }
TORCH_LIBRARY_IMPL(mkernel, CPU, m) { m.impl("moe_combine", &moe_combine_cpu); }
#ifdef MKERNEL_WITH_CUDA
TORCH_LIBRARY_IMPL(mkernel, CUDA, m) { m.impl("moe_combine", &moe_combine_cuda); }
#endif  // MKERNEL_WITH_CUDA

}  // namespace mkernel
