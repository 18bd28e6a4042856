// The GEMM engine's cached autotuner: what config "auto" runs for a shape.
//
// The shape heuristic (gemm::select_plan) is fitted to one H200's sweeps, but
// neighbouring configs sit within a few percent of each other and which one
// wins moves with the shape's wave count, L2 reuse and the GPU's power state.
// So the first call of a shape times the heuristic's plan and a few measured
// alternates (gemm::candidate_plans: none splits K, so every candidate gives
// the same bits) on the caller's own operands, and caches the fastest per
// (device, dtype, M, N, K, SMs). Later calls cost one map lookup.
//
// Not while a CUDA graph is being captured (timing would be captured too):
// then the heuristic's plan runs and nothing is cached.
//
// The packed grouped (MoE) GEMM is tuned the same way over the hooked
// kernel's configs (grouped_plan), keyed by (device, dtype, experts, T, N, K,
// SMs) and timed on the first call's routing.
// MKERNEL_GEMM_AUTOTUNE=0 turns tuning off (the heuristic alone).
#include "gemm_engine.h"

#ifdef MKERNEL_WITH_CUDA
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <string>
#include <tuple>
#include <vector>

namespace mkernel {
namespace {

// device, dtype, experts (0: a plain GEMM), m (T when grouped), n, k, SMs
using Key = std::tuple<int, int, int, int64_t, int64_t, int64_t, int>;

struct Cache {
  std::mutex mu;
  std::map<Key, gemm::Plan> plans;
};
Cache& cache() {
  static auto* c = new Cache();  // never destroyed: may be used until exit
  return *c;
}

// MKERNEL_GEMM_AUTOTUNE_LOG=1: one stderr line per tuned shape and stage
// (each candidate's median, or why it could not run).
bool tuning_logged() {
  static const bool on = [] {
    const char* v = std::getenv("MKERNEL_GEMM_AUTOTUNE_LOG");
    return v != nullptr && std::strcmp(v, "0") != 0;
  }();
  return on;
}

bool tuning_enabled() {
  static const bool on = [] {
    const char* v = std::getenv("MKERNEL_GEMM_AUTOTUNE");
    return v == nullptr || std::strcmp(v, "0") != 0;
  }();
  return on;
}

// RAII pair of CUDA events.
struct EventPair {
  cudaEvent_t start = nullptr, stop = nullptr;
  EventPair() {
    C10_CUDA_CHECK(cudaEventCreate(&start));
    C10_CUDA_CHECK(cudaEventCreate(&stop));
  }
  ~EventPair() {
    cudaEventDestroy(start);
    cudaEventDestroy(stop);
  }
  EventPair(const EventPair&) = delete;
  EventPair& operator=(const EventPair&) = delete;
};

// The fastest of `count` candidates (launch(i) runs candidate i; false: it
// cannot run), as they run in a training step: back to back on a loaded GPU.
// Timing each call alone on an idle GPU ranks them differently — measured on
// the H200 (run 16): the packed MoE GEMM's 128x256 cooperative and 128x128
// ping-pong plans both took 1.34 ms one call at a time, but 1.52 and 1.46 ms
// in a sustained loop (the GPU at its power limit clocks lower, and the
// plans do not slow down alike). So the GPU is first brought to that state
// (~100 ms of the first candidate), then every sample is a block of ~4 ms of
// one candidate's calls, the blocks of a round queued back to back with one
// stream sync per round and the order rotating between rounds. Two stages:
// every candidate for 3 rounds, then the three fastest for 7 more; the
// lowest median wins. About 0.3 s once per shape.
// Returns the winner's index, or -1 when none ran.
template <class LaunchFn, class NameFn>
int fastest(int count, cudaStream_t stream, LaunchFn&& launch, NameFn&& name) {
  std::vector<int> ok;
  float shortest = 0.f;
  {
    EventPair ev;
    for (int i = 0; i < count; ++i) {  // warm-up, and one timed call to size the blocks
      if (!launch(i)) {
        const cudaError_t err = cudaGetLastError();
        if (tuning_logged()) {
          std::fprintf(stderr, "mkernel autotune: %s cannot run (%s)\n", name(i).c_str(),
                       cudaGetErrorString(err));
        }
        continue;
      }
      C10_CUDA_CHECK(cudaEventRecord(ev.start, stream));
      launch(i);
      C10_CUDA_CHECK(cudaEventRecord(ev.stop, stream));
      C10_CUDA_CHECK(cudaEventSynchronize(ev.stop));
      float ms = 0.f;
      C10_CUDA_CHECK(cudaEventElapsedTime(&ms, ev.start, ev.stop));
      shortest = ok.empty() ? ms : std::min(shortest, ms);
      ok.push_back(i);
    }
  }
  if (ok.size() <= 1) return ok.empty() ? -1 : ok[0];
  auto calls_for = [&](float ms) {
    return std::clamp(static_cast<int>(ms / std::max(shortest, 1e-3f)), 1, 100000);
  };
  for (int rep = calls_for(100.f); rep > 0; --rep) launch(ok[0]);  // to the sustained state
  // Rounds of back-to-back samples of ~sample_ms each; the candidates ordered by their median.
  auto rank = [&](const std::vector<int>& who, int rounds, float sample_ms) {
    const int reps = calls_for(sample_ms);
    std::vector<EventPair> ev(who.size());
    std::vector<std::vector<float>> samples(who.size());
    for (int r = 0; r < rounds; ++r) {
      for (size_t j = 0; j < who.size(); ++j) {
        const size_t at = (j + r) % who.size();  // rotate who goes first
        C10_CUDA_CHECK(cudaEventRecord(ev[at].start, stream));
        for (int rep = 0; rep < reps; ++rep) launch(who[at]);
        C10_CUDA_CHECK(cudaEventRecord(ev[at].stop, stream));
      }
      C10_CUDA_CHECK(cudaStreamSynchronize(stream));
      for (size_t j = 0; j < who.size(); ++j) {
        float ms = 0.f;
        C10_CUDA_CHECK(cudaEventElapsedTime(&ms, ev[j].start, ev[j].stop));
        samples[j].push_back(ms / reps);
      }
    }
    std::vector<std::pair<float, int>> order;
    for (size_t j = 0; j < who.size(); ++j) {
      std::sort(samples[j].begin(), samples[j].end());
      order.emplace_back(samples[j][rounds / 2], who[j]);
    }
    std::sort(order.begin(), order.end());
    if (tuning_logged()) {
      std::string line = "mkernel autotune: " + std::to_string(rounds) + " rounds of " +
                         std::to_string(reps) + " call(s):";
      for (const auto& o : order) line += " " + name(o.second) + " " + std::to_string(o.first);
      std::fprintf(stderr, "%s ms\n", line.c_str());
    }
    std::vector<int> ranked;
    for (const auto& o : order) ranked.push_back(o.second);
    return ranked;
  };
  std::vector<int> finalists = rank(ok, 3, 4.f);
  if (finalists.size() > 3) finalists.resize(3);
  return rank(finalists, 7, 4.f).front();
}

// The candidates' launches, each checked and sized once (the timed loop only
// launches), writing a D of their own: the caller's output stays as it was
// (a test that poisons it still sees what the real launch wrote).
gemm::Plan tune(gemm::Problem p, const gemm::Launch& l, const gemm::Plan* cands, int count,
                const at::Tensor& like, bool hooked) {
  const int64_t rows = p.group_end != nullptr ? p.m : static_cast<int64_t>(p.m) * p.batches;
  const at::Tensor d = at::empty({rows, p.n}, like.options());
  p.d = d.data_ptr();
  std::vector<gemm::Launch> launches(count, l);
  std::vector<bool> runnable(count, false);
  size_t scratch_bytes = 0;
  for (int i = 0; i < count; ++i) {
    gemm::Launch& c = launches[i];
    c.swizzle = cands[i].swizzle;
    c.raster = cands[i].raster;
    c.splits = 1;
    if (gemm::can_implement(p, cands[i].config, c) != nullptr) continue;
    c.workspace_bytes = hooked ? gemm::hooked_workspace_size(p, cands[i].config, c)
                               : gemm::workspace_size(p, cands[i].config, c);
    scratch_bytes = std::max(scratch_bytes, c.workspace_bytes);
    runnable[i] = true;
  }
  at::Tensor scratch;
  if (scratch_bytes) {  // zeroed: the hooked kernel's contract (split-K tickets)
    scratch = at::zeros({static_cast<int64_t>(scratch_bytes)}, like.options().dtype(at::kByte));
  }
  for (gemm::Launch& c : launches) c.workspace = c.workspace_bytes ? scratch.data_ptr() : nullptr;
  const int best = fastest(
      count, l.stream,
      [&](int i) {
        if (!runnable[i]) return false;
        const cudaError_t err = hooked
                                    ? gemm::run_hooked(p, cands[i].config, launches[i], {}, nullptr)
                                    : gemm::run(p, cands[i].config, launches[i], nullptr);
        return err == cudaSuccess;
      },
      [&](int i) {
        return plan_name(cands[i].config, cands[i].swizzle, cands[i].raster, false) +
               (runnable[i] ? "" : " (can_implement refused)");
      });
  return cands[best < 0 ? 0 : best];
}

bool capturing(cudaStream_t stream) {
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  C10_CUDA_CHECK(cudaStreamIsCapturing(stream, &capture));
  return capture != cudaStreamCaptureStatusNone;
}

// The cached plan of `key`, tuned among candidates(out, capacity) on a miss.
// One lock over lookup and tuning: a shape is timed once, and two threads
// never time candidates against each other. Under graph capture a miss runs
// the first candidate and caches nothing.
template <class CandidatesFn>
gemm::Plan cached_plan(const Key& key, const gemm::Problem& p, const gemm::Launch& l,
                       const at::Tensor& like, bool hooked, bool* tuned,
                       CandidatesFn&& candidates) {
  Cache& c = cache();
  const std::lock_guard<std::mutex> lock(c.mu);
  auto it = c.plans.find(key);
  if (it == c.plans.end()) {
    gemm::Plan cands[12];
    const int count = candidates(cands, 12);
    if (count <= 1 || capturing(l.stream)) return cands[0];
    it = c.plans.emplace(key, tune(p, l, cands, count, like, hooked)).first;
  }
  if (tuned) *tuned = true;
  return it->second;
}

}  // namespace

gemm::Plan engine_plan(const gemm::Problem& p, const gemm::Launch& l, const at::Tensor& like,
                       bool* tuned) {
  const int sms = l.sm_count;  // completed by the caller
  if (tuned) *tuned = false;
  if (!tuning_enabled()) return gemm::select_plan(p.m, p.n, p.k, sms);
  const Key key{like.get_device(), static_cast<int>(p.dtype), 0, p.m, p.n, p.k, sms};
  return cached_plan(key, p, l, like, /*hooked=*/false, tuned, [&](gemm::Plan* out, int cap) {
    return gemm::candidate_plans(p.m, p.n, p.k, sms, out, cap);
  });
}

gemm::Plan grouped_plan(const gemm::Problem& p, const gemm::Launch& l, const at::Tensor& like,
                        bool* tuned) {
  const int sms = l.sm_count;
  auto candidates = [&](gemm::Plan* out, int cap) {
    return gemm::grouped_candidate_plans(p.m, p.n, p.k, p.batches, sms, out, cap);
  };
  if (tuned) *tuned = false;
  if (!tuning_enabled()) {
    gemm::Plan first;
    candidates(&first, 1);
    return first;
  }
  // Keyed by the rows of all experts together, not by the routing: the split
  // of T over the experts changes every step, the shapes do not.
  const Key key{like.get_device(), static_cast<int>(p.dtype), p.batches, p.m, p.n, p.k, sms};
  return cached_plan(key, p, l, like, /*hooked=*/true, tuned, candidates);
}

}  // namespace mkernel
#endif  // MKERNEL_WITH_CUDA
