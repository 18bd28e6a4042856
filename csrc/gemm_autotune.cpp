// The GEMM engine's cached autotuner: what config "auto" runs for a shape.
//
// The shape heuristic (gemm::select_plan) is fitted to one H200's sweeps, but
// neighbouring configs sit within a few percent of each other and which one
// wins moves with the shape's wave count, L2 reuse and the GPU's power state.
// So the first call of a shape times the heuristic's plan and a few measured
// alternates (gemm::candidate_plans: none splits K, so every candidate gives
// the same bits) on the caller's own operands, and keeps the fastest.
//
// What a job must not pay for it:
//  - a new token count: plans are kept per M bucket (the next power of two,
//    plans::m_bucket), so MoE routing and dynamic batches reuse them;
//  - a new process: plans persist in a file keyed by the device model, SMs,
//    driver and runtime (gemm_plan_store.h), read at the first lookup;
//  - other threads: lookups never wait for a tuning. One tuning runs per
//    device at a time (timings must not overlap); a call that would tune
//    while another does runs the heuristic's plan, uncached, and tunes later;
//  - other ranks: one rank tunes, mkernel.share_gemm_plans / gemm_plan(...,
//    group=) hand its plans to the rest (so all ranks run the same plan).
// Later calls cost one map lookup.
//
// Not while a CUDA graph is being captured (timing would be captured too):
// then a known plan or the heuristic's runs and nothing is tuned.
//
// The packed grouped (MoE) GEMM is tuned the same way over the hooked
// kernel's configs (grouped_plan), keyed by (experts, T bucket, N, K) and
// timed on the first call's routing.
// MKERNEL_GEMM_AUTOTUNE=0 turns tuning off (the heuristic alone).
#include "env_knobs.h"
#include "gemm_engine.h"
#include "gemm_plan_store.h"
#include "gemm_warm_up.h"

#ifdef MKERNEL_WITH_CUDA
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "gemv_engine.h"
#include "kernels/gemm/gemm_swap_api.h"

