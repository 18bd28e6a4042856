// The engine's grouped (MoE) GEMMs: one GEMM per expert, each expert's rows
// read on the device (no host sync, CUDA-graph safe).
//
// mkernel.gemm_grouped — capacity-padded rows (DeepEP's low-latency layout):
//   a [E, C, K] tokens per expert, b [E, N, K] expert weights, counts [E] int32
//     -> out [E, C, N], out[e, :counts[e]] = a[e, :counts[e]] @ b[e].T;
//        rows >= counts[e] are unspecified on CUDA (never computed) and zero on CPU.
//
// mkernel.gemm_grouped_packed — packed rows (torch._grouped_mm's layout):
//   a [T, K] every expert's rows back to back, b [E, N, K], offs [E] int32
//   cumulative row ends (offs[e-1] <= row < offs[e] belong to expert e)
//     -> out [T, N]; rows >= offs[E-1] are unspecified on CUDA and zero on CPU.
#include <torch/library.h>

#include <string>

#include "gemm_engine.h"
#include "ops_validation.h"

#ifdef MKERNEL_WITH_CUDA
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>

#include "kernels/gemm/gemm_api.h"
#include "kernels/gemm/grouped_offs_check.h"
#endif

namespace mkernel {
namespace {
constexpr const char* kOp = "mkernel.gemm_grouped";

constexpr const char* kPackedOp = "mkernel.gemm_grouped_packed";

// What both layouts check: a's rank, b [E, N, K], `rows` (counts or offs) a 1-D
// int32 [E], one dtype for a and b, one device, everything contiguous.
void check_grouped_operands(const char* op, const at::Tensor& a, int64_t a_dim, const char* a_shape,
                            const at::Tensor& b, const at::Tensor& rows, const char* rows_desc) {
  TORCH_CHECK(a.dim() == a_dim, op, ": a must be ", a_shape, ", got ", a.sizes());
  TORCH_CHECK(b.dim() == 3, op, ": b must be [E, N, K], got ", b.sizes());
  TORCH_CHECK(rows.dim() == 1 && rows.scalar_type() == at::kInt, op, ": ", rows_desc,
              " must be a 1-D int32 tensor [E], got ", rows.scalar_type(), " ", rows.sizes());
  TORCH_SYM_CHECK(b.sym_size(0).sym_eq(rows.sym_size(0)),
                  std::string(op) + ": " + rows_desc + " must have E = b.size(0) entries");
  TORCH_SYM_CHECK(a.sym_size(a_dim - 1).sym_eq(b.sym_size(2)),
                  std::string(op) + ": a and b must have the same K");
  TORCH_CHECK(a.scalar_type() == b.scalar_type(), op, ": a is ", a.scalar_type(), " but b is ",
              b.scalar_type());
  TORCH_CHECK(a.device() == b.device() && a.device() == rows.device(), op, ": a, b and ", rows_desc,
              " must be on one device");
  TORCH_CHECK(a.is_contiguous() && b.is_contiguous() && rows.is_contiguous(), op, ": a, b and ",
              rows_desc, " must be contiguous");
}

void validate(const at::Tensor& a, const at::Tensor& b, const at::Tensor& counts) {
  check_grouped_operands(kOp, a, 3, "[E, C, K]", b, counts, "counts");
  TORCH_SYM_CHECK(a.sym_size(0).sym_eq(b.sym_size(0)),
                  std::string(kOp) + ": a and b must have the same number of experts E");
}

at::Tensor grouped_meta(const at::Tensor& a, const at::Tensor& b, const at::Tensor& counts) {
  validate(a, b, counts);
  return a.new_empty_symint({a.sym_size(0), a.sym_size(1), b.sym_size(1)});
}

at::Tensor grouped_cpu(const at::Tensor& a, const at::Tensor& b, const at::Tensor& counts) {
  validate(a, b, counts);
  auto out = at::zeros({a.size(0), a.size(1), b.size(1)}, a.options());
  for (int64_t e = 0; e < a.size(0); ++e) {
    const int64_t rows = counts[e].item<int>();
    TORCH_CHECK(rows >= 0 && rows <= a.size(1), kOp, ": counts[", e, "] = ", rows,
                " is outside [0, C=", a.size(1), "]");
    if (rows > 0) out[e].narrow(0, 0, rows).copy_(reference_gemm(a[e].narrow(0, 0, rows), b[e]));
  }
  return out;
}

// Packed rows: a [T, K], b [E, N, K], offs [E] int32 cumulative row ends.
void validate_packed(const at::Tensor& a, const at::Tensor& b, const at::Tensor& offs) {
  check_grouped_operands(kPackedOp, a, 2, "[T, K] (every expert's rows)", b, offs, "offs");
}

// config -1: the tuned plan (swizzle and raster must then be 0); else a
// gemm::ConfigId of the hooked kernel with that tile order (0: its default).
void validate_packed_plan(int64_t config, int64_t swizzle, int64_t raster) {
  TORCH_CHECK_VALUE(config >= -1, kPackedOp, ": config must be -1 (tuned) or a config id, got ",
                    config);
  TORCH_CHECK_VALUE(config >= 0 || (swizzle == 0 && raster == 0), kPackedOp,
                    ": swizzle and raster need an explicit config");
  TORCH_CHECK_VALUE(raster >= 0 && raster <= 2, kPackedOp,
                    ": raster must be 0 (default), 1 (along M) or 2 (along N), got ", raster);
}

at::Tensor packed_meta(const at::Tensor& a, const at::Tensor& b, const at::Tensor& offs,
                       int64_t config, int64_t swizzle, int64_t raster) {
  validate_packed(a, b, offs);
  validate_packed_plan(config, swizzle, raster);
  return a.new_empty_symint({a.sym_size(0), b.sym_size(1)});
}

at::Tensor packed_cpu(const at::Tensor& a, const at::Tensor& b, const at::Tensor& offs,
                      int64_t config, int64_t swizzle, int64_t raster) {
  validate_packed(a, b, offs);
  validate_packed_plan(config, swizzle, raster);  // the host reference has no plan
  auto out = at::zeros({a.size(0), b.size(1)}, a.options());
  int64_t begin = 0;
  for (int64_t e = 0; e < b.size(0); ++e) {
    const int64_t end = offs[e].item<int>();
    TORCH_CHECK(end >= begin && end <= a.size(0), kPackedOp, ": offs[", e, "] = ", end,
                " must lie in [offs[e-1] = ", begin, ", T = ", a.size(0), "]");
    if (end > begin)
      out.narrow(0, begin, end - begin)
          .copy_(reference_gemm(a.narrow(0, begin, end - begin), b[e]));
    begin = end;
  }
  return out;
}

#ifdef MKERNEL_WITH_CUDA
// The packed problem's launch on the current stream, without a tile order.
gemm::Launch packed_launch() {
  gemm::Launch launch;
  launch.stream = at::cuda::getCurrentCUDAStream();
  launch.sm_count = device_sms();
  launch.splits = 1;
  return launch;
}

// The plan the tuner measured fastest for (E, T, N, K) (gemm_autotune.cpp):
// its config, with its tile order written into *launch. `wait`: for a tuning
// of another shape on this device (the plan query), else the fixed plan runs.
gemm::ConfigId packed_plan(const gemm::Problem& p, const at::Tensor& a, gemm::Launch* launch,
                           bool* tuned = nullptr, bool wait = false) {
  const gemm::Plan plan = grouped_plan(p, *launch, a, tuned, wait);
  launch->swizzle = plan.swizzle;
  launch->raster = plan.raster;
  return plan.config;
}

// Checks that the engine takes the packed problem p in config id and launches it; `what` names
// the problem in the errors ("" for the plain packed GEMM).
void launch_packed(const char* op, const char* what, const gemm::Problem& p, gemm::ConfigId id,
                   const gemm::Launch& launch) {
  if (const char* why = gemm::can_implement(p, id, launch)) {
    TORCH_CHECK(false, op, ": cannot run ", what, "T=", p.m, " E=", p.batches, " N=", p.n, " K=",
                p.k, ": ", why);
  }
  const char* reason = nullptr;
  const cudaError_t err = gemm::run_hooked(p, id, launch, gemm::HookArgs{}, &reason);
  TORCH_CHECK(err == cudaSuccess, op, ": ", what, "launch failed (", gemm::config_name(id), "): ",
              cudaGetErrorString(err), reason ? std::string(" / ") + reason : std::string());
}

at::Tensor packed_cuda(const at::Tensor& a, const at::Tensor& b, const at::Tensor& offs,
                       int64_t config, int64_t swizzle, int64_t raster) {
  constexpr const char* op = kPackedOp;
  validate_packed(a, b, offs);
  validate_packed_plan(config, swizzle, raster);
  const c10::cuda::CUDAGuard device_guard(a.device());
  check_engine_inputs(op, a);
  // TMA reads a and b from their starts: a view at an odd element offset would fail the
  // descriptor's set-up on the device (an illegal instruction, a dead context: session 44's fuzz).
  validation::check_aligned16(op, "a", a);
  validation::check_aligned16(op, "b", b);
  const int64_t t = a.size(0), k = a.size(1), e = b.size(0), n = b.size(1);
  auto out = at::empty({t, n}, a.options());
  if (t == 0 || e == 0 || n == 0) return out;
  // Before any kernel reads offs (the tuner's timed candidates included).
  const cudaError_t checked =
      gemm::check_group_ends(offs.data_ptr<int>(), static_cast<int>(e), static_cast<int>(t),
                             at::cuda::getCurrentCUDAStream());
  TORCH_CHECK(checked == cudaSuccess, op,
              ": offs check launch failed: ", cudaGetErrorString(checked));
  gemm::Problem p = engine_problem(op, a, b, out.data_ptr(), t, n, k);
  p.batches = static_cast<int>(e);
  p.group_end = offs.data_ptr<int>();
  gemm::Launch launch = packed_launch();
  gemm::ConfigId id;
  if (config < 0) {
    id = packed_plan(p, a, &launch);
  } else {
    id = static_cast<gemm::ConfigId>(config);
    TORCH_CHECK_VALUE(gemm::packed_supported(id), op, ": config ", gemm::config_name(id),
                      " has no packed grouped kernel (gemm::packed_supported)");
    launch.swizzle = static_cast<int>(swizzle);
    launch.raster = static_cast<int>(raster);
  }
  launch_packed(op, "", p, id, launch);
  return out;
}

}  // namespace

at::Tensor grouped_packed_gathered(const char* op, const void* a_pos, const at::Tensor& a_neg,
                                   const int32_t* row_map, int64_t rows, const at::Tensor& b,
                                   const at::Tensor& offs) {
  const c10::cuda::CUDAGuard device_guard(a_neg.device());
  check_engine_inputs(op, a_neg);
  const int64_t k = a_neg.size(1), e = b.size(0), n = b.size(1);
  auto out = at::empty({rows, n}, a_neg.options());
  if (rows == 0 || e == 0 || n == 0) return out;
  gemm::Problem p = engine_problem(op, a_neg, b, out.data_ptr(), rows, n, k);
  p.a = a_pos;
  p.a_neg = a_neg.data_ptr();
  p.a_row_map = row_map;
  p.batches = static_cast<int>(e);
  p.group_end = offs.data_ptr<int>();
  gemm::Launch launch = packed_launch();
  const gemm::ConfigId id = packed_plan(p, a_neg, &launch);
  launch_packed(op, "the gathered grouped GEMM ", p, id, launch);
  return out;
}

void grouped_packed_gathered_segments(const char* op, const void* a_pos, const at::Tensor& a_neg,
                                      const int32_t* row_map, const at::Tensor& b,
                                      const int32_t* group_begin, const int32_t* group_end,
                                      int groups_per_b, at::Tensor& out, int leave_sms) {
  const c10::cuda::CUDAGuard device_guard(a_neg.device());
  check_engine_inputs(op, a_neg);
  const int64_t rows = out.size(0), k = a_neg.size(1), e = b.size(0), n = b.size(1);
  if (rows == 0 || e == 0 || n == 0) return;
  gemm::Problem p = engine_problem(op, a_neg, b, out.data_ptr(), rows, n, k);
  p.a = a_pos;
  p.a_neg = a_neg.data_ptr();
  p.a_row_map = row_map;
  p.batches = static_cast<int>(e);
  p.group_end = group_end;
  p.group_begin = group_begin;
  p.groups_per_b = groups_per_b;
  gemm::Launch launch = packed_launch();
  const gemm::ConfigId id = packed_plan(p, a_neg, &launch);
  launch.sm_count = std::max(1, launch.sm_count - std::max(0, leave_sms));
  launch_packed(op, "the gathered grouped GEMM over row segments ", p, id, launch);
}

namespace {

// What the packed op runs for these operands ("<config>/s<swizzle>/<m|n> (tuned)").
std::string packed_plan_cuda(const at::Tensor& a, const at::Tensor& b, const at::Tensor& offs) {
  validate_packed(a, b, offs);
  const c10::cuda::CUDAGuard device_guard(a.device());
  check_engine_inputs("mkernel.gemm_grouped_plan", a);
  gemm::Problem p =
      engine_problem("mkernel.gemm_grouped_plan", a, b, nullptr, a.size(0), b.size(1), a.size(1));
  p.batches = static_cast<int>(b.size(0));
  p.group_end = offs.data_ptr<int>();
  if (p.m == 0 || p.batches == 0 || p.n == 0) return "empty";
  gemm::Launch launch = packed_launch();
  bool tuned = false;
  const gemm::ConfigId id = packed_plan(p, a, &launch, &tuned, /*wait=*/true);
  return plan_name(id, launch.swizzle, launch.raster, tuned);
}

at::Tensor grouped_cuda(const at::Tensor& a, const at::Tensor& b, const at::Tensor& counts) {
  validate(a, b, counts);
  const c10::cuda::CUDAGuard device_guard(a.device());
  check_engine_inputs(kOp, a);
  validation::check_aligned16(kOp, "a", a);  // TMA reads both from their starts
  validation::check_aligned16(kOp, "b", b);
  const int64_t e = a.size(0), c = a.size(1), k = a.size(2), n = b.size(1);
  auto out = at::empty({e, c, n}, a.options());
  if (e == 0 || c == 0 || n == 0) return out;
  gemm::Launch launch;
  launch.stream = at::cuda::getCurrentCUDAStream();
  const cudaError_t checked = gemm::check_group_counts(counts.data_ptr<int>(), static_cast<int>(e),
                                                       static_cast<int>(c), launch.stream);
  TORCH_CHECK(checked == cudaSuccess, kOp,
              ": counts check launch failed: ", cudaGetErrorString(checked));
  gemm::Problem p = engine_problem(kOp, a, b, out.data_ptr(), c, n, k);
  p.batches = static_cast<int>(e);
  p.batch_rows = counts.data_ptr<int>();
  const gemm::ConfigId id = gemm::resolve_hooked(p, gemm::ConfigId::kAuto, launch);
  if (const char* why = gemm::can_implement(p, id, launch)) {
    TORCH_CHECK(false, kOp, ": cannot run E=", e, " C=", c, " N=", n, " K=", k, ": ", why);
  }
  launch.splits = 1;  // split-K would need a workspace per batch; experts give the SMs work
  gemm::HookArgs h;   // no communication hooks
  const char* reason = nullptr;
  const cudaError_t err = gemm::run_hooked(p, id, launch, h, &reason);
  TORCH_CHECK(err == cudaSuccess, kOp, ": launch failed (", gemm::config_name(id),
              "): ", cudaGetErrorString(err), reason ? std::string(" / ") + reason : std::string());
  return out;
}
#endif  // MKERNEL_WITH_CUDA

}  // namespace

TORCH_LIBRARY_IMPL(mkernel, Meta, m) {
  m.impl("gemm_grouped", &grouped_meta);
  m.impl("gemm_grouped_packed", &packed_meta);
}
TORCH_LIBRARY_IMPL(mkernel, CPU, m) {
  m.impl("gemm_grouped", &grouped_cpu);
  m.impl("gemm_grouped_packed", &packed_cpu);
  m.impl("gemm_grouped_plan", [](const at::Tensor& a, const at::Tensor& b, const at::Tensor& offs) {
    validate_packed(a, b, offs);
    return std::string("host reference");
  });
}
#ifdef MKERNEL_WITH_CUDA
TORCH_LIBRARY_IMPL(mkernel, CUDA, m) {
  m.impl("gemm_grouped", &grouped_cuda);
  m.impl("gemm_grouped_packed", &packed_cuda);
  m.impl("gemm_grouped_plan", &packed_plan_cuda);
}
#endif  // MKERNEL_WITH_CUDA

}  // namespace mkernel
