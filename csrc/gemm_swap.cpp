// mkernel.gemm_swap: the swapped-operand GEMM (kernels/gemm/gemm_swap_api.h) as an op of its
// own (tests and benchmarks pick a variant), and the glue through which the GEMM engine's
// config "auto" runs it at 17 <= M <= 512 when the small-M tuner measured it faster
// (gemm.cpp, gemm_autotune.cpp).
//
//   a [M, K], b [N, K]  ->  a @ b.T  [M, N]   (computed as (b @ a.T).T, no transpose copied)
#include <torch/library.h>

#include <string>

#include "gemm_engine.h"
#include "ops_validation.h"

#ifdef MKERNEL_WITH_CUDA
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>

#include "kernels/gemm/gemm_swap_api.h"
#endif

namespace mkernel {
namespace {
constexpr const char* kOp = "mkernel.gemm_swap";
constexpr int64_t kNumVariants = 33;  // gemm_swap::kNumVariants (the header needs CUDA)

void validate_gemm_swap(const at::Tensor& a, const at::Tensor& b, int64_t variant) {
  validation::check_linear_operands(kOp, "a", a, "[M, K]", "b", b, "[N, K]", "K");
  TORCH_CHECK_VALUE(variant >= 0 && variant < kNumVariants, kOp, ": variant must be in 0..",
                    kNumVariants - 1, ", got ", variant);
}

at::Tensor gemm_swap_meta(const at::Tensor& a, const at::Tensor& b, int64_t variant) {
  validate_gemm_swap(a, b, variant);
  return a.new_empty_symint({a.sym_size(0), b.sym_size(0)});
}

at::Tensor gemm_swap_cpu(const at::Tensor& a, const at::Tensor& b, int64_t variant) {
  validate_gemm_swap(a, b, variant);
  return reference_gemm(a, b);
}
}  // namespace

#ifdef MKERNEL_WITH_CUDA
static_assert(kNumVariants == gemm_swap::kNumVariants);

bool engine_swap(const char* op, const at::Tensor& a, const at::Tensor& b, const at::Tensor& out,
                 int variant) {
  const gemm::Problem p = engine_problem(op, a, b, out.data_ptr(), a.size(0), b.size(0), a.size(1));
  const int sms = device_sms();
  if (gemm_swap::can_implement(p, variant, sms) != nullptr) return false;
  // CUTLASS's scratch (stream-K partials and locks): it initialises what it uses on every
  // launch, so a fresh block of the caching allocator per call serves. The ticketed variants'
  // tickets must be zero at launch (and are left zero): the engine's per-stream scratch.
  const size_t bytes = gemm_swap::workspace_size(p, variant, sms);
  at::Tensor scratch;
  void* workspace = nullptr;
  if (bytes > 0 && gemm_swap::zeroed_workspace(variant)) {
    workspace = engine_workspace(bytes, a);
  } else if (bytes > 0) {
    scratch = at::empty({static_cast<int64_t>(bytes)}, a.options().dtype(at::kByte));
    workspace = scratch.data_ptr();
  }
  const char* reason = nullptr;
  const cudaError_t err = gemm_swap::run(p, variant, sms, workspace,
                                         at::cuda::getCurrentCUDAStream(), &reason);
  TORCH_CHECK(err == cudaSuccess, op, ": swapped GEMM launch failed (",
              gemm_swap::variant_name(variant), "): ", cudaGetErrorString(err),
              reason ? std::string(" / ") + reason : std::string());
  return true;
}

namespace {
at::Tensor gemm_swap_cuda(const at::Tensor& a, const at::Tensor& b, int64_t variant) {
  validate_gemm_swap(a, b, variant);
  const c10::cuda::CUDAGuard device_guard(a.device());
  check_engine_inputs(kOp, a);
  const int64_t m = a.size(0), n = b.size(0), k = a.size(1);
  auto out = at::empty({m, n}, a.options());
  if (m == 0 || n == 0) return out;
  if (k == 0) return out.zero_();
  const gemm::Problem p = engine_problem(kOp, a, b, out.data_ptr(), m, n, k);
  if (const char* why = gemm_swap::can_implement(p, static_cast<int>(variant), device_sms())) {
    TORCH_CHECK_VALUE(false, kOp, ": cannot run M=", m, " N=", n, " K=", k, " with ",
                      gemm_swap::variant_name(static_cast<int>(variant)), ": ", why);
  }
  engine_swap(kOp, a, b, out, static_cast<int>(variant));
  return out;
}
}  // namespace
#endif  // MKERNEL_WITH_CUDA

TORCH_LIBRARY_IMPL(mkernel, Meta, m) { m.impl("gemm_swap", &gemm_swap_meta); }
TORCH_LIBRARY_IMPL(mkernel, CPU, m) { m.impl("gemm_swap", &gemm_swap_cpu); }
#ifdef MKERNEL_WITH_CUDA
TORCH_LIBRARY_IMPL(mkernel, CUDA, m) { m.impl("gemm_swap", &gemm_swap_cuda); }
#endif

}  // namespace mkernel
