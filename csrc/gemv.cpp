// mkernel.gemv: the small-M (decode) kernel as an op of its own (tests and
// benchmarks pick a variant), and the glue through which the GEMM engine's
// config "auto" runs it at M <= 16 (gemm.cpp).
//
//   a [M, K] (M <= 16), b [N, K]  ->  a @ b.T  [M, N]
#include <torch/library.h>

#include <cstdlib>
#include <cstring>
#include <string>

#include "env_knobs.h"
#include "gemm_engine.h"
#include "gemv_engine.h"
#include "ops_validation.h"

#ifdef MKERNEL_WITH_CUDA
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>

#include "kernels/gemm/gemv_api.h"
#endif

namespace mkernel {
namespace {
constexpr const char* kOp = "mkernel.gemv";
constexpr int64_t kMaxRows = 16;  // gemv::kMaxRows (the header needs CUDA)
constexpr int64_t kNumVariants = 16;  // gemv::kNumVariants

void validate_gemv(const at::Tensor& a, const at::Tensor& b, int64_t variant, int64_t splits) {
  validation::check_linear_operands(kOp, "a", a, "[M, K]", "b", b, "[N, K]", "K");
  TORCH_CHECK_VALUE(variant >= -1 && variant < kNumVariants, kOp,
                    ": variant must be -1 (by shape) or 0..", kNumVariants - 1, ", got ", variant);
  TORCH_CHECK_VALUE(splits >= 0 && splits <= 65535, kOp,
                    ": splits must be 0 (by shape) or 1..65535, got ", splits);
}

void check_rows(const at::Tensor& a) {
  TORCH_CHECK_VALUE(a.size(0) >= 1 && a.size(0) <= kMaxRows, kOp,
                    ": a must have 1 to 16 rows (M), got ", a.size(0));
}

// Shapes may be symbolic here (torch.compile): the row bound is checked by the real kernels.
at::Tensor gemv_meta(const at::Tensor& a, const at::Tensor& b, int64_t variant, int64_t splits) {
  validate_gemv(a, b, variant, splits);
  return a.new_empty_symint({a.sym_size(0), b.sym_size(0)});
}

at::Tensor gemv_cpu(const at::Tensor& a, const at::Tensor& b, int64_t variant, int64_t splits) {
  validate_gemv(a, b, variant, splits);
  check_rows(a);
  return reference_gemm(a, b);
}
}  // namespace

#ifdef MKERNEL_WITH_CUDA
static_assert(kMaxRows == gemv::kMaxRows && kNumVariants == gemv::kNumVariants);

bool gemv_planned(int64_t m, int64_t n, int64_t k, int sm_count, gemv::Plan* plan) {
  static const bool enabled = [] {
    const char* v = env::get("MKERNEL_GEMM_GEMV");
    return v == nullptr || std::strcmp(v, "0") != 0;
  }();
  if (!enabled || m < 1 || m > gemv::kMaxRows || n % 8 || k % 8) return false;
  *plan = gemv::select_plan(static_cast<int>(m), static_cast<int>(n), static_cast<int>(k),
                            sm_count);
  return true;
}

bool engine_gemv(const char* op, const at::Tensor& a, const at::Tensor& b, const at::Tensor& out,
                 const gemv::Plan& plan) {
  const gemm::Problem p = engine_problem(op, a, b, out.data_ptr(), a.size(0), b.size(0), a.size(1));
  if (gemv::can_implement(p, plan) != nullptr) return false;
  void* workspace = engine_workspace(gemv::workspace_size(p, plan), a);
  const cudaError_t err = gemv::run(p, plan, at::cuda::getCurrentCUDAStream(), workspace);
  TORCH_CHECK(err == cudaSuccess, op, ": GEMV launch failed (", gemv::plan_name(plan),
              "): ", cudaGetErrorString(err));
  return true;
}

namespace {
at::Tensor gemv_cuda(const at::Tensor& a, const at::Tensor& b, int64_t variant, int64_t splits) {
  validate_gemv(a, b, variant, splits);
  check_rows(a);
  const c10::cuda::CUDAGuard device_guard(a.device());
  check_engine_inputs(kOp, a);
  const int64_t m = a.size(0), n = b.size(0), k = a.size(1);
  auto out = at::empty({m, n}, a.options());
  if (n == 0) return out;
  if (k == 0) return out.zero_();
  const gemm::Problem p = engine_problem(kOp, a, b, out.data_ptr(), m, n, k);
  gemv::Plan plan = gemv::select_plan(static_cast<int>(m), static_cast<int>(n),
                                      static_cast<int>(k), device_sms());
  if (variant >= 0) {  // splits 0: the variant's by-shape split (row-split variants: a cluster's)
    plan = splits > 0 ? gemv::Plan{static_cast<int>(variant), static_cast<int>(splits)}
                      : gemv::plan_for_variant(static_cast<int>(variant), static_cast<int>(m),
                                               static_cast<int>(n), static_cast<int>(k), device_sms());
  }
  if (variant < 0 && splits > 0) plan.splits = static_cast<int>(splits);
  if (const char* why = gemv::can_implement(p, plan)) {
    TORCH_CHECK_VALUE(false, kOp, ": cannot run M=", m, " N=", n, " K=", k, " with ",
                      gemv::plan_name(plan), ": ", why);
  }
  engine_gemv(kOp, a, b, out, plan);
  return out;
}

}  // namespace
#endif  // MKERNEL_WITH_CUDA

TORCH_LIBRARY_IMPL(mkernel, Meta, m) { m.impl("gemv", &gemv_meta); }
TORCH_LIBRARY_IMPL(mkernel, CPU, m) { m.impl("gemv", &gemv_cpu); }
#ifdef MKERNEL_WITH_CUDA
TORCH_LIBRARY_IMPL(mkernel, CUDA, m) { m.impl("gemv", &gemv_cuda); }
#endif

}  // namespace mkernel
