// mkernel.gemm: the GEMM engine as an op of its own (tests, benchmarks,
// autotuning), plus the glue every fused op uses to reach the engine.
//
//   a [M, K], b [N, K]  ->  a @ b.T  [M, N]
#include <torch/library.h>

#include <string>

#include "env_knobs.h"
#include "gemm_engine.h"
#include "gemv_engine.h"
#include "ops_validation.h"

#ifdef MKERNEL_WITH_CUDA
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <tuple>
#include <utility>
#include <vector>

#include "kernels/gemm/gemm_api.h"
#include "kernels/gemm/gemm_swap_api.h"
#endif

namespace mkernel {
namespace {
constexpr const char* kOp = "mkernel.gemm";
// How many tile configurations the engine ships (ids 0..kGemmConfigs-1), counted from the
// generated table so that the check below needs no CUDA.
constexpr int kGemmConfigs = 0
#define MKERNEL_GEMM_CONFIG(ENUM, ID, NAME) +1
#include "kernels/gemm/configs.inc"
#undef MKERNEL_GEMM_CONFIG
    ;
}  // namespace

GemmSizes validate_gemm(const at::Tensor& a, const at::Tensor& b, int64_t config, int64_t sm_count,
                        int64_t swizzle, int64_t raster, int64_t splits) {
  TORCH_CHECK_VALUE(splits >= 0, kOp, ": splits must be >= 0 (0: by shape), got ", splits);
  // Split-K runs on the hooked kernel's cooperative configs; the shape plan
  // would otherwise pick a config and silently drop the request.
  TORCH_CHECK_VALUE(splits <= 1 || config >= 0, kOp,
                    ": splits > 1 needs an explicit cooperative config (e.g. coop_128x256_c1x2)");
  validation::check_linear_operands(kOp, "a", a, "[M, K]", "b", b, "[N, K]", "K");
  TORCH_CHECK_VALUE(config >= -1 && config < kGemmConfigs, kOp,
                    ": config must be -1 (by shape) or a config id in [0, ", kGemmConfigs,
                    ") (mkernel.GEMM_CONFIGS names them), got ", config);
  TORCH_CHECK_VALUE(sm_count >= 0, kOp, ": sm_count must be >= 0, got ", sm_count);
  TORCH_CHECK_VALUE(swizzle == 0 || swizzle == 1 || swizzle == 2 || swizzle == 4 || swizzle == 8,
                    kOp, ": swizzle must be 0 (by shape), 1, 2, 4 or 8, got ", swizzle);
  TORCH_CHECK_VALUE(raster >= 0 && raster <= 2, kOp,
                    ": raster must be 0 (by shape), 1 (along M) or 2 (along N), got ", raster);
  return {a.sym_size(0), b.sym_size(0), a.sym_size(1)};
}

at::Tensor reference_gemm(const at::Tensor& a, const at::Tensor& b) {
  return at::matmul(a.to(at::kFloat), b.to(at::kFloat).t()).to(a.scalar_type());
}

#ifdef MKERNEL_WITH_CUDA
void* engine_workspace(size_t bytes, const at::Tensor& like) {
  if (bytes == 0) return nullptr;
  // One zero-filled scratch per (device, stream), grown on demand: the engine
  // leaves its split-K tickets at zero after every launch, and launches on one
  // stream never overlap, so the buffer is reused without a memset per call.
  //
  // A CUDA graph bakes the buffer's address into its kernels and may replay
  // long after capture, so a buffer handed out during a capture is the
  // graph's for good: each capture (its id) gets buffers of its own, never
  // reused outside it and never freed (a later, larger shape in the same
  // capture retires the smaller one to `retired`, still alive). Allocated
  // under capture, at::zeros' memset is captured too: each replay zeroes the
  // buffer before the kernels that use it. Eager buffers are freed when they
  // grow (stream-ordered, so the launches queued on them finish first).
  struct Key {
    int device;
    cudaStream_t stream;
    unsigned long long capture;  // 0: eager
    bool operator<(const Key& o) const {
      return std::tie(device, stream, capture) < std::tie(o.device, o.stream, o.capture);
    }
  };
  static std::mutex mu;
  // Never destroyed: freeing CUDA memory from a static destructor at exit can
  // run after the driver has shut down.
  static auto& scratch = *new std::map<Key, at::Tensor>();
  static auto& retired = *new std::vector<at::Tensor>();
  const cudaStream_t stream = at::cuda::getCurrentCUDAStream();
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  unsigned long long capture = 0;
  C10_CUDA_CHECK(cudaStreamGetCaptureInfo(stream, &status, &capture));
  if (status != cudaStreamCaptureStatusActive) capture = 0;
  const std::lock_guard<std::mutex> lock(mu);
  at::Tensor& t = scratch[{like.get_device(), stream, capture}];
  if (!t.defined() || static_cast<size_t>(t.numel()) < bytes) {
    if (t.defined() && capture != 0) retired.push_back(t);  // a captured kernel may use it
    const int64_t grown = static_cast<int64_t>(bytes) * 5 / 4;  // room for a slightly larger shape
    t = at::zeros({grown}, like.options().dtype(at::kByte));
  }
  return t.data_ptr();
}

// SMs of the current device as this process sees them (fewer under MPS),
// queried once per device: every GEMM call needs it.
int device_sms() {
  constexpr int kMaxDevices = 64;
  static std::atomic<int> cached[kMaxDevices];
  int dev = 0;
  C10_CUDA_CHECK(cudaGetDevice(&dev));
  int sms = dev < kMaxDevices ? cached[dev].load(std::memory_order_relaxed) : 0;
  if (sms == 0) {
    C10_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
    if (dev < kMaxDevices) cached[dev].store(sms, std::memory_order_relaxed);
  }
  return sms;
}

std::string plan_name(gemm::ConfigId config, int swizzle, int raster, bool tuned) {
  return std::string(gemm::config_name(config)) + "/s" + std::to_string(swizzle) +
         (raster == 2 ? "/n" : "/m") + (tuned ? " (tuned)" : "");
}

void check_engine_inputs(const char* op, const at::Tensor& a) {
  const auto& prop = *at::cuda::getCurrentDeviceProperties();
  TORCH_CHECK(prop.major == 9 && prop.minor == 0, op,
              ": the fused kernels need a Hopper GPU (sm_90a); this is sm_", prop.major, prop.minor,
              " (", prop.name, ")");
  TORCH_CHECK(a.scalar_type() == at::kBFloat16 || a.scalar_type() == at::kHalf, op,
              ": the GEMM engine takes bfloat16 or float16, got ", a.scalar_type());
}

gemm::Problem engine_problem(const char* op, const at::Tensor& a, const at::Tensor& b, void* d,
                             int64_t rows, int64_t n, int64_t k) {
  TORCH_CHECK(rows <= INT32_MAX && n <= INT32_MAX && k <= INT32_MAX, op,
              ": each of the rows, N and K must fit in int32, got ", rows, ", ", n, ", ", k);
  return {a.data_ptr(),
          b.data_ptr(),
          d,
          static_cast<int>(rows),
          static_cast<int>(n),
          static_cast<int>(k),
          a.scalar_type() == at::kBFloat16 ? gemm::DType::kBF16 : gemm::DType::kFP16};
}

at::Tensor engine_gemm(const char* op, const at::Tensor& a, const at::Tensor& b, int64_t config,
                       int64_t sm_count, int64_t swizzle, int64_t raster, int64_t splits,
                       bool pdl) {
  // Launch on the operands' device, whatever the caller's current device.
  const c10::cuda::CUDAGuard device_guard(a.device());
  check_engine_inputs(op, a);
  TORCH_CHECK_VALUE(config < static_cast<int64_t>(gemm::ConfigId::kNumConfigs), op,
                    ": config must be < ", static_cast<int>(gemm::ConfigId::kNumConfigs), ", got ",
                    config);
  const int64_t m = a.size(0), n = b.size(0), k = a.size(1);
  auto out = at::empty({m, n}, a.options());
  if (m == 0 || n == 0) return out;
  if (k == 0) return out.zero_();
  // M <= 8 with everything left open: the GEMV kernel streams B faster than any
  // tile config (gemv_api.h); an explicit sm_count keeps the persistent engine.
  // From 9 rows the small-M tuner chooses (below).
  const bool all_open = config < 0 && sm_count == 0 && swizzle == 0 && raster == 0 && splits <= 1;
  gemv::Plan gemv_plan;
  const bool gemv_ok = all_open && gemv_planned(m, n, k, device_sms(), &gemv_plan);
  if (gemv_ok && m <= 8 && engine_gemv(op, a, b, out, gemv_plan)) return out;
  gemm::Problem p = engine_problem(op, a, b, out.data_ptr(), m, n, k);
  // 9 to 512 rows, everything open, the bucket already measured: one map lookup, then the
  // launch (no engine plan lookup, no plan-table read). s11 run 1: auto ran 42.4 us at
  // 16x8192x8192 where the same kernel pinned ran 38.8.
  static const bool fast_lookup = [] {  // MKERNEL_GEMM_SMALLM_FASTPATH=0: the full path (A/B)
    const char* v = env::get("MKERNEL_GEMM_SMALLM_FASTPATH");
    return v == nullptr || std::strcmp(v, "0") != 0;
  }();
  if (fast_lookup && all_open && m > 8 && m <= kSwapMaxRows) {
    const SmallPlan hit = cached_small_plan(p, device_sms(), a.get_device());
    if (hit.kind == SmallPlan::kSwap && engine_swap(op, a, b, out, hit.swap)) return out;
    if (hit.kind == SmallPlan::kGemv && engine_gemv(op, a, b, out, hit.gemv)) return out;
    if (hit.kind == SmallPlan::kSplit && engine_split(op, a, b, out, hit)) return out;
  }
  auto id = static_cast<gemm::ConfigId>(config);
  gemm::Launch launch;
  launch.stream = at::cuda::getCurrentCUDAStream();
  launch.sm_count = sm_count > 0 ? static_cast<int>(sm_count) : device_sms();
  launch.swizzle = static_cast<int>(swizzle);
  launch.raster = static_cast<int>(raster);
  launch.splits = static_cast<int>(splits);
  launch.pdl = pdl;
  if (config < 0 && swizzle == 0 && raster == 0 && splits <= 1) {
    const gemm::Plan plan = engine_plan(p, launch, a);
    // 9 to 512 rows with the SMs left open: the small-M tuner's choice (engine, swapped GEMM,
    // GEMV), else up to 16 rows the GEMV's by-shape plan.
    if (sm_count == 0 && m <= kSwapMaxRows) {
      const SmallPlan small = engine_small_plan(p, launch, plan, a);
      if (small.kind == SmallPlan::kSwap && engine_swap(op, a, b, out, small.swap)) return out;
      if (small.kind == SmallPlan::kGemv && engine_gemv(op, a, b, out, small.gemv)) return out;
      if (small.kind == SmallPlan::kSplit && engine_split(op, a, b, out, small)) return out;
      if (small.kind == SmallPlan::kNone && gemv_ok && engine_gemv(op, a, b, out, gemv_plan)) {
        return out;
      }
    }
    id = plan.config;
    launch.swizzle = plan.swizzle;
    launch.raster = plan.raster;
    launch.splits = 1;
  }
  if (const char* why = gemm::can_implement(p, id, launch)) {
    TORCH_CHECK(false, op, ": the GEMM engine cannot run M=", m, " N=", n, " K=", k, " (",
                gemm::config_name(id), "): ", why);
  }
  // An explicit split count runs the hooked kernel (split-K lives there).
  const bool hooked = splits > 1;  // validate_gemm: only with an explicit config
  // Split-K lives in the hooked kernel's cooperative configs; its ping-pong config
  // (ping_128x128_c1x2, hooked for the fused ops) takes none (gemm_sm90.cuh refuses it at launch,
  // which would surface as a launch failure rather than a bad argument).
  const bool split_k_config =
      gemm::hooked_supported(id) && id != gemm::ConfigId::kPing128x128Cluster1x2;
  TORCH_CHECK_VALUE(!hooked || split_k_config, op, ": splits > 1 needs a cooperative config (the ",
                    "hooked kernel's split-K); ", gemm::config_name(id), " is not one");
  if (hooked) {
    const gemm::TileCounts tc = gemm::tile_counts(id, static_cast<int>(m), static_cast<int>(n));
    TORCH_CHECK_VALUE(static_cast<int64_t>(tc.tiles_m) * tc.tiles_n <= 16384, op,
                      ": splits > 1 runs on at most 16384 output tiles (kSplitKMaxTiles); M=", m,
                      " N=", n, " with ", gemm::config_name(id), " makes ",
                      static_cast<int64_t>(tc.tiles_m) * tc.tiles_n, " (use splits=1)");
  }
  // Two kinds of scratch: the hooked kernel's (split-K tickets, kept zero by
  // the kernel: cached per stream) and CUTLASS's (which initialises its own
  // and leaves arbitrary bytes: fresh from the caching allocator each call).
  launch.workspace_bytes =
      hooked ? gemm::hooked_workspace_size(p, id, launch) : gemm::workspace_size(p, id, launch);
  at::Tensor cutlass_scratch;
  if (hooked) {
    launch.workspace = engine_workspace(launch.workspace_bytes, a);
  } else if (launch.workspace_bytes > 0) {
    cutlass_scratch =
        at::empty({static_cast<int64_t>(launch.workspace_bytes)}, a.options().dtype(at::kByte));
    launch.workspace = cutlass_scratch.data_ptr();
  }
  const char* reason = nullptr;
  const cudaError_t err = hooked ? gemm::run_hooked(p, id, launch, gemm::HookArgs{}, &reason)
                                 : gemm::run(p, id, launch, &reason);
  TORCH_CHECK(err == cudaSuccess, op, ": GEMM launch failed (", gemm::config_name(id),
              "): ", cudaGetErrorString(err), reason ? std::string(" / ") + reason : std::string());
  return out;
}

std::string split_plan_name(const SmallPlan& c) {
  return std::string("split:") + gemm::config_name(c.split_config) + "/k" + std::to_string(c.splits);
}

bool engine_split(const char* op, const at::Tensor& a, const at::Tensor& b, const at::Tensor& out,
                  const SmallPlan& plan) {
  const gemm::Problem p = engine_problem(op, a, b, out.data_ptr(), a.size(0), b.size(0), a.size(1));
  gemm::Launch launch;  // tile order by shape, as mkernel.gemm(a, b, config=..., splits=...)
  launch.stream = at::cuda::getCurrentCUDAStream();
  launch.sm_count = device_sms();
  launch.splits = plan.splits;
  if (plan.splits < 2 || !gemm::hooked_supported(plan.split_config) ||
      gemm::can_implement(p, plan.split_config, launch) != nullptr) {
    return false;
  }
  // The hooked kernel's workspace: split-K tickets (kept zero by every launch) and partials.
  launch.workspace_bytes = gemm::hooked_workspace_size(p, plan.split_config, launch);
  launch.workspace = engine_workspace(launch.workspace_bytes, a);
  const char* reason = nullptr;
  const cudaError_t err = gemm::run_hooked(p, plan.split_config, launch, gemm::HookArgs{}, &reason);
  TORCH_CHECK(err == cudaSuccess, op, ": split-K GEMM launch failed (", split_plan_name(plan),
              "): ", cudaGetErrorString(err), reason ? std::string(" / ") + reason : std::string());
  return true;
}
#endif  // MKERNEL_WITH_CUDA

namespace {

at::Tensor gemm_meta(const at::Tensor& a, const at::Tensor& b, int64_t config, int64_t sm_count,
                     int64_t swizzle, int64_t raster, int64_t splits, bool /*pdl*/) {
  const GemmSizes s = validate_gemm(a, b, config, sm_count, swizzle, raster, splits);
  return a.new_empty_symint({s.rows, s.n});
}

at::Tensor gemm_cpu(const at::Tensor& a, const at::Tensor& b, int64_t config, int64_t sm_count,
                    int64_t swizzle, int64_t raster, int64_t splits, bool /*pdl*/) {
  validate_gemm(a, b, config, sm_count, swizzle, raster, splits);
  return reference_gemm(a, b);
}

#ifdef MKERNEL_WITH_CUDA
at::Tensor gemm_cuda(const at::Tensor& a, const at::Tensor& b, int64_t config, int64_t sm_count,
                     int64_t swizzle, int64_t raster, int64_t splits, bool pdl) {
  validate_gemm(a, b, config, sm_count, swizzle, raster, splits);
  validation::check_aligned16(kOp, "a", a);
  validation::check_aligned16(kOp, "b", b);
  return engine_gemm(kOp, a, b, config, sm_count, swizzle, raster, splits, pdl);
}

// What `gemm(a, b)` with config "auto" runs: "<config>/s<swizzle>/<m|n>", with
// " (tuned)" when the autotuner chose it. Tunes the shape if it is new.
std::string gemm_plan_cuda(const at::Tensor& a, const at::Tensor& b, int64_t sm_count) {
  validate_gemm(a, b, -1, sm_count, 0, 0, 0);
  constexpr const char* kPlanOp = "mkernel.gemm_plan";
  const c10::cuda::CUDAGuard device_guard(a.device());
  check_engine_inputs(kPlanOp, a);
  TORCH_CHECK(a.size(0) > 0 && b.size(0) > 0 && a.size(1) > 0, kPlanOp,
              ": M, N and K must be >= 1");
  gemv::Plan gemv_plan;
  const bool gemv_ok =
      sm_count == 0 && gemv_planned(a.size(0), b.size(0), a.size(1), device_sms(), &gemv_plan);
  if (gemv_ok && a.size(0) <= 8) return gemv::plan_name(gemv_plan);  // what engine_gemm runs first
  // No output: the tuner times its candidates into a D of its own.
  const gemm::Problem p = engine_problem(kPlanOp, a, b, nullptr, a.size(0), b.size(0), a.size(1));
  gemm::Launch launch;
  launch.stream = at::cuda::getCurrentCUDAStream();
  launch.sm_count = sm_count > 0 ? static_cast<int>(sm_count) : device_sms();
  bool tuned = false;
  const gemm::Plan plan = engine_plan(p, launch, a, &tuned, /*wait=*/true);
  if (sm_count == 0 && p.m <= kSwapMaxRows) {  // what engine_gemm runs next
    bool small_tuned = false;
    const SmallPlan small = engine_small_plan(p, launch, plan, a, &small_tuned, /*wait=*/true);
    const char* mark = small_tuned ? " (tuned)" : "";
    if (small.kind == SmallPlan::kSwap) return gemm_swap::variant_name(small.swap) + std::string(mark);
    if (small.kind == SmallPlan::kGemv) return gemv::plan_name(small.gemv) + mark;
    if (small.kind == SmallPlan::kSplit) return split_plan_name(small) + mark;
    if (small.kind == SmallPlan::kNone && gemv_ok) return gemv::plan_name(gemv_plan);
  }
  return plan_name(plan.config, plan.swizzle, plan.raster, tuned);
}
#endif  // MKERNEL_WITH_CUDA

}  // namespace

TORCH_LIBRARY_IMPL(mkernel, Meta, m) { m.impl("gemm", &gemm_meta); }
TORCH_LIBRARY_IMPL(mkernel, CPU, m) {
  m.impl("gemm", &gemm_cpu);
  m.impl("gemm_plan", [](const at::Tensor& a, const at::Tensor& b, int64_t sm_count) {
    validate_gemm(a, b, -1, sm_count, 0, 0, 0);
    return std::string("host reference");
  });
}
#ifdef MKERNEL_WITH_CUDA
TORCH_LIBRARY_IMPL(mkernel, CUDA, m) {
  m.impl("gemm", &gemm_cuda);
  m.impl("gemm_plan", &gemm_plan_cuda);
}
#endif  // MKERNEL_WITH_CUDA

}  // namespace mkernel
