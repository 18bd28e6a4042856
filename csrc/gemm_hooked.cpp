// mkernel.gemm_hooked: the hooked GEMM kernel with its communication hooks
// driven by plain flag tensors — how the fused ops use the engine, exposed
// for tests and benchmarks.
//
//   a [M, K], b [N, K]  ->  a @ b.T  [M, N], where
//   (a) the tile loading A rows r..r+BLOCK_M first waits until a_ready[i] >= a_ready_value
//       for every i = row / rows_per_flag of those rows (int64 flags, written by a copy
//       engine, another stream, process or GPU);
//   (b) after tile (m, n) is in global memory, tile_done[m * tiles_n + n] = tile_done_value;
//   (c) M units are visited in the order m_order (int32 permutation) if given.
#include <torch/library.h>

#include <mutex>
#include <string>

#include "gemm_engine.h"
#include "ops_validation.h"

#ifdef MKERNEL_WITH_CUDA
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>

#include "kernels/gemm/gemm_api.h"
#endif
#include "comm/wait_record.h"

namespace mkernel {
namespace {
constexpr const char* kOp = "mkernel.gemm_hooked";

void check_flags(const c10::optional<at::Tensor>& t, const char* arg, const at::Tensor& a) {
  if (!t.has_value()) return;
  TORCH_CHECK(t->scalar_type() == at::kLong, kOp, ": ", arg, " must be int64, got ",
              t->scalar_type());
  TORCH_CHECK(t->dim() == 1 && t->is_contiguous(), kOp, ": ", arg,
              " must be a contiguous 1-D tensor, got shape ", t->sizes());
  TORCH_CHECK(t->device() == a.device(), kOp, ": ", arg, " must be on ", a.device(), ", got ",
              t->device());
}

at::Tensor gemm_hooked_meta(const at::Tensor& a, const at::Tensor& b,
                            const c10::optional<at::Tensor>& a_ready, int64_t rows_per_flag,
                            int64_t, const c10::optional<at::Tensor>& tile_done, int64_t,
                            const c10::optional<at::Tensor>& m_order, int64_t config,
                            int64_t sm_count, int64_t swizzle, int64_t raster, double,
                            int64_t splits) {
  const GemmSizes s = validate_gemm(a, b, config, sm_count, swizzle, raster, splits);
  TORCH_CHECK_VALUE(rows_per_flag >= 1, kOp, ": rows_per_flag must be >= 1, got ", rows_per_flag);
  check_flags(a_ready, "a_ready", a);
  check_flags(tile_done, "tile_done", a);
  if (m_order.has_value()) {
    TORCH_CHECK(m_order->scalar_type() == at::kInt && m_order->dim() == 1, kOp,
                ": m_order must be a 1-D int32 tensor");
  }
  return a.new_empty_symint({s.rows, s.n});
}

at::Tensor gemm_hooked_cpu(const at::Tensor& a, const at::Tensor&, const c10::optional<at::Tensor>&,
                           int64_t, int64_t, const c10::optional<at::Tensor>&, int64_t,
                           const c10::optional<at::Tensor>&, int64_t, int64_t, int64_t, int64_t,
                           double, int64_t) {
  TORCH_CHECK(false, kOp, ": runs on CUDA tensors only (a is on ", a.device(), ")");
}

#ifdef MKERNEL_WITH_CUDA
at::Tensor gemm_hooked_cuda(const at::Tensor& a, const at::Tensor& b,
                            const c10::optional<at::Tensor>& a_ready, int64_t rows_per_flag,
                            int64_t a_ready_value, const c10::optional<at::Tensor>& tile_done,
                            int64_t tile_done_value, const c10::optional<at::Tensor>& m_order,
                            int64_t config, int64_t sm_count, int64_t swizzle, int64_t raster,
                            double timeout_s, int64_t splits) {
  gemm_hooked_meta(a, b, a_ready, rows_per_flag, a_ready_value, tile_done, tile_done_value, m_order,
                   config, sm_count, swizzle, raster, timeout_s, splits);
  const c10::cuda::CUDAGuard device_guard(a.device());
  check_engine_inputs(kOp, a);
  TORCH_CHECK_VALUE(timeout_s > 0, kOp, ": timeout_s must be > 0, got ", timeout_s);
  const int64_t m = a.size(0), n = b.size(0), k = a.size(1);
  auto out = at::empty({m, n}, a.options());
  if (m == 0 || n == 0) return out;
  gemm::Problem p = engine_problem(kOp, a, b, out.data_ptr(), m, n, k);
  gemm::Launch launch;
  launch.stream = at::cuda::getCurrentCUDAStream();
  launch.sm_count = static_cast<int>(sm_count);
  launch.swizzle = static_cast<int>(swizzle);
  launch.raster = static_cast<int>(raster);
  launch.splits = static_cast<int>(splits);
  const gemm::ConfigId id = gemm::resolve_hooked(p, static_cast<gemm::ConfigId>(config), launch);
  TORCH_CHECK(
      gemm::hooked_supported(id), kOp, ": config ", gemm::config_name(id),
      " has no hooked kernel (the cooperative persistent configs and ping_128x128_c1x2 have one)");
  if (const char* why = gemm::can_implement(p, id, launch)) {
    TORCH_CHECK(false, kOp, ": cannot run M=", m, " N=", n, " K=", k, ": ", why);
  }
  const gemm::TileCounts tc = gemm::tile_counts(id, static_cast<int>(m), static_cast<int>(n));
  if (a_ready.has_value()) {
    const int64_t need = (m + rows_per_flag - 1) / rows_per_flag;
    TORCH_CHECK(a_ready->numel() >= need, kOp, ": a_ready needs ", need, " flags for M=", m,
                " and rows_per_flag=", rows_per_flag, ", got ", a_ready->numel());
  }
  if (tile_done.has_value()) {
    TORCH_CHECK(tile_done->numel() >= static_cast<int64_t>(tc.tiles_m) * tc.tiles_n, kOp,
                ": tile_done needs tiles_m * tiles_n = ", tc.tiles_m, " * ", tc.tiles_n,
                " flags for config ", gemm::config_name(id), ", got ", tile_done->numel());
  }
  if (m_order.has_value()) {
    TORCH_CHECK(m_order->numel() == tc.units_m && m_order->device() == a.device(), kOp,
                ": m_order must hold units_m = ", tc.units_m, " entries on ", a.device(),
                " for config ", gemm::config_name(id), ", got ", m_order->numel());
  }
  gemm::HookArgs h;
  h.a_ready = a_ready ? reinterpret_cast<const uint64_t*>(a_ready->data_ptr<int64_t>()) : nullptr;
  h.rows_per_flag = static_cast<int>(rows_per_flag);
  h.a_ready_value = static_cast<uint64_t>(a_ready_value);
  h.tile_done = tile_done ? reinterpret_cast<uint64_t*>(tile_done->data_ptr<int64_t>()) : nullptr;
  h.tile_done_value = static_cast<uint64_t>(tile_done_value);
  h.m_order = m_order ? m_order->data_ptr<int>() : nullptr;
  h.timeout_s = timeout_s;
  h.diag = comm::process_wait_diagnostic();
  launch.workspace_bytes = gemm::hooked_workspace_size(p, id, launch);
  launch.workspace = engine_workspace(launch.workspace_bytes, a);
  const char* reason = nullptr;
  const cudaError_t err = gemm::run_hooked(p, id, launch, h, &reason);
  TORCH_CHECK(err == cudaSuccess, kOp, ": launch failed (", gemm::config_name(id),
              "): ", cudaGetErrorString(err), reason ? std::string(" / ") + reason : std::string());
  return out;
}
#endif  // MKERNEL_WITH_CUDA

// The record of this process's first timed-out device wait (gemm_hooked or any group's
// kernel: comm/wait_record.h), or "".
std::string wait_diagnostic() { return comm::last_wait_failure(); }

std::vector<int64_t> gemm_tile_counts(int64_t config, int64_t m, int64_t n) {
#ifdef MKERNEL_WITH_CUDA
  const auto tc = gemm::tile_counts(static_cast<gemm::ConfigId>(config), static_cast<int>(m),
                                    static_cast<int>(n));
  return {tc.tiles_m, tc.tiles_n, tc.units_m, tc.block_m, tc.block_n};
#else
  TORCH_CHECK(false, "mkernel.gemm_tile_counts: built without CUDA");
#endif
}

}  // namespace

TORCH_LIBRARY_IMPL(mkernel, CompositeExplicitAutograd, m) {
  m.impl("wait_diagnostic", &wait_diagnostic);
  m.impl("gemm_tile_counts", &gemm_tile_counts);
}
TORCH_LIBRARY_IMPL(mkernel, Meta, m) { m.impl("gemm_hooked", &gemm_hooked_meta); }
TORCH_LIBRARY_IMPL(mkernel, CPU, m) { m.impl("gemm_hooked", &gemm_hooked_cpu); }
#ifdef MKERNEL_WITH_CUDA
TORCH_LIBRARY_IMPL(mkernel, CUDA, m) { m.impl("gemm_hooked", &gemm_hooked_cuda); }
#endif  // MKERNEL_WITH_CUDA

}  // namespace mkernel