namespace mkernel {
namespace {

// device, dtype, experts (0: a plain GEMM), M bucket (of T when grouped), n, k, SMs
using Key = std::tuple<int, int, int, int64_t, int64_t, int64_t, int>;

// The fast path's map, derived from the plan table (plans::find): dropped
// whenever the table imports plans (plans::generation).
struct Cache {
  std::mutex mu;
  std::map<Key, gemm::Plan> plans;
  uint64_t generation = 0;
};
Cache& cache() {
  static auto* c = new Cache();  // never destroyed: may be used until exit
  return *c;
}

constexpr int kMaxDevices = 64;
// One tuning at a time per device: candidates timed against each other's
// kernels would rank wrongly. Never held by a lookup.
std::mutex& tuner_mutex(int device) {
  static auto* mus = new std::mutex[kMaxDevices];
  return mus[device >= 0 && device < kMaxDevices ? device : 0];
}

// What the timings depend on, for the plan table's key: model, compute
// capability, SMs of the launch, driver and runtime versions, and the tuner's
// method (";tune2": the warm-up to the power cap of session 52; plans a file
// holds from the old 100 ms warm-up are not reused: that tuner picked plans up
// to 15% slower at the cap).
std::string device_signature(int device, int sms) {
  static const std::string versions = [] {
    int driver = 0, runtime = 0;
    cudaDriverGetVersion(&driver);
    cudaRuntimeGetVersion(&runtime);
    return ";drv" + std::to_string(driver) + ";rt" + std::to_string(runtime) + ";tune2";
  }();
  const cudaDeviceProp* prop = at::cuda::getDeviceProperties(device);
  return std::string(prop->name) + ";sm" + std::to_string(prop->major) +
         std::to_string(prop->minor) + ";sms" + std::to_string(sms) + versions;
}

std::string plan_text(const gemm::Plan& plan) {
  return plan_name(plan.config, plan.swizzle, plan.raster, false);
}

// plan_text's inverse; nullopt for text no config of this build answers to.
std::optional<gemm::Plan> parse_plan(const std::string& text) {
  const size_t a = text.find("/s"), b = text.rfind('/');
  if (a == std::string::npos || b <= a + 2 || b + 2 != text.size()) return std::nullopt;
  const std::string name = text.substr(0, a);
  const int swizzle = std::atoi(text.substr(a + 2, b - a - 2).c_str());
  const char raster = text[b + 1];
  if (raster != 'm' && raster != 'n') return std::nullopt;
  for (int id = 0; id < static_cast<int>(gemm::ConfigId::kNumConfigs); ++id) {
    const auto cfg = static_cast<gemm::ConfigId>(id);
    if (name == gemm::config_name(cfg)) return gemm::Plan{cfg, swizzle, raster == 'n' ? 2 : 1};
  }
  return std::nullopt;
}

// MKERNEL_GEMM_AUTOTUNE_LOG=1: one stderr line per tuned shape and stage
// (each candidate's median, or why it could not run).
bool tuning_logged() {
  static const bool on = [] {
    const char* v = env::get("MKERNEL_GEMM_AUTOTUNE_LOG");
    return v != nullptr && std::strcmp(v, "0") != 0;
  }();
  return on;
}

bool tuning_enabled() {
  static const bool on = [] {
    const char* v = env::get("MKERNEL_GEMM_AUTOTUNE");
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

// MKERNEL_GEMM_AUTOTUNE_WARM_MS=N: a fixed warm-up of N ms (0: none); unset, warm_up's own rule.
int fixed_warm_ms() {
  static const int ms = [] {
    const char* v = env::get("MKERNEL_GEMM_AUTOTUNE_WARM_MS");
    if (v == nullptr || *v == '\0') return -1;
    char* end = nullptr;
    const long n = std::strtol(v, &end, 10);
    TORCH_CHECK(*end == '\0' && n >= 0 && n <= 60000,
                "MKERNEL_GEMM_AUTOTUNE_WARM_MS must be an integer number of milliseconds in [0, "
                "60000], got '",
                v, "'");
    return static_cast<int>(n);
  }();
  return ms;
}

// Brings the GPU to the state the timed rounds should see, the board's power cap: blocks of ~25
// ms of `launch` until gemm_warm_up.h's rule says the call time settled (a GPU already at the cap,
// a training step's next shape, settles at the rule's minimum).
template <class LaunchFn>
void warm_up(cudaStream_t stream, float call_ms, LaunchFn&& launch) {
  auto calls_for = [&](float ms) {
    return std::clamp(static_cast<int>(ms / std::max(call_ms, 1e-3f)), 1, 100000);
  };
  if (const int fixed = fixed_warm_ms(); fixed >= 0) {
    for (int rep = fixed > 0 ? calls_for(static_cast<float>(fixed)) : 0; rep > 0; --rep) launch();
    return;
  }
  const int reps = calls_for(gemm::WarmUpRule::kBlockMs);
  gemm::WarmUpRule rule;
  EventPair ev;
  std::string trace;  // the blocks' per-call times, for MKERNEL_GEMM_AUTOTUNE_LOG
  for (bool over = false; !over;) {
    C10_CUDA_CHECK(cudaEventRecord(ev.start, stream));
    for (int rep = 0; rep < reps; ++rep) launch();
    C10_CUDA_CHECK(cudaEventRecord(ev.stop, stream));
    C10_CUDA_CHECK(cudaEventSynchronize(ev.stop));
    float ms = 0.f;
    C10_CUDA_CHECK(cudaEventElapsedTime(&ms, ev.start, ev.stop));
    if (tuning_logged()) trace += " " + std::to_string(ms / reps);
    over = rule.add(ms);
  }
  if (tuning_logged()) {
    std::fprintf(stderr, "mkernel autotune: warm-up %.0f ms (%s), ms per call by block:%s\n",
                 rule.spent_ms(), rule.settled() ? "settled" : "the limit", trace.c_str());
  }
}

// The fastest of `count` candidates (launch(i) runs candidate i; false: it
// cannot run), as they run in a training step: back to back on a loaded GPU.
// Timing each call alone on an idle GPU ranks them differently — measured on
// the H200 (run 16): the packed MoE GEMM's 128x256 cooperative and 128x128
// ping-pong plans both took 1.34 ms one call at a time, but 1.52 and 1.46 ms
// in a sustained loop (the GPU at its power limit clocks lower, and the
// plans do not slow down alike). So the GPU is first brought to that state
// (warm_up above), then every sample is a block of ~4 ms of one candidate's
// calls, the blocks of a round queued back to back with one stream sync per
// round and the order rotating between rounds. Two stages: every candidate for
// 3 rounds, then the three fastest for 7 more; the lowest median wins. About
// 0.3 s once per shape after the warm-up.
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
  warm_up(stream, shortest, [&] { launch(ok[0]); });  // to the sustained state
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
  std::vector<int> top = rank(finalists, 7, 4.f);
  if (top.size() < 2) return top.front();
  // The two best once more, alone, 15 rounds: in s9 run 3 (333x8192x8192) a 7-round median
  // kept a candidate 1.3% slower than the runner-up, within the spread a neighbour's work adds.
  return rank({top[0], top[1]}, 15, 4.f).front();
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

// Whether `plan` runs this problem (a plan from another M of its bucket, a
// file or another rank is checked before it is trusted).
bool runs(const gemm::Problem& p, const gemm::Launch& l, const gemm::Plan& plan, bool hooked) {
  if (hooked && !(p.group_end != nullptr ? gemm::packed_supported(plan.config)
                                          : gemm::hooked_supported(plan.config))) {
    return false;
  }
  gemm::Launch c = l;
  c.swizzle = plan.swizzle;
  c.raster = plan.raster;
  c.splits = 1;
  return gemm::can_implement(p, plan.config, c) == nullptr;
}

// The plan of `key` (fast map, then the plan table: tuned here, in an earlier
// process or on another rank), tuned among candidates(out, capacity) on a
// miss. The tuning holds only its device's tuner mutex; a caller that would
// wait for it (`wait` false) runs the first candidate instead, uncached.
// Under graph capture a miss runs the first candidate and caches nothing.
// table_key() (the plan table's key, a string) is built on a miss of the fast
// map only: a hit costs one map lookup.
template <class TableKeyFn, class CandidatesFn>
gemm::Plan cached_plan(const Key& key, TableKeyFn&& table_key, const gemm::Problem& p,
                       const gemm::Launch& l, const at::Tensor& like, bool hooked, bool wait,
                       bool* tuned, CandidatesFn&& candidates) {
  Cache& c = cache();
  std::string text_key;  // table_key(), once needed
  auto lookup = [&]() -> std::optional<gemm::Plan> {
    {
      const std::lock_guard<std::mutex> lock(c.mu);
      const uint64_t gen = plans::generation();
      if (c.generation != gen) {  // plans were imported: re-derive from the table
        c.plans.clear();
        c.generation = gen;
      }
      auto it = c.plans.find(key);
      if (it != c.plans.end()) return it->second;
    }
    if (text_key.empty()) text_key = table_key();
    const std::optional<std::string> text = plans::find(text_key);
    if (!text) return std::nullopt;
    const std::optional<gemm::Plan> plan = parse_plan(*text);
    if (!plan || !runs(p, l, *plan, hooked)) return std::nullopt;  // stale: tune anew
    const std::lock_guard<std::mutex> lock(c.mu);
    c.plans[key] = *plan;
    return plan;
  };
  if (std::optional<gemm::Plan> hit = lookup()) {
    if (tuned) *tuned = true;
    return *hit;
  }
  gemm::Plan cands[12];
  const int count = candidates(cands, 12);
  if (count <= 1 || capturing(l.stream)) return cands[0];
  std::unique_lock<std::mutex> tuner(tuner_mutex(like.get_device()), std::defer_lock);
  if (wait) {
    tuner.lock();
  } else if (!tuner.try_lock()) {
    return cands[0];  // the device is tuning another shape: don't stall this call
  }
  if (std::optional<gemm::Plan> hit = lookup()) {  // tuned while this thread waited
    if (tuned) *tuned = true;
    return *hit;
  }
  const gemm::Plan best = tune(p, l, cands, count, like, hooked);
  plans::insert(text_key, plan_text(best), /*persist=*/true);
  {
    const std::lock_guard<std::mutex> lock(c.mu);
    c.plans[key] = best;
  }
  if (tuned) *tuned = true;
  return best;
}

const char* dtype_name(gemm::DType dt) { return dt == gemm::DType::kBF16 ? "bf16" : "fp16"; }

}  // namespace

std::string gemm_device_signature(int device, int sms) { return device_signature(device, sms); }

gemm::Plan engine_plan(const gemm::Problem& p, const gemm::Launch& l, const at::Tensor& like,
                       bool* tuned, bool wait) {
  const int sms = l.sm_count;  // completed by the caller
  if (tuned) *tuned = false;
  if (!tuning_enabled()) return gemm::select_plan(p.m, p.n, p.k, sms);
  const int dev = like.get_device();
  const Key key{dev, static_cast<int>(p.dtype), 0, plans::m_bucket(p.m), p.n, p.k, sms};
  auto table_key = [&] {
    return plans::key(device_signature(dev, sms), dtype_name(p.dtype), 0, p.m, p.n, p.k);
  };
  return cached_plan(key, table_key, p, l, like, /*hooked=*/false, wait, tuned,
                     [&](gemm::Plan* out, int cap) {
                       return gemm::candidate_plans(p.m, p.n, p.k, sms, out, cap);
                     });
}

gemm::Plan grouped_plan(const gemm::Problem& p, const gemm::Launch& l, const at::Tensor& like,
                        bool* tuned, bool wait) {
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
  // Keyed by the rows of all experts together (bucketed), not by the routing:
  // the split of T over the experts changes every step, the shapes do not. Gathered A rows
  // (p.a_row_map) are a problem of their own: their best config differs (session 23:
  // coop_128x256_c1x2 gathered at 0.97x its TMA twin, _c2x1 at 0.87x).
  const int dev = like.get_device();
  const bool gathered = p.a_row_map != nullptr;
  const Key key{dev, static_cast<int>(p.dtype) + (gathered ? 16 : 0), p.batches,
                plans::m_bucket(p.m), p.n, p.k, sms};
  auto table_key = [&] {
    const std::string dtype = std::string(dtype_name(p.dtype)) + (gathered ? "+gather" : "");
    return plans::key(device_signature(dev, sms), dtype.c_str(), p.batches, p.m, p.n, p.k);
  };
  return cached_plan(key, table_key, p, l, like, /*hooked=*/true, wait, tuned, candidates);
}


// The small-M choice (engine_small_plan): the engine's plan against the swapped GEMM's
// variants (and from 9 to 16 rows the GEMV's), timed like the engine's candidates (fastest) on
// the caller's operands. Keyed by the engine's M bucket (the next power of two), so a new token
// count reuses its bucket's choice instead of stalling a step on a tuning (every candidate runs
// every M of its bucket; the first M of a bucket picks). The table's value is "engine", the
// swapped variant's name or the GEMV plan's ("gemv/w8u2r2").
namespace {
struct SmallCache {
  std::mutex mu;
  std::map<Key, SmallPlan> choice;
  uint64_t generation = 0;
};
SmallCache& small_cache() {
  static auto* c = new SmallCache();  // never destroyed: may be used until exit
  return *c;
}

std::string small_text(const SmallPlan& c) {
  if (c.kind == SmallPlan::kSwap) return gemm_swap::variant_name(c.swap);
  if (c.kind == SmallPlan::kGemv) return gemv::plan_name(c.gemv);
  if (c.kind == SmallPlan::kSplit) return split_plan_name(c);
  return "engine";
}

std::optional<SmallPlan> parse_small(const std::string& text) {
  SmallPlan c;
  if (text == "engine") {
    c.kind = SmallPlan::kEngine;
    return c;
  }
  for (int v = 0; v < gemm_swap::kNumVariants; ++v) {
    if (text == gemm_swap::variant_name(v)) {
      c.kind = SmallPlan::kSwap;
      c.swap = v;
      return c;
    }
  }
  const size_t at = text.find("/k");
  const int splits = at == std::string::npos ? 1 : std::atoi(text.c_str() + at + 2);
  if (text.rfind("split:", 0) == 0 && at != std::string::npos) {  // "split:<config>/k<splits>"
    const std::string name = text.substr(6, at - 6);
    for (int id = 0; id < static_cast<int>(gemm::ConfigId::kNumConfigs); ++id) {
      const auto cfg = static_cast<gemm::ConfigId>(id);
      if (name != gemm::config_name(cfg) || splits < 2) continue;
      c.kind = SmallPlan::kSplit;
      c.split_config = cfg;
      c.splits = splits;
      return c;
    }
    return std::nullopt;
  }
  for (int v = 0; v < gemv::kNumVariants; ++v) {
    if (text == gemv::plan_name({v, splits})) {
      c.kind = SmallPlan::kGemv;
      c.gemv = {v, splits};
      return c;
    }
  }
  return std::nullopt;
}

// The launch of a kSplit plan (tile order by shape, as engine_split runs it).
gemm::Launch split_launch(const gemm::Launch& l, const SmallPlan& c) {
  gemm::Launch s = l;
  s.swizzle = 0;
  s.raster = 0;
  s.splits = c.splits;
  s.pdl = false;
  return s;
}

// Whether `c` runs p (a choice from another M of its bucket, a file or another rank).
bool small_runs(const gemm::Problem& p, const SmallPlan& c, int sms) {
  if (c.kind == SmallPlan::kSwap) return gemm_swap::can_implement(p, c.swap, sms) == nullptr;
  if (c.kind == SmallPlan::kGemv) return gemv::can_implement(p, c.gemv) == nullptr;
  if (c.kind == SmallPlan::kSplit) {
    gemm::Launch l;
    l.sm_count = sms;
    return c.splits >= 2 && gemm::hooked_supported(c.split_config) &&
           gemm::can_implement(p, c.split_config, split_launch(l, c)) == nullptr;
  }
  return c.kind == SmallPlan::kEngine;
}

// Session 9's small-M kernels: the swapped variants 7-10 (64x16 ping, 128x16 stream-K, 128x112
// stream-K, 64x176 ping) passed their tests on the GPU (s9 run 2) and are candidates; the
// row-split GEMV variants 11-13 ran 40.7-52.4 us at 1x8192x8192 where w8u2r1 runs 35.7 (s9 run
// 2) and were not all checked, and the K-chunked variants 14-15 (written after run 2) have not
// run on a GPU: candidates only with MKERNEL_GEMM_SMALLM_S9=1.
bool s9_candidates() {
  static const bool on = [] {
    const char* v = env::get("MKERNEL_GEMM_SMALLM_S9");
    return v != nullptr && std::strcmp(v, "1") == 0;
  }();
  return on;
}
constexpr int kFirstS9Gemv = 11;  // gemv_sm90.cu: rows_w8u2 onwards (and ks_w8r2, ks_w16r2)

// Session 10's swapped variants 11-14 (256x176 by stream-K and by split-K in two or four,
// epilogue stored from the registers; 128x176 with stream-K forced): correct on the GPU (s10
// run 2) but 13-35% slower than 128x176 at 333 rows, so candidates only with
// MKERNEL_GEMM_SMALLM_S10=1 (tuning time). Variant 15 (64x16, 256-deep k-blocks: correct, and
// 1-2% faster than swap_64x16_ping at 16 rows in s10 run 2) is a candidate by default.
bool s10_candidates() {
  static const bool on = [] {
    const char* v = env::get("MKERNEL_GEMM_SMALLM_S10");
    return v != nullptr && std::strcmp(v, "1") == 0;
  }();
  return on;
}
constexpr int kFirstS10Swap = 11;  // gemm_swap_dispatch.cu: swap_256x176_streamk ..
constexpr int kLastS10OptIn = 14;  // .. swap_256x176_k4 (15, swap_64x16k256_ping: by default)
// swap_128x176_c2x1 (0) and swap_128x176_streamk (1, data-parallel at 8192 weight rows) run the
// same tile; pinned, 1 ran 0.9-1.8% faster at 333x8192x8192 in three runs (s9 run 3, s10 runs 1
// and 2) and 23% faster at 333x3584x8192, yet the tuner kept 0 every time (its back-to-back
// calls on one operand set favour the multicast cluster; a decode step's inputs are new each
// call, as in the bench's rotating sets). Where both fit, only 1 is timed.
constexpr int kSwapC2x1 = 0, kSwapStreamK176 = 1;

// Session 11 (MKERNEL_GEMM_SMALLM_S11=1 until a device run checks them): for shapes whose
// 128-row weight tiles fill under half the SMs (333 x 3584 x 8192: 56 tiles of 128x176 on 132
// SMs; auto 43.4 us against cuBLAS's 31.7 in s11 run 1's graph replay), the swapped 128x176
// tile split-K in two (variant 16) and the engine's hooked 128x256 tile (tokens on M) with K
// split to fill one wave (3 x 14 tiles x 3 = 126 CTAs).
bool s11_candidates() {
  static const bool on = [] {
    const char* v = env::get("MKERNEL_GEMM_SMALLM_S11");
    return v != nullptr && std::strcmp(v, "1") == 0;
  }();
  return on;
}
constexpr int kSwapK2_176 = 16;  // gemm_swap_dispatch.cu: swap_128x176_k2

// Session 12 (MKERNEL_GEMM_SMALLM_S12=1): the ticketed swapped variants 17-20
// (gemm_swap_ticket_sm90.cuh: groups of CTAs, one per token tile, each an equal range of the
// weight blocks' k-blocks; split tiles summed through tickets), 128x176, 128x112, 128x112 with
// 128-deep k-blocks and 256x112. s12 run 2: correct, but 1.2-1.8x slower than data-parallel with
// the first (ungrouped) schedule; the grouped one has not run on a GPU.
bool s12_candidates() {
  static const bool on = [] {
    const char* v = env::get("MKERNEL_GEMM_SMALLM_S12");
    return v != nullptr && std::strcmp(v, "1") == 0;
  }();
  return on;
}
constexpr int kFirstS12Swap = 17;  // gemm_swap_dispatch.cu: swap_128x176_tk .. swap_256x112_tk
constexpr int kLastS12Swap = 20;

// Session 13 (MKERNEL_GEMM_SMALLM_S13=1 until a device run checks it): swap_128x336_wide
// (gemm_swap_wide_sm90.cuh: all of 269-336 tokens in one 128x336 tile, the weights' k-blocks
// spread over every SM, split tiles summed through tickets).
bool s13_candidates() {
  static const bool on = [] {
    const char* v = env::get("MKERNEL_GEMM_SMALLM_S13");
    return v != nullptr && std::strcmp(v, "1") == 0;
  }();
  return on;
}
constexpr int kSwapWide336 = 21;  // gemm_swap_dispatch.cu: swap_128x336_wide

// gemm14 (MKERNEL_GEMM_SMALLM_S14=1 until a device run checks them): the structure of cuBLAS's
// kernels at 333 tokens as far as CUTLASS builds it (176-wide token tiles: 168 does not build):
// 128x176 in 1x2 clusters (the weight tile multicast to both token tiles), 5 stages; 64x176 in
// 4x2 clusters, 7 stages, non-persistent (3584 weight rows: 112 CTAs in 14 clusters of 8).
bool s14_candidates() {
  static const bool on = [] {
    const char* v = env::get("MKERNEL_GEMM_SMALLM_S14");
    return v != nullptr && std::strcmp(v, "1") == 0;
  }();
  return on;
}
constexpr int kFirstS14Swap = 22;  // gemm_swap_dispatch.cu: swap_128x176_c1x2, swap_64x176_c4x2
constexpr int kLastS14Swap = 23;

// gemm15 (MKERNEL_GEMM_SMALLM_S15=1 until a device run checks them): 168-wide token tiles (333
// tokens in 336, cuBLAS's tile; CUTLASS's mainloop with 2-D stage layouts for the TMA,
// sm90_mma_stage2d.hpp): 128x168 without a cluster, 1x2 and 2x1; 64x168 in 4x2 and 1x2,
// non-persistent; the controls: swap:1's and 23's kernels with their register-stored epilogue;
// 128x168 1x2 and 64x168 4x2 with TMA cache hints (weights evict-first, tokens evict-last).
bool s15_candidates() {
  static const bool on = [] {
    const char* v = env::get("MKERNEL_GEMM_SMALLM_S15");
    return v != nullptr && std::strcmp(v, "1") == 0;
  }();
  return on;
}
constexpr int kFirstS15Swap = 24;  // gemm_swap_dispatch.cu: swap_128x168 .. swap_64x168_c4x2_h
constexpr int kLastS15Swap = 32;

// The split-K plan for p, kNone where the 128x256 tiles already fill half the SMs or K is too
// short to split: as many splits (2..8) as keep every CTA in one wave, >= 4 k-blocks per split.
SmallPlan split_candidate(const gemm::Problem& p, int sms) {
  SmallPlan c;
  if (p.m <= 128) return c;  // a 128-row token tile would be mostly padding
  const int64_t tiles = ((p.m + 127) / 128) * ((p.n + 255) / 256);
  if (2 * tiles > sms) return c;
  const int64_t k_blocks = (p.k + 63) / 64;
  const int splits = static_cast<int>(std::min<int64_t>({8, sms / tiles, k_blocks / 4}));
  if (splits < 2) return c;
  c.kind = SmallPlan::kSplit;
  c.split_config = gemm::ConfigId::kCoop128x256Cluster1x2;
  c.splits = splits;
  return c;
}

// The candidates of p: the engine's plan first, then the swapped variants that fit M, then
// (9 to 16 rows) the GEMV's by-shape plan and its register variants for two groups of rows.
std::vector<SmallPlan> small_candidates(const gemm::Problem& p, int sms) {
  std::vector<SmallPlan> out;
  SmallPlan engine;
  engine.kind = SmallPlan::kEngine;
  out.push_back(engine);
  int variants[gemm_swap::kNumVariants];
  const int count = gemm_swap::candidates(p.m, p.n, p.k, sms, variants, gemm_swap::kNumVariants);
  const bool has_streamk176 =
      std::find(variants, variants + count, kSwapStreamK176) != variants + count;
  for (int i = 0; i < count; ++i) {
    if (variants[i] >= kFirstS10Swap && variants[i] <= kLastS10OptIn && !s10_candidates()) continue;
    if (variants[i] == kSwapC2x1 && has_streamk176) continue;
    if (variants[i] >= kFirstS12Swap && variants[i] <= kLastS12Swap && !s12_candidates()) continue;
    if (variants[i] == kSwapWide336 && !s13_candidates()) continue;
    // s14run1 (gemm14's rule): 23 beat swap:10 by 19 % (bf16) / 16 % (fp16) in graph replay at
    // 333x3584x8192, so it is timed by default below 8192 weight rows; 22 missed the 1 % bar in bf16.
    if (variants[i] >= kFirstS14Swap && variants[i] <= kLastS14Swap && !s14_candidates() &&
        !(variants[i] == 23 && p.n < 8192))
      continue;
    // s15run1 (gemm15's rule, NOTES "Session 16"): the best 168-wide variants beat the pick by >= 1 %
    // in both dtypes at 333 tokens: swap:24 (128x168) at >= 8192 weight rows, swap:32 (64x168 4x2,
    // cache hints) below; both now timed by default on their side, the rest stay opt-in.
    if (variants[i] >= kFirstS15Swap && variants[i] <= kLastS15Swap && !s15_candidates() &&
        !(variants[i] == 24 && p.n >= 8192) && !(variants[i] == 32 && p.n < 8192))
      continue;
    if (variants[i] == kSwapK2_176) {  // split-K in two: only where two waves' worth fit in one
      const int64_t units = 2 * ((p.n + 127) / 128) * ((p.m + 175) / 176);
      if (!s11_candidates() || units > sms) continue;
    }
    SmallPlan c;
    c.kind = SmallPlan::kSwap;
    c.swap = variants[i];
    out.push_back(c);
  }
  if (s11_candidates()) {
    const SmallPlan split = split_candidate(p, sms);
    if (split.kind == SmallPlan::kSplit && small_runs(p, split, sms)) out.push_back(split);
  }
  // 9 to 16 rows on weights of >= 3584 rows: the swapped 16-wide tiles (variants 7, 15) ran
  // faster than every GEMV variant in both s11 runs, both dtypes, at 16x8192x8192 and
  // 16x3584x8192, eager and in graph replay (s11 run 2, graph, bf16: swap_64x16k256_ping 33.56 /
  // 17.91 us, the best GEMV 37.92 / 19.43), yet the tuner kept gemv/w8u2r2 at 16x3584x8192 bf16
  // in s11 run 2 (19.41 us graph): its back-to-back calls on one operand set keep much of a
  // 58.7 MB weight in the 50 MB L2, which a decode step's layers (and the bench's rotating sets)
  // do not. There the GEMV is not timed; narrower weights keep it (its K split fills the SMs
  // where 64-row tiles cannot). MKERNEL_GEMM_SMALLM_GEMV16=1 times it again (the A/B).
  static const bool gemv16 = [] {
    const char* v = env::get("MKERNEL_GEMM_SMALLM_GEMV16");
    return v != nullptr && std::strcmp(v, "1") == 0;
  }();
  constexpr int kSwap64x16 = 7, kSwap64x16K256 = 15;
  const bool swap16 = std::any_of(out.begin(), out.end(), [&](const SmallPlan& c) {
    return c.kind == SmallPlan::kSwap && (c.swap == kSwap64x16 || c.swap == kSwap64x16K256);
  });
  const bool gemv_timed = gemv16 || !(swap16 && p.m > 8 && p.n >= 3584);
  gemv::Plan by_shape;
  if (gemv_timed && gemv_planned(p.m, p.n, p.k, sms, &by_shape)) {  // up to 16 rows (MKERNEL_GEMM_GEMV=0: none)
    // 9 to 16 rows: a lane holds two groups of A fragments, and every 16-row block reads its
    // A rows again (as many bytes as its B rows): w4u2r1 (the by-shape plan) ran 0.83-0.98x
    // cuBLAS at M=16 (s6 run 2); w8u2r2 and w8u1r4 read A once per 32 and 64 rows; the
    // swapped 64-wide tiles and the engine's tiles once per tile of 64-128 weight rows.
    // Session 9: the row-split variants (warps split B's rows, A staged once per block in shared
    // memory, K split over a cluster), each with its by-shape split.
    const auto rows = [&](int v) { return gemv::plan_for_variant(v, p.m, p.n, p.k, sms); };
    for (const gemv::Plan g : {by_shape, gemv::Plan{10, 1}, gemv::Plan{5, 1}, gemv::Plan{2, 1},
                               gemv::Plan{1, 1}, rows(11), rows(12), rows(13), gemv::Plan{14, 1},
                               gemv::Plan{15, 1}}) {
      bool seen = false;
      for (const SmallPlan& o : out) {
        seen |= o.kind == SmallPlan::kGemv && o.gemv.variant == g.variant && o.gemv.splits == g.splits;
      }
      if (seen || gemv::can_implement(p, g) != nullptr) continue;
      if (g.variant >= kFirstS9Gemv && !s9_candidates()) continue;
      SmallPlan c;
      c.kind = SmallPlan::kGemv;
      c.gemv = g;
      out.push_back(c);
    }
  }
  return out;
}

// Times the candidates (index 0: the engine's plan); returns the fastest.
SmallPlan tune_small(gemm::Problem p, const gemm::Launch& l, const gemm::Plan& engine,
                     const std::vector<SmallPlan>& cands, const at::Tensor& like) {
  const at::Tensor d = at::empty({p.m, p.n}, like.options());
  p.d = d.data_ptr();
  gemm::Launch el = l;
  el.swizzle = engine.swizzle;
  el.raster = engine.raster;
  el.splits = 1;
  const bool engine_ok = gemm::can_implement(p, engine.config, el) == nullptr;
  el.workspace_bytes = engine_ok ? gemm::workspace_size(p, engine.config, el) : 0;
  size_t scratch_bytes = el.workspace_bytes, gemv_bytes = 0;
  for (const SmallPlan& c : cands) {
    if (c.kind == SmallPlan::kSwap && gemm_swap::zeroed_workspace(c.swap)) {  // tickets
      gemv_bytes = std::max(gemv_bytes, gemm_swap::workspace_size(p, c.swap, l.sm_count));
    } else if (c.kind == SmallPlan::kSwap) {
      scratch_bytes = std::max(scratch_bytes, gemm_swap::workspace_size(p, c.swap, l.sm_count));
    } else if (c.kind == SmallPlan::kGemv) {
      gemv_bytes = std::max(gemv_bytes, gemv::workspace_size(p, c.gemv));
    } else if (c.kind == SmallPlan::kSplit) {  // the same zeroed workspace (tickets) as the GEMV's
      gemv_bytes = std::max(gemv_bytes,
                            gemm::hooked_workspace_size(p, c.split_config, split_launch(l, c)));
    }
  }
  // CUTLASS's scratch (the engine's plan, stream-K): one for all, the launches of one stream
  // never overlap and CUTLASS initialises what it uses. The GEMV's K split needs the engine's
  // zeroed ticket workspace (kept zero by every launch), and so do the ticketed swapped variants.
  at::Tensor scratch;
  if (scratch_bytes) {
    scratch = at::empty({static_cast<int64_t>(scratch_bytes)}, like.options().dtype(at::kByte));
  }
  void* ws = scratch_bytes ? scratch.data_ptr() : nullptr;
  void* gemv_ws = engine_workspace(gemv_bytes, like);
  el.workspace = el.workspace_bytes ? ws : nullptr;
  const int best = fastest(
      static_cast<int>(cands.size()), l.stream,
      [&](int i) {
        const SmallPlan& c = cands[i];
        if (c.kind == SmallPlan::kSwap) {
          void* swap_ws = gemm_swap::zeroed_workspace(c.swap) ? gemv_ws : ws;
          return gemm_swap::run(p, c.swap, l.sm_count, swap_ws, l.stream) == cudaSuccess;
        }
        if (c.kind == SmallPlan::kGemv) {
          return gemv::can_implement(p, c.gemv) == nullptr &&
                 gemv::run(p, c.gemv, l.stream, gemv_ws) == cudaSuccess;
        }
        if (c.kind == SmallPlan::kSplit) {
          gemm::Launch sl = split_launch(l, c);
          sl.workspace_bytes = gemm::hooked_workspace_size(p, c.split_config, sl);
          sl.workspace = gemv_ws;
          return gemm::run_hooked(p, c.split_config, sl, {}, nullptr) == cudaSuccess;
        }
        return engine_ok && gemm::run(p, engine.config, el, nullptr) == cudaSuccess;
      },
      [&](int i) {
        return cands[i].kind == SmallPlan::kEngine
                   ? plan_name(engine.config, engine.swizzle, engine.raster, false)
                   : small_text(cands[i]);
      });
  return cands[best < 0 ? 0 : best];
}
}  // namespace

SmallPlan cached_small_plan(const gemm::Problem& p, int sms, int device) {
  SmallPlan none;
  if (p.m <= 8 || p.m > kSwapMaxRows || p.batches != 1 || p.group_end != nullptr) return none;
  const Key key{device, static_cast<int>(p.dtype), -1, plans::m_bucket(p.m), p.n, p.k, sms};
  SmallCache& c = small_cache();
  const std::lock_guard<std::mutex> lock(c.mu);
  if (c.generation != plans::generation()) return none;  // plans imported: the full path re-reads
  auto it = c.choice.find(key);
  return it != c.choice.end() ? it->second : none;
}

SmallPlan engine_small_plan(const gemm::Problem& p, const gemm::Launch& l,
                            const gemm::Plan& engine, const at::Tensor& like, bool* tuned,
                            bool wait) {
  if (tuned) *tuned = false;
  const SmallPlan none;
  if (p.m <= 8 || p.m > kSwapMaxRows || p.batches != 1 || p.group_end != nullptr) return none;
  if (!tuning_enabled()) return none;
  const int sms = l.sm_count;
  const int dev = like.get_device();
  const Key key{dev, static_cast<int>(p.dtype), -1, plans::m_bucket(p.m), p.n, p.k, sms};
  SmallCache& c = small_cache();
  std::string text_key;
  auto lookup = [&]() -> std::optional<SmallPlan> {
    {
      const std::lock_guard<std::mutex> lock(c.mu);
      const uint64_t gen = plans::generation();
      if (c.generation != gen) {
        c.choice.clear();
        c.generation = gen;
      }
      auto it = c.choice.find(key);
      if (it != c.choice.end()) return it->second;
    }
    if (text_key.empty()) {
      text_key = plans::key(device_signature(dev, sms), dtype_name(p.dtype), 0, p.m, p.n, p.k) +
                 "|small";
    }
    const std::optional<std::string> text = plans::find(text_key);
    if (!text) return std::nullopt;
    const std::optional<SmallPlan> v = parse_small(*text);
    if (!v || !small_runs(p, *v, sms)) return std::nullopt;  // stale: tune anew
    const std::lock_guard<std::mutex> lock(c.mu);
    c.choice[key] = *v;
    return v;
  };
  if (std::optional<SmallPlan> hit = lookup()) {
    if (tuned) *tuned = true;
    return *hit;
  }
  const std::vector<SmallPlan> cands = small_candidates(p, sms);
  if (cands.size() <= 1 || capturing(l.stream)) return none;
  std::unique_lock<std::mutex> tuner(tuner_mutex(dev), std::defer_lock);
  if (wait) {
    tuner.lock();
  } else if (!tuner.try_lock()) {
    return none;  // the device is tuning another shape: don't stall this call
  }
  if (std::optional<SmallPlan> hit = lookup()) {
    if (tuned) *tuned = true;
    return *hit;
  }
  const SmallPlan best = tune_small(p, l, engine, cands, like);
  plans::insert(text_key, small_text(best), /*persist=*/true);
  {
    const std::lock_guard<std::mutex> lock(c.mu);
    c.choice[key] = best;
  }
  if (tuned) *tuned = true;
  return best;
}

}  // namespace mkernel
#endif  // MKERNEL_WITH_CUDA
