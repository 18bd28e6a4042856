// See fused_common.h.
#ifdef MKERNEL_WITH_CUDA

#include "fused_common.h"

#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/util/Exception.h>

#include <algorithm>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <tuple>

#include "gemm_engine.h"

namespace mkernel::fused_glue {

gemm::Problem problem(const char* op, const void* a, const at::Tensor& w, void* d, int64_t rows,
                      int64_t n, int64_t k) {
  TORCH_CHECK(rows <= INT32_MAX && n <= INT32_MAX && k <= INT32_MAX, op,
              ": each of the rows, N and K must fit in int32, got ", rows, ", ", n, ", ", k);
  return {a,
          w.data_ptr(),
          d,
          static_cast<int>(rows),
          static_cast<int>(n),
          static_cast<int>(k),
          w.scalar_type() == at::kBFloat16 ? gemm::DType::kBF16 : gemm::DType::kFP16};
}

bool capturing() {
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  C10_CUDA_CHECK(cudaStreamIsCapturing(at::cuda::getCurrentCUDAStream(), &status));
  return status != cudaStreamCaptureStatusNone;
}

namespace {

// The M-unit permutation: units whose rows all belong to early-priority ranks first (a unit
// spanning two ranks' rows goes with the later of them), stable within a priority. Cached per
// (device, layout) as a device tensor; built outside graph capture only (inside, an uncached
// layout runs in the natural order: slower, never wrong).
const int* unit_order(const gemm::TileCounts& tc, int64_t rows, int64_t rank_rows,
                      const std::vector<int>& order, const at::Tensor& like) {
  if (order.empty() || tc.units_m <= 1) return nullptr;
  using Key = std::tuple<int, int64_t, int64_t, int, int, std::vector<int>>;
  static std::mutex mu;
  static std::map<Key, at::Tensor> cache;
  const Key key{like.device().index(), rows, rank_rows, tc.units_m, tc.block_m, order};
  std::lock_guard<std::mutex> lock(mu);
  auto it = cache.find(key);
  if (it != cache.end()) return it->second.data_ptr<int>();
  if (capturing()) return nullptr;
  const int cluster_m = (tc.tiles_m + tc.units_m - 1) / tc.units_m;
  const int64_t unit_rows = static_cast<int64_t>(tc.block_m) * cluster_m;
  std::vector<std::pair<int, int>> prio(tc.units_m);
  for (int u = 0; u < tc.units_m; ++u) {
    const int64_t r0 = u * unit_rows, r1 = std::min(rows, r0 + unit_rows) - 1;
    int p = 0;
    for (int64_t s = r0 / rank_rows; s <= r1 / rank_rows && s < static_cast<int64_t>(order.size());
         ++s) {
      p = std::max(p, order[s]);
    }
    prio[u] = {p, u};
  }
  std::stable_sort(prio.begin(), prio.end(),
                   [](const auto& a, const auto& b) { return a.first < b.first; });
  std::vector<int> perm(tc.units_m);
  for (int u = 0; u < tc.units_m; ++u) perm[u] = prio[u].second;
  at::Tensor t = at::tensor(perm, at::TensorOptions().dtype(at::kInt)).to(like.device());
  return cache.emplace(key, t).first->second.data_ptr<int>();
}

}  // namespace

void launch(const char* op, const gemm::Problem& p, gemm::ConfigId config, const at::Tensor& like,
            const fused::FusedParams& hooks, const std::vector<int>& order, int64_t rank_rows) {
  gemm::Launch l;
  l.stream = at::cuda::getCurrentCUDAStream();
  l.sm_count = device_sms();
  l.splits = 1;
  TORCH_CHECK(fused::fused_supported(config), op, ": config ", gemm::config_name(config),
              " has no fused kernel");
  if (const char* why = gemm::can_implement(p, config, l)) {
    TORCH_CHECK(false, op, ": cannot run M=", p.m, " N=", p.n, " K=", p.k, ": ", why);
  }
  const gemm::TileCounts tc = gemm::tile_counts(config, p.m, p.n);
  const int* m_order = unit_order(tc, p.m, rank_rows, order, like);
  const char* reason = nullptr;
  const cudaError_t err = fused::run_fused(p, config, l, m_order, hooks, &reason);
  TORCH_CHECK(err == cudaSuccess, op, ": the fused kernel failed to launch: ",
              cudaGetErrorString(err), reason ? std::string(" (") + reason + ")" : std::string());
}

void note_fallback(const char* op, const char* why) {
  static std::mutex mu;
  static std::set<std::string> seen;
  std::lock_guard<std::mutex> lock(mu);
  if (seen.insert(std::string(op) + why).second) {
    TORCH_WARN(op, ": runs unfused (the substrate's collective + the engine GEMM): ", why);
  }
}

}  // namespace mkernel::fused_glue

#endif  // MKERNEL_WITH_CUDA
