// mkernel.gemv: the small-M (decode) kernel as an op of its own (tests and
// benchmarks pick a variant), and the glue through which the GEMM engine's
// config "auto" runs it at M <= 8 (gemm.cpp).
//
//   a [M, K] (M <= 8), b [N, K]  ->  a @ b.T  [M, N]
#include <torch/library.h>

#include <cstdlib>
#include <cstring>
#include <string>

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
constexpr int64_t kMaxRows = 8;  // gemv::kMaxRows (the header needs CUDA)
constexpr int64_t kNumVariants = 10;  // gemv::kNumVariants

void validate_gemv(const at::Tensor& a, const at::Tensor& b, int64_t variant) {
  validation::check_linear_operands(kOp, a, "[M, K]", b, "[N, K]", "K");
  TORCH_CHECK_VALUE(a.size(0) >= 1 && a.size(0) <= kMaxRows, kOp,
                    ": a must have 1 to 8 rows (M), got ", a.size(0));
  TORCH_CHECK_VALUE(variant >= -1 && variant < kNumVariants, kOp,
                    ": variant must be -1 (by shape) or 0..", kNumVariants - 1, ", got ", variant);
}

// Shapes may be symbolic here (torch.compile): the row bound is checked by the real kernels.
at::Tensor gemv_meta(const at::Tensor& a, const at::Tensor& b, int64_t variant) {
  validation::check_linear_operands(kOp, a, "[M, K]", b, "[N, K]", "K");
  TORCH_CHECK_VALUE(variant >= -1 && variant < kNumVariants, kOp,
                    ": variant must be -1 (by shape) or 0..", kNumVariants - 1, ", got ", variant);
  return a.new_empty_symint({a.sym_size(0), b.sym_size(0)});
}

at::Tensor gemv_cpu(const at::Tensor& a, const at::Tensor& b, int64_t variant) {
  validate_gemv(a, b, variant);
  return reference_gemm(a, b);
}
}  // namespace

#ifdef MKERNEL_WITH_CUDA
static_assert(kMaxRows == gemv::kMaxRows && kNumVariants == gemv::kNumVariants);

int gemv_planned(int64_t m, int64_t n, int64_t k, int sm_count) {
  static const bool enabled = [] {
    const char* v = std::getenv("MKERNEL_GEMM_GEMV");
    return v == nullptr || std::strcmp(v, "0") != 0;
  }();
  if (!enabled || m < 1 || m > gemv::kMaxRows || n % 8 || k % 8) return -1;
  return gemv::select_variant(static_cast<int>(m), static_cast<int>(n), static_cast<int>(k),
                              sm_count);
}

bool engine_gemv(const char* op, const at::Tensor& a, const at::Tensor& b, const at::Tensor& out,
                 int variant) {
  const gemm::Problem p = engine_problem(op, a, b, out.data_ptr(), a.size(0), b.size(0), a.size(1));
  if (gemv::can_implement(p) != nullptr) return false;
  const cudaError_t err = gemv::run(p, variant, at::cuda::getCurrentCUDAStream());
  TORCH_CHECK(err == cudaSuccess, op, ": GEMV launch failed (", gemv::variant_name(variant),
              "): ", cudaGetErrorString(err));
  return true;
}

std::string gemv_plan_name(int variant) { return gemv::variant_name(variant); }

namespace {
at::Tensor gemv_cuda(const at::Tensor& a, const at::Tensor& b, int64_t variant) {
  validate_gemv(a, b, variant);
  const c10::cuda::CUDAGuard device_guard(a.device());
  check_engine_inputs(kOp, a);
  const int64_t m = a.size(0), n = b.size(0), k = a.size(1);
  auto out = at::empty({m, n}, a.options());
  if (n == 0) return out;
  if (k == 0) return out.zero_();
  const gemm::Problem p = engine_problem(kOp, a, b, out.data_ptr(), m, n, k);
  if (const char* why = gemv::can_implement(p)) {
    TORCH_CHECK_VALUE(false, kOp, ": cannot run M=", m, " N=", n, " K=", k, ": ", why);
  }
  const int v = variant >= 0 ? static_cast<int>(variant)
                             : gemv::select_variant(static_cast<int>(m), static_cast<int>(n),
                                                    static_cast<int>(k), device_sms());
  engine_gemv(kOp, a, b, out, v);
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
