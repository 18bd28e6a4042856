// mkernel.moe_dispatch_gemm: expert-parallel MoE dispatch (all-to-all of routed tokens) fused
// with each local expert's first GEMM.
//
//   x [T, H] tokens, topk_idx [T, k] expert ids in [0, num_experts) (a device tensor),
//   w1 [E_local, F, H] with E_local = num_experts / world_size
//     ->  out    [E_local, capacity, F]  x_e @ w1[e].T for the tokens received by local expert e
//         counts [E_local] int32         tokens received per local expert
//         handle [T, k] int64            where each (token, choice) landed; moe_combine takes it
//
// The expert ids are data on the device: their range is checked by the kernels, not here (a
// host-side check would synchronise).
//
// Holds the op's validator and its Meta, CPU-reference and CUDA kernels.
#include <torch/library.h>

#include <tuple>

#include "ops_validation.h"

namespace mkernel {
namespace {
constexpr const char* kOp = "mkernel.moe_dispatch_gemm";
}  // namespace

MoeDispatchSizes validate_moe_dispatch_gemm(const at::Tensor& x, const at::Tensor& topk_idx,
                                            const at::Tensor& w1, int64_t group, int64_t world_size,
                                            int64_t num_experts, int64_t capacity) {
  using namespace validation;
  check_group(kOp, group, world_size);
  TORCH_CHECK_VALUE(num_experts >= 1, kOp, ": num_experts must be >= 1, got ", num_experts);
  TORCH_CHECK_VALUE(num_experts % world_size == 0, kOp,
                    ": num_experts must be divisible by world_size (each rank holds "
                    "num_experts / world_size experts), got num_experts ",
                    num_experts, " and world_size ", world_size);
  TORCH_CHECK_VALUE(capacity >= 1, kOp,
                    ": capacity (token slots per local expert) must be >= 1, got ", capacity);
  check_dim(kOp, "x", x, 2, "[T, H]");
  check_dim(kOp, "topk_idx", topk_idx, 2, "[T, k]");
  check_dim(kOp, "w1", w1, 3, "[E_local, F, H]");
  check_float_dtype(kOp, "x", x);
  check_dtype_in(kOp, "topk_idx", topk_idx, {at::kLong, at::kInt}, "expert ids");
  check_same_dtype(kOp, "w1", w1, "x", x);
  check_same_device(kOp, "topk_idx", topk_idx, "x", x);
  check_same_device(kOp, "w1", w1, "x", x);
  TORCH_SYM_CHECK(topk_idx.sym_size(0).sym_eq(x.sym_size(0)), kOp,
                  ": topk_idx must have one row per token of x (x: ", x.sym_sizes(),
                  ", topk_idx: ", topk_idx.sym_sizes(), ")");
  TORCH_SYM_CHECK(
      topk_idx.sym_size(1).sym_ge(1), kOp,
      ": topk_idx must choose k >= 1 experts per token, got topk_idx: ", topk_idx.sym_sizes());
  TORCH_SYM_CHECK(topk_idx.sym_size(1).sym_le(num_experts), kOp,
                  ": topk_idx must choose k <= num_experts experts per token (num_experts ",
                  num_experts, ", topk_idx: ", topk_idx.sym_sizes(), ")");
  const int64_t local_experts = num_experts / world_size;
  TORCH_SYM_CHECK(w1.sym_size(0).sym_eq(local_experts), kOp,
                  ": w1 must hold E_local = num_experts / world_size = ", local_experts,
                  " experts in dim 0 (num_experts ", num_experts, ", world_size ", world_size,
                  ", w1: ", w1.sym_sizes(), ")");
  TORCH_SYM_CHECK(w1.sym_size(2).sym_eq(x.sym_size(1)), kOp,
                  ": w1 must have the same H as x (x: ", x.sym_sizes(), ", w1: ", w1.sym_sizes(),
                  ")");
  check_contiguous(kOp, "x", x);
  check_contiguous(kOp, "topk_idx", topk_idx);
  check_contiguous(kOp, "w1", w1);
  return {local_experts, capacity, w1.sym_size(1), x.sym_size(0), topk_idx.sym_size(1)};
}

namespace {

std::tuple<at::Tensor, at::Tensor, at::Tensor> moe_dispatch_gemm_meta(
    const at::Tensor& x, const at::Tensor& topk_idx, const at::Tensor& w1, int64_t group,
    int64_t world_size, int64_t num_experts, int64_t capacity) {
  const MoeDispatchSizes sizes =
      validate_moe_dispatch_gemm(x, topk_idx, w1, group, world_size, num_experts, capacity);
  at::Tensor out = x.new_empty_symint({sizes.local_experts, sizes.capacity, sizes.f});
  at::Tensor counts = x.new_empty({sizes.local_experts}, x.options().dtype(at::kInt));
  at::Tensor handle = x.new_empty_symint({sizes.tokens, sizes.topk}, x.options().dtype(at::kLong));
  return {out, counts, handle};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> moe_dispatch_gemm_cpu(
    const at::Tensor& x, const at::Tensor& topk_idx, const at::Tensor& w1, int64_t group,
    int64_t world_size, int64_t num_experts, int64_t capacity) {
  validate_moe_dispatch_gemm(x, topk_idx, w1, group, world_size, num_experts, capacity);
  TORCH_CHECK_NOT_IMPLEMENTED(false, kOp, ": the CPU reference kernel has not landed yet");
}

#ifdef MKERNEL_WITH_CUDA
std::tuple<at::Tensor, at::Tensor, at::Tensor> moe_dispatch_gemm_cuda(
    const at::Tensor& x, const at::Tensor& topk_idx, const at::Tensor& w1, int64_t group,
    int64_t world_size, int64_t num_experts, int64_t capacity) {
  validate_moe_dispatch_gemm(x, topk_idx, w1, group, world_size, num_experts, capacity);
  TORCH_CHECK_NOT_IMPLEMENTED(false, kOp, ": the CUDA kernel has not landed yet");
}
#endif  // MKERNEL_WITH_CUDA

}  // namespace

TORCH_LIBRARY_IMPL(mkernel, Meta, m) { m.impl("moe_dispatch_gemm", &moe_dispatch_gemm_meta); }
TORCH_LIBRARY_IMPL(mkernel, CPU, m) { m.impl("moe_dispatch_gemm", &moe_dispatch_gemm_cpu); }
#ifdef MKERNEL_WITH_CUDA
TORCH_LIBRARY_IMPL(mkernel, CUDA, m) { m.impl("moe_dispatch_gemm", &moe_dispatch_gemm_cuda); }
#endif  // MKERNEL_WITH_CUDA

}  // namespace mkernel
