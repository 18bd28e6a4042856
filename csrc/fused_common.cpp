// See fused_common.h.
#ifdef MKERNEL_WITH_CUDA

#include "fused_common.h"

#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/util/Exception.h>
#include <dlfcn.h>
#include <mkernel/fifo.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <tuple>

#include "comm/net_path.h"
#include "env_knobs.h"
#include "fused_copy_engine.h"
#include "fused_verdict.h"
#include "fused_verdict_store.h"
#include "gemm_engine.h"
#include "kernels/fused/fused_gate_api.h"
#include "kernels/fused/fused_gpu_gate_api.h"
#include "session_layout.h"

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

// MKERNEL_FUSED_GATE_GPU=1 (measurement, opt-in, not yet run on a GPU; every rank the same):
// fused launches on a group spanning emulated nodes that share this GPU also wait for the other
// nodes' ranks' previous fused grids (fused_gpu_gate.cu), besides the node-mates' (the launch
// gate). Read per call.
// Unset: the op's default (ag_gemm: kGpuGateAgGemmByDefault; gemm_rs and gemm_ar's RS half:
// kGpuGateReduceByDefault, separate because the bench times the gate on ag_gemm first:
// benchmarks/NOTES.md "xnode3" rule 2); "0" off. Either acts only where ranks of other emulated
// nodes share this GPU (the emulation; real nodes do not share SMs).
constexpr bool kGpuGateAgGemmByDefault = false;  // until a GPU run shows it helps (rule 2)
constexpr bool kGpuGateReduceByDefault = false;  // not timed on a GPU yet
bool gpu_gate_requested(const fused::FusedParams& h) {
  if (h.net_remote <= 0) return false;
  const char* v = env::get("MKERNEL_FUSED_GATE_GPU");
  if (v == nullptr || *v == '\0') {
    return h.op == comm::kOpAgGemm ? kGpuGateAgGemmByDefault : kGpuGateReduceByDefault;
  }
  return std::strcmp(v, "1") == 0;
}

// The group's GpuGateView (cached per group; collective on the first call: every rank
// all-gathers its host, GPU UUID and the IPC handle of its exit word, and maps the words of the
// ranks of other nodes on this GPU). Null inside graph capture before it exists.
struct GpuGate {
  void* own = nullptr;                  // device memory, never freed (one word per group)
  std::vector<void*> mapped;            // IPC mappings, never closed (process lifetime)
  fused::GpuGateView view;
};

struct GpuGateBlob {
  char where[96];  // host name + '/' + GPU UUID bytes (truncated, zero-padded)
  cudaIpcMemHandle_t handle;
};

const fused::GpuGateView* gpu_gate(const char* op, int64_t group, const comm::GroupDevice& g) {
  static std::mutex mu;
  static std::map<int64_t, std::unique_ptr<GpuGate>> gates;
  {
    std::lock_guard<std::mutex> lock(mu);
    auto it = gates.find(group);
    if (it != gates.end()) return &it->second->view;
  }
  if (capturing()) return nullptr;
  auto gate = std::make_unique<GpuGate>();
  C10_CUDA_CHECK(cudaMalloc(&gate->own, 256));
  C10_CUDA_CHECK(cudaMemset(gate->own, 0, 256));
  C10_CUDA_CHECK(cudaDeviceSynchronize());  // zero before any mate can read it
  int dev = 0;
  C10_CUDA_CHECK(cudaGetDevice(&dev));
  cudaDeviceProp prop;
  C10_CUDA_CHECK(cudaGetDeviceProperties(&prop, dev));
  GpuGateBlob mine{};
  char host[64] = {};
  gethostname(host, sizeof(host) - 1);
  std::string where = std::string(host) + "/" + std::string(prop.uuid.bytes, sizeof(prop.uuid.bytes));
  std::memcpy(mine.where, where.data(), std::min(where.size(), sizeof(mine.where)));
  C10_CUDA_CHECK(cudaIpcGetMemHandle(&mine.handle, gate->own));
  const std::vector<std::string> all = session_allgather_blobs(
      op, static_cast<mk_session_t>(group), std::string(reinterpret_cast<const char*>(&mine), sizeof mine),
      op_timeout_seconds(), "the fused GPU gate's exit words");
  gate->view.own = static_cast<uint64_t*>(gate->own);
  for (int r = 0; r < static_cast<int>(all.size()) && r < comm::kMaxRanks; ++r) {
    if (r == g.rank || g.flags[r] != nullptr) continue;  // self, or a node-mate (the launch gate's)
    GpuGateBlob b{};
    TORCH_CHECK(all[r].size() == sizeof b, op, ": rank ", r, " sent a malformed GPU gate record");
    std::memcpy(&b, all[r].data(), sizeof b);
    if (std::memcmp(b.where, mine.where, sizeof mine.where) != 0) continue;  // another GPU
    void* p = nullptr;
    const cudaError_t err = cudaIpcOpenMemHandle(&p, b.handle, cudaIpcMemLazyEnablePeerAccess);
    if (err != cudaSuccess) {  // a measurement aid: this mate stays ungated (no wait can hang)
      cudaGetLastError();
      TORCH_WARN(op, ": MKERNEL_FUSED_GATE_GPU: cannot map rank ", r, "'s exit word (",
                 cudaGetErrorString(err), "); its grids stay ungated");
      continue;
    }
    gate->mapped.push_back(p);
    gate->view.mates[gate->view.count] = static_cast<const uint64_t*>(p);
    gate->view.mate_rank[gate->view.count] = r;
    ++gate->view.count;
  }
  std::lock_guard<std::mutex> lock(mu);
  return &gates.emplace(group, std::move(gate)).first->second->view;
}

}  // namespace


namespace {

// The M-unit permutation: units whose rows all belong to early-priority ranks first (a unit
// spanning two ranks' rows goes with the later of them), stable within a priority. Cached per
// (device, layout) as a device tensor; built outside graph capture only (inside, an uncached
// layout runs in the natural order: slower, never wrong).
//
// interleave (gemm_rs): the owners' units alternate instead (owner 0's first, owner 1's first,
// ..., owner 0's second, ...), the same order on every rank, so every rank's reduce work is
// spread over the whole GEMM rather than waiting for its rows' turn.
const int* unit_order(const gemm::TileCounts& tc, int64_t rows, int64_t rank_rows,
                      const std::vector<int>& order, bool interleave, const at::Tensor& like) {
  if ((order.empty() && !interleave) || tc.units_m <= 1 || rank_rows <= 0) return nullptr;
  using Key = std::tuple<int, int64_t, int64_t, int, int, std::vector<int>, bool>;
  static std::mutex mu;
  static std::map<Key, at::Tensor> cache;
  const Key key{like.device().index(), rows, rank_rows, tc.units_m, tc.block_m, order, interleave};
  std::lock_guard<std::mutex> lock(mu);
  auto it = cache.find(key);
  if (it != cache.end()) return it->second.data_ptr<int>();
  if (capturing()) return nullptr;
  const int cluster_m = (tc.tiles_m + tc.units_m - 1) / tc.units_m;
  const int64_t unit_rows = static_cast<int64_t>(tc.block_m) * cluster_m;
  std::vector<std::pair<int64_t, int>> prio(tc.units_m);
  std::map<int64_t, int64_t> seen;  // interleave: units of each owner so far
  for (int u = 0; u < tc.units_m; ++u) {
    const int64_t r0 = u * unit_rows, r1 = std::min(rows, r0 + unit_rows) - 1;
    if (interleave) {
      const int64_t owner = r0 / rank_rows;
      prio[u] = {seen[owner]++ * (rows / rank_rows + 1) + owner, u};
      continue;
    }
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

// MKERNEL_FUSED_TIMELINE=<path> (a measurement mode, never for timing the op itself: it
// synchronizes after every launch): each fused launch records per-CTA %globaltimer stamps
// (fused_params.h TimelineSlot) into a device buffer, appended after the launch as one line
// "<op> m n k config rank | w0 w1 ... " (kTimelineWords per CTA, CTAs that ran) to
// <path>.rank<r>. benchmarks/fused_diag.py reads them.
// MKERNEL_FUSED_TIMELINE_CALLS=<n> (2..kTimelineSlots; measurement, not yet run on a GPU): the
// buffer holds n launches; only the launch that fills the n-th slot synchronizes and appends the
// n lines (in launch order), so n calls run back to back as in steady state — where one rank's
// next call can start while a peer still runs the previous one (fused_diag.py section `agfc1`).
constexpr int kTimelineCtas = 1024;
constexpr int kTimelineSlots = 16;

int timeline_calls() {
  const char* v = env::get("MKERNEL_FUSED_TIMELINE_CALLS");
  const int n = v != nullptr ? std::atoi(v) : 1;
  return std::min(std::max(n, 1), kTimelineSlots);
}

struct TimelineRing {
  uint64_t* buf = nullptr;         // kTimelineSlots launches' records, never freed (measurement)
  std::vector<std::string> heads;  // the line heads of the launches recorded since the last dump
};

constexpr size_t kTimelineSlotWords = static_cast<size_t>(kTimelineCtas) * fused::kTimelineWords;

TimelineRing& timeline_ring() {
  static std::mutex mu;
  static std::map<int, TimelineRing> rings;  // per device
  int dev = 0;
  C10_CUDA_CHECK(cudaGetDevice(&dev));
  std::lock_guard<std::mutex> lock(mu);
  TimelineRing& ring = rings[dev];
  if (ring.buf == nullptr) {
    C10_CUDA_CHECK(cudaMalloc(&ring.buf, sizeof(uint64_t) * kTimelineSlotWords * kTimelineSlots));
  }
  return ring;
}

// The records of the next launch (its slot cleared on `stream`).
uint64_t* timeline_begin(cudaStream_t stream) {
  TimelineRing& ring = timeline_ring();
  uint64_t* slot = ring.buf + ring.heads.size() * kTimelineSlotWords;
  C10_CUDA_CHECK(cudaMemsetAsync(slot, 0, sizeof(uint64_t) * kTimelineSlotWords, stream));
  return slot;
}

void timeline_end(const char* path, const char* op, const gemm::Problem& p,
                  gemm::ConfigId config, const fused::FusedParams& hooks,
                  cudaStream_t stream) {
  TimelineRing& ring = timeline_ring();
  ring.heads.push_back(std::string(op) + " " + std::to_string(p.m) + " " + std::to_string(p.n) +
                       " " + std::to_string(p.k) + " " + gemm::config_name(config) + " " +
                       std::to_string(hooks.group.rank) + " side=" +
                       std::to_string(hooks.side_mode) + " tail=" +
                       std::to_string(hooks.tail_mode) + " |");
  const int held = static_cast<int>(ring.heads.size());
  if (held < timeline_calls() && held < kTimelineSlots) return;  // more launches back to back
  std::vector<uint64_t> host(kTimelineSlotWords * held);
  C10_CUDA_CHECK(cudaMemcpyAsync(host.data(), ring.buf, host.size() * sizeof(uint64_t),
                                 cudaMemcpyDeviceToHost, stream));
  C10_CUDA_CHECK(cudaStreamSynchronize(stream));
  std::string text;
  for (int launch = 0; launch < held; ++launch) {
    std::string line = ring.heads[launch];
    for (int c = 0; c < kTimelineCtas; ++c) {
      const uint64_t* r = host.data() + launch * kTimelineSlotWords +
                          static_cast<size_t>(c) * fused::kTimelineWords;
      if (r[fused::kTlStart] == 0) continue;  // no such CTA
      for (int w = 0; w < fused::kTimelineWords; ++w) line += " " + std::to_string(r[w]);
    }
    text += line + "\n";
  }
  ring.heads.clear();
  const std::string file = std::string(path) + ".rank" + std::to_string(hooks.group.rank);
  if (FILE* f = std::fopen(file.c_str(), "a")) {
    std::fputs(text.c_str(), f);
    std::fclose(f);
  }
}

}  // namespace

namespace {

// CUDA_MPS_ACTIVE_THREAD_PERCENTAGE as this MPS client set it (1..100; 100 when unset or
// malformed: then the driver gives the client every SM).
int mps_limit_percent() {
  const char* v = std::getenv("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE");
  if (v == nullptr) return 100;
  char* end = nullptr;
  const double pct = std::strtod(v, &end);
  return end != v && pct >= 1 && pct < 100 ? static_cast<int>(pct) : 100;
}

}  // namespace

int gpu_sharers(const char* op, int64_t group) {
  static std::mutex mu;
  static std::map<int64_t, int> cache;
  {
    std::lock_guard<std::mutex> lock(mu);
    auto it = cache.find(group);
    if (it != cache.end()) return it->second;
  }
  int dev = 0;
  C10_CUDA_CHECK(cudaGetDevice(&dev));
  cudaDeviceProp prop;
  C10_CUDA_CHECK(cudaGetDeviceProperties(&prop, dev));
  char host[256] = {};
  gethostname(host, sizeof(host) - 1);
  const std::string mine =
      std::string(host) + "/" + std::string(prop.uuid.bytes, sizeof(prop.uuid.bytes));
  const std::vector<std::string> all = session_allgather_blobs(
      op, static_cast<mk_session_t>(group), mine, op_timeout_seconds(), "the ranks' GPUs");
  const int sharers = static_cast<int>(std::count(all.begin(), all.end(), mine));
  std::lock_guard<std::mutex> lock(mu);
  return cache.emplace(group, std::max(1, sharers)).first->second;
}

int fused_grid(const char* op, int64_t group) {
  int grid = device_sms();
  if (mps_limit_percent() == 100) {
    const int sharers = gpu_sharers(op, group);
    if (sharers > 1) grid = std::max(2, grid / sharers / 2 * 2);  // whole 2-CTA clusters
  }
  // MKERNEL_FUSED_SMS=<n> (measurement only, every rank the same): a smaller persistent grid.
  if (const char* sms = env::get("MKERNEL_FUSED_SMS")) {
    const int want = std::atoi(sms);
    if (want >= 2 && want < grid) grid = want;
  }
  return grid;
}

bool gate_requested(const FusedPlan& plan) {
  const char* v = env::get("MKERNEL_FUSED_GATE");
  if (v == nullptr || *v == '\0') return kGateCoResidentByDefault && plan.grid > 0;
  return std::strcmp(v, "1") == 0;
}

namespace {
// MKERNEL_FUSED_GATE, _GATE_MODE, _CO_GRID, _GATE_GPU and _C1X1 as set ("-" when unset), for
// choose_path's verdict key (they change what a fused call costs, or its grid, not the list's
// length; _GATE_GPU: a call measured under the GPU gate across emulated nodes gets its own
// verdict, so bench_fused --gpu-gate reads the op's choice under the gate too).
std::string gate_setting() {
  std::string s;
  for (const char* name : {"MKERNEL_FUSED_GATE", "MKERNEL_FUSED_GATE_MODE",
                           "MKERNEL_FUSED_CO_GRID", "MKERNEL_FUSED_GATE_GPU",
                           "MKERNEL_FUSED_C1X1"}) {
    const char* v = env::get(name);
    if (!s.empty()) s += '/';
    s += v != nullptr && *v != '\0' ? v : "-";
  }
  return s;
}
}  // namespace

// The co-resident grid measured where the 3/4 rule (s8run2, W = 2) is not what MPS places: a
// share of 32 SMs (W = 4 on an H200 at 25 %), where the placement probe (bench_fused.py --probe)
// found 2-CTA grids of 28 whole on all four ranks in both reps, twice (s11run2, s12run1), and
// the fused kernels' outputs on it checked (s12run1, MKERNEL_FUSED_CO_GRID=28, gated, W = 4
// ag/rs/ar/graph); the 3/4 rule gives 24. 28 since s12run2, by fused12's rule: on the W = 4
// Llama M=8192 rows grid 28 gave the same bits and ran 0.884 / 0.914 / 0.918x grid 24 (ag / rs /
// ar, paired). 0 restores the 3/4 rule. The Python mirror python/mkernel/_fused_defaults.py
// CO_GRID_AT_SHARE_32 must match (tests/core/test_fused_defaults.py checks it).
constexpr int kCoGridAtShare32 = 28;

int co_resident_grid(int grid) {
  if (mps_limit_percent() == 100) return 0;
  // MKERNEL_FUSED_CO_GRID=<n> (opt-in, every rank the same; an even n in [2, grid]): this grid
  // instead of 3/4 of the share. Why: the 3/4 rule is s8run2's W = 2 measurement (two clients'
  // 2-CTA clusters: 96 of 132 SMs); at W = 4 (33 SMs each) nobody has measured how many clusters
  // MPS places for four clients (benchmarks/mps_place.py does), and every SM the fused grid can
  // hold is GEMM rate (benchmarks/NOTES.md "Fused ops, fused12").
  if (const char* v = env::get("MKERNEL_FUSED_CO_GRID")) {
    const int want = std::atoi(v);
    if (want >= 2 && want % 2 == 0 && want <= grid) return want;
  }
  if (kCoGridAtShare32 > 0 && grid == 32) return kCoGridAtShare32;
  const int g = grid * 3 / 4 / 2 * 2;
  return g >= 2 && g < grid ? g : 0;
}

bool c1x1_requested() {
  const char* v = env::get("MKERNEL_FUSED_C1X1");
  return v != nullptr && std::strcmp(v, "1") == 0;
}

// One-CTA (cluster-free) grids: s8run2's probe placed 126 of 132 SMs for two 50 % clients' grids
// of 66 (66 + 60), where 2-CTA clusters reach 96 (48 + 48). So 126/132 of the share per rank
// (63 at W = 2; 30 at W = 4's 32 — four clients' 1-CTA grids were never probed: 120 of 132 is a
// guess on the safe side). MKERNEL_FUSED_C1X1_GRID=<n> (every rank the same, n in [1, grid])
// replaces the rule. No even rounding: no clusters to keep whole.
int co_resident_grid_c1(int grid) {
  if (mps_limit_percent() == 100) return 0;
  if (const char* v = env::get("MKERNEL_FUSED_C1X1_GRID")) {
    const int want = std::atoi(v);
    if (want >= 1 && want <= grid) return want;
  }
  const int g = grid * 126 / 132;
  return g >= 1 && g < grid ? g : 0;
}

bool gate_barrier_requested() {
  const char* v = env::get("MKERNEL_FUSED_GATE_MODE");
  return v != nullptr && std::strcmp(v, "barrier") == 0;
}

void launch(const char* op, int64_t group, const gemm::Problem& p, const FusedPlan& plan,
            const at::Tensor& like, const fused::FusedParams& hooks, const std::vector<int>& order,
            int64_t rank_rows, bool interleave, const std::vector<const void*>* peer_a,
            const AgCopyEngineCall* copy_engine) {
  const gemm::ConfigId config = plan.config;
  gemm::Launch l;
  l.stream = at::cuda::getCurrentCUDAStream();
  l.sm_count = fused_grid(op, group);
  if (plan.grid > 0 && plan.grid < l.sm_count) l.sm_count = plan.grid;
  l.splits = 1;
  l.swizzle = plan.swizzle;
  l.raster = plan.raster;
  TORCH_CHECK(fused::fused_supported(config), op, ": config ", gemm::config_name(config),
              " has no fused kernel");
  if (const char* why = gemm::can_implement(p, config, l)) {
    TORCH_CHECK(false, op, ": cannot run M=", p.m, " N=", p.n, " K=", p.k, ": ", why);
  }
  const gemm::TileCounts tc = gemm::tile_counts(config, p.m, p.n);
  const int* m_order = unit_order(tc, p.m, rank_rows, order, interleave, like);
  const char* reason = nullptr;
  const char* timeline_path = env::get("MKERNEL_FUSED_TIMELINE");
  fused::FusedParams h = hooks;
  const char* trigger = env::get("MKERNEL_FUSED_TRIGGER");  // measurement: early|late
  h.trigger_early = trigger != nullptr && std::strcmp(trigger, "early") == 0 ? 1 : 0;
  // The timeline's slot clear (a memset kernel) goes before the gate: between the gate and the
  // grid nothing else may run on this stream (s10run2: a memset there split 4 of 8 gated launches).
  uint64_t* timeline = nullptr;
  if (timeline_path != nullptr && !capturing()) timeline = timeline_begin(l.stream);
  h.timeline = timeline;
  if (copy_engine != nullptr) {
    // The copy-engine route (fused_copy_engine.h): the gate's barrier is the route's entry
    // barrier (no peer still reads the G slots and flags the copies write), after it resets this
    // rank's route flags; then the side streams' copies, forked after the gate.
    const cudaError_t gate =
        fused::launch_gate(h.group, h.op, l.stream, true, h.flag_base,
                           static_cast<uint32_t>(h.group.world) * static_cast<uint32_t>(h.chunks));
    TORCH_CHECK(gate == cudaSuccess, op,
                ": the fused launch gate failed to launch: ", cudaGetErrorString(gate));
    copy_engine_fork(op, *copy_engine, l.stream);
  } else if (gate_requested(
                 plan)) {  // fused_gate.cu: the peers' previous fused grids off the GPU first
    const cudaError_t gate =
        fused::launch_gate(h.group, h.op, l.stream, gate_barrier_requested());
    TORCH_CHECK(gate == cudaSuccess, op, ": the fused launch gate failed to launch: ",
                cudaGetErrorString(gate));
  }
  const cudaError_t err =
      peer_a != nullptr
          ? fused::run_fused_peer_a(p, config, l, m_order, h, peer_a->data(),
                                    static_cast<int>(peer_a->size()),
                                    static_cast<int>(rank_rows), &reason)
          : fused::run_fused(p, config, l, m_order, h, &reason);
  if (copy_engine != nullptr) copy_engine_join(op, l.stream);  // (also when the launch failed)
  TORCH_CHECK(err == cudaSuccess, op, ": the fused kernel failed to launch: ",
              cudaGetErrorString(err), reason ? std::string(" (") + reason + ")" : std::string());
  // fused_gpu_gate.cu (opt-in): nothing after this grid on the stream until the other emulated
  // nodes' ranks on this GPU have finished the same call (their grids have left the GPU).
  if (gpu_gate_requested(h)) {
    if (const fused::GpuGateView* gpu = gpu_gate(op, group, h.group)) {
      const cudaError_t gate = fused::gpu_gate_after(h.group, *gpu, h.op, l.stream);
      TORCH_CHECK(gate == cudaSuccess, op, ": the fused GPU gate failed to launch: ",
                  cudaGetErrorString(gate));
    }
  }
  if (timeline != nullptr) timeline_end(timeline_path, op, p, config, hooks, l.stream);
}

namespace {
// Reduce items (one warp each): slabs of ~8 KiB of a tile's partial (16 rows of a 256-wide
// tile, 32 of a 128-wide one); two-shot flags every reduced slab.
int slab_rows_of(const gemm::TileCounts& tc) {
  return fused::reduce_slab_rows(tc.block_m, tc.block_n);
}
}  // namespace

std::vector<gemm::ConfigId> candidate_configs(const char* op, int64_t group, int64_t m, int64_t n,
                                              int64_t k) {
  // MKERNEL_FUSED_CONFIG=<config name> (read per call; tests and measurements): that config
  // only, whatever the shape, if it has a fused kernel.
  if (const char* pin = env::get("MKERNEL_FUSED_CONFIG")) {
    for (int id = 0; id < static_cast<int>(gemm::ConfigId::kNumConfigs); ++id) {
      const auto c = static_cast<gemm::ConfigId>(id);
      if (fused::fused_supported(c) && std::strcmp(gemm::config_name(c), pin) == 0) return {c};
    }
  }
  gemm::ConfigId ids[fused::kMaxFusedConfigs];
  const int count = fused::fused_configs(static_cast<int>(m), static_cast<int>(n),
                                         static_cast<int>(k), fused_grid(op, group), ids);
  // MKERNEL_FUSED_C1X1=1 (opt-in, fused18; every rank the same: the config joins the call
  // signature): the cluster-free 128x256 kernel where the model picks the 2x1-cluster one, so
  // the fused grid can hold the ~126 SMs MPS places for 1-CTA grids instead of 96.
  if (c1x1_requested()) {
    for (int i = 0; i < count; ++i) {
      if (ids[i] == gemm::ConfigId::kCoop128x256Cluster2x1) {
        ids[i] = gemm::ConfigId::kCoop128x256Cluster1x1;
      }
    }
  }
  return std::vector<gemm::ConfigId>(ids, ids + count);
}

namespace {
// MKERNEL_FUSED_ORDER=<swizzle><m|n> (measurement; every rank the same), parsed; false if unset.
bool pinned_order(int* swizzle, int* raster) {
  const char* ord = env::get("MKERNEL_FUSED_ORDER");
  if (ord == nullptr) return false;
  const int s = std::atoi(ord);
  const char* axis = ord;
  while (*axis >= '0' && *axis <= '9') ++axis;
  if ((s != 1 && s != 2 && s != 4 && s != 8) || (*axis != 'm' && *axis != 'n')) return false;
  *swizzle = s;
  *raster = *axis == 'm' ? 1 : 2;
  return true;
}
}  // namespace

std::vector<FusedPlan> candidate_plans(const char* op, int64_t group, int64_t m, int64_t n,
                                       int64_t k, bool along_n_only, bool across_nodes) {
  std::vector<FusedPlan> plans;
  int swizzle = 0, raster = 0;
  const bool pinned = pinned_order(&swizzle, &raster);
  // Narrower orders at long K are measured only on request (MKERNEL_FUSED_ORDERS=1): no device
  // run has timed them against the default yet, and each adds calls to a shape's first call.
  const char* orders = env::get("MKERNEL_FUSED_ORDERS");
  const bool long_k =
      orders != nullptr && std::strcmp(orders, "1") == 0 && 4096 * k > 12 * (int64_t{1} << 20);
  for (const gemm::ConfigId c : candidate_configs(op, group, m, n, k)) {
    if (pinned) {
      plans.push_back({c, swizzle, raster});
      continue;
    }
    plans.push_back({c, 0, 0});
    if (long_k) {
      plans.push_back({c, 2, 2});
      if (!along_n_only) plans.push_back({c, 1, 1});
    }
  }
  // Under an MPS limit, each plan also on the co-resident grid: which grid wins depends on the
  // shape (s8run2: gemm_rs Llama fc2 6.33 ms at 48 vs 9.09 at 66; ag_gemm Llama fc1 9.23 at 48
  // vs 7.17 at 66), so choose_path measures both. A default candidate since s9run1 checked the
  // fused kernels' outputs on it at W = 2 and 4 (fused_smoke.py --grids share,co_resident);
  // MKERNEL_FUSED_GRIDS=share keeps the share's grid only (measurement / opt-out). Never with
  // MKERNEL_FUSED_SMS (a pinned grid).
  const int share = fused_grid(op, group);
  const int small = co_resident_grid(share);
  // A cluster-free config's co-resident grid follows the 1-CTA placement (co_resident_grid_c1).
  auto small_of = [&](gemm::ConfigId c) {
    return c == gemm::ConfigId::kCoop128x256Cluster1x1 ? co_resident_grid_c1(share) : small;
  };
  bool any_small = false;
  for (const FusedPlan& p : plans) any_small = any_small || small_of(p.config) > 0;
  const char* grids = env::get("MKERNEL_FUSED_GRIDS");
  const bool offer = grids == nullptr || std::strcmp(grids, "share") != 0;
  if (any_small && offer && env::get("MKERNEL_FUSED_SMS") == nullptr) {
    // Across (emulated) nodes on one GPU the co-resident grid only (xnode6): the share's grid
    // is every SM of the rank's MPS limit, and a rank's fused grid there can wait, with no SM
    // of its client free, for copies that need one — its own in-process GPU-direct copies
    // (MKERNEL_NET_GDR_COPIER=thread), or rows / tiles of another node's rank whose grid MPS
    // could not place beside it (s8run2: 96 of 132 SMs for two clients' clusters). s14run1:
    // both stalls that ended in "unspecified launch failure" (xn5_B, xn3_w2) ran the share's
    // grid first; MKERNEL_FUSED_SMS=16 (xn5_C) and the co-resident grid never stalled.
    // MKERNEL_FUSED_GRIDS=both keeps both grids there too (measurement: the old list).
    const bool both = grids != nullptr && std::strcmp(grids, "both") == 0;
    const bool co_only = across_nodes && !both;
    const size_t count = plans.size();
    for (size_t i = 0; i < count; ++i) {
      FusedPlan p = plans[i];
      p.grid = small_of(p.config);
      if (p.grid <= 0) continue;  // (no co-resident grid for this config: the share's only)
      if (co_only) {
        plans[i] = p;
      } else {
        plans.push_back(p);
      }
    }
  }
  return plans;
}

bool reduce_fits(const char* op, int64_t group, const at::Tensor& x, const at::Tensor& w,
                 const ReduceLayout& layout, const char** why) {
  const int64_t m = x.size(0), k = x.size(1), n = w.size(0);
  if (n == 0 || k == 0 || k % 8 != 0 || n % 8 != 0) {
    *why = "N and K must be positive multiples of 8 for the fused kernel";
    return false;
  }
  for (const gemm::ConfigId config : candidate_configs(op, group, m, n, k)) {
    const gemm::TileCounts tc =
        gemm::tile_counts(config, static_cast<int>(m), static_cast<int>(n));
    const int64_t tiles = static_cast<int64_t>(tc.tiles_m) * tc.tiles_n;
    const int slabs = tc.block_m / slab_rows_of(tc);
    // [kOpSlotBase, kOpSlotEnd): clear of the top area's call-tagged work counters (group_device.h).
    if (fused::reduce_flag_slots(tiles, slabs, layout.two_shot) > comm::kOpFlagRoom) {
      *why = "more output tiles than the group's flag slots";
      return false;
    }
  }
  // Across nodes: an arrival flag per (source rank, CTA) (fused_params.h kRsNetSlotBase).
  if (layout.nodes) {
    if (!MKERNEL_FUSED_RS_NODES) {
      *why = "this build's fused kernels do not carry gemm_rs across nodes (MKERNEL_FUSED_RS_NODES=0)";
      return false;
    }
    if (layout.two_shot || layout.rows_per_rank <= 0) {
      *why = "across nodes the fused kernel takes gemm_rs only";
      return false;
    }
    const int64_t world = layout.world > 0 ? layout.world : m / layout.rows_per_rank;
    if (world * fused_grid(op, group) > fused::kRsNetSlotEnd - fused::kRsNetSlotBase) {
      *why = "more ranks x CTAs than the inter-node arrival slots of gemm_rs";
      return false;
    }
  }
  return true;
}

namespace {
// MKERNEL_FUSED_RS_NODES_COALESCE=<n in [0, 64]> (xnode6, opt-in, not yet run on a GPU; every
// rank the same — it joins the call signature): gemm_rs across nodes sends up to n whole tiles of
// one CTA to one owner per FIFO command (fused_params.h net_coalesce); unset / 0: one command per
// (tile, owner). Anything else raises naming the variable.
int rs_nodes_coalesce(const char* op) {
  const char* v = env::get("MKERNEL_FUSED_RS_NODES_COALESCE");
  if (v == nullptr || *v == '\0') return 0;
  char* end = nullptr;
  const long n = std::strtol(v, &end, 10);
  TORCH_CHECK_VALUE(*end == '\0' && n >= 0 && n <= 64, op,
                    ": MKERNEL_FUSED_RS_NODES_COALESCE must be an integer in [0, 64], got '", v, "'");
  return static_cast<int>(n);
}
}  // namespace

bool reduce_call(const char* op, int64_t group, int32_t wait_op, comm::SymmetricGroup& sg,
                 const at::Tensor& x,
                 const at::Tensor& w, const ReduceLayout& layout, const at::Tensor& out,
                 const std::vector<int>& order, const FusedPlan& plan, const char** why) {
  if (!reduce_fits(op, group, x, w, layout, why)) return false;
  const gemm::ConfigId config = plan.config;
  const int64_t m = x.size(0), k = x.size(1), n = w.size(0);
  const gemm::TileCounts tc = gemm::tile_counts(config, static_cast<int>(m), static_cast<int>(n));
  const int64_t tiles = static_cast<int64_t>(tc.tiles_m) * tc.tiles_n;
  const int slab_rows = slab_rows_of(tc);
  const int slabs = tc.block_m / slab_rows;
  if (m == 0) return true;  // nothing to compute or reduce on any rank
  // The partial [M, N], then (two-shot) the reduced copy, 256-byte aligned.
  const uint64_t partial = (static_cast<uint64_t>(m * n) * x.element_size() + 255) / 256 * 256;
  sg.ensure(op, layout.two_shot ? 2 * partial : partial);
  // Across nodes: per owner a block of tile slots (block_m x block_n elements each) for the
  // tiles meeting its rows: in the send area once per owner, in each receive half per source.
  uint64_t net_block = 0;
  const int coalesce = layout.nodes ? rs_nodes_coalesce(op) : 0;
  if (layout.nodes) {
    const int64_t world = layout.world > 0 ? layout.world : m / layout.rows_per_rank;
    int64_t slots = 0;
    for (int64_t o = 0; o < world; ++o) {
      const int64_t first = o * layout.rows_per_rank / tc.block_m;
      const int64_t last = ((o + 1) * layout.rows_per_rank - 1) / tc.block_m;
      slots = std::max(slots, (last - first + 1) * tc.tiles_n);
    }
    if (coalesce > 0) {
      // By (CTA, unit): grid x ceil(units / (grid / cluster_m)) slots <= cluster_m x units +
      // grid, for any grid up to fused_grid (the kernel's own, <= plan.grid). The fused configs
      // are 2-CTA clusters along M (c2x1; units_m = ceil(tiles_m / 2)), one tile along N.
      const int64_t cluster_m = std::max<int64_t>(2, (tc.tiles_m + tc.units_m - 1) / tc.units_m);
      slots = cluster_m * tc.units_m * (tc.tiles_n + 1) + fused_grid(op, group);
    }
    net_block = (static_cast<uint64_t>(slots) * tc.block_m * tc.block_n * 2 + 255) / 256 * 256;
    sg.ensure_net(op, world * net_block, 2 * world * net_block);
  }
  const comm::GroupDevice& g = sg.device_view();
  TORCH_CHECK(!layout.nodes || (g.net.fifo != nullptr && g.net.recv_area != nullptr &&
                                g.net.arrival_slots >= fused::kRsNetSlotEnd &&
                                g.net.fifo_format == MK_FIFO_FORMAT_LL),
              op, ": across nodes the fused kernel needs the inter-node path's FIFO in the LL "
              "format (not MKERNEL_FIFO_LL=0), its receive area and ", fused::kRsNetSlotEnd,
              " arrival slots (has ", g.net.arrival_slots, ")");
  fused::FusedParams hp;
  hp.group = g;
  hp.mode = fused::kModeReduce;
  hp.op = wait_op;
  hp.signature = comm::call_signature(wait_op, {m, k, n, static_cast<int64_t>(x.scalar_type()),
                                                layout.two_shot ? 1 : 0,
                                                static_cast<int64_t>(config), plan.swizzle,
                                                plan.raster, plan.grid, coalesce});
  hp.flag_base = comm::FlagSlot::kOpSlotBase;
  hp.m = static_cast<int32_t>(m);
  hp.n = static_cast<int32_t>(n);
  hp.block_m = tc.block_m;
  hp.block_n = tc.block_n;
  hp.tiles_n = tc.tiles_n;
  hp.reduce_row0 = static_cast<int32_t>(layout.row0);
  hp.reduce_rows = static_cast<int32_t>(layout.rows);
  hp.out = out.data_ptr();
  hp.out_row0 = static_cast<int32_t>(layout.out_row0);
  hp.two_shot = layout.two_shot ? 1 : 0;
  hp.rows_per_rank = static_cast<int32_t>(layout.rows_per_rank);
  hp.reduced_offset = static_cast<int64_t>(partial);
  hp.reduced_flag_base = hp.flag_base + static_cast<uint32_t>(tiles);
  TORCH_CHECK(fused::reduce_flag_slots(tiles, slabs, layout.two_shot) <= comm::kOpFlagRoom, op,
              ": internal: config ", gemm::config_name(config), " needs more flag slots than the "
              "op range holds (reduce_fits checks every candidate config)");
  hp.slab_rows = slab_rows;
  hp.slabs = slabs;
  hp.side_mode = side_mode(fused::kSideStaged);
  // The per-warp register tail by measurement (device run 2: the staged tail took 88-156 us
  // where the register tail took 46-64 us at 4096x1024x8192); MKERNEL_FUSED_TAIL=staged for
  // measuring.
  hp.tail_mode = tail_mode(fused::kTailRegs);
  if (layout.nodes) {
    int remote = 0;
    for (int r = 0; r < g.world; ++r) remote += g.data[r] == nullptr ? 1 : 0;
    hp.net_remote = remote;
    hp.net_block = net_block;
    hp.side_mode = fused::kSideIdle;  // the side warps send; the consumers' tail reduces
    hp.tail_mode = fused::kTailRegs;  // the only tail with the inter-node sources
    hp.net_coalesce = coalesce;
  }
  hp.bf16 = x.scalar_type() == at::kBFloat16 ? 1 : 0;
  TORCH_CHECK(reinterpret_cast<uintptr_t>(out.data_ptr()) % 16 == 0, op,
              ": internal: the output is not 16-byte aligned");
  const gemm::Problem p = problem(op, x.data_ptr(), w, g.data[g.rank], m, n, k);
  launch(op, group, p, plan, x, hp, order, layout.rows_per_rank, layout.interleave);
  return true;
}

at::Tensor substrate_collective(const char* op, const char* name, const at::Tensor& x,
                                int64_t group, int64_t world_size) {
  // The typed handle is looked up once per collective (the dispatcher's findSchema takes its
  // lock and hashes the name: the unfused path runs at decode sizes, where every us shows).
  using Signature = at::Tensor(const at::Tensor&, int64_t, int64_t);
  static std::mutex mu;
  static std::map<std::string, c10::TypedOperatorHandle<Signature>> handles;
  std::optional<c10::TypedOperatorHandle<Signature>> handle;
  {
    std::lock_guard<std::mutex> lock(mu);
    auto it = handles.find(name);
    if (it != handles.end()) {
      handle = it->second;
    } else {
      const std::string full = std::string("mkernel::") + name;
      auto schema = c10::Dispatcher::singleton().findSchema({full.c_str(), ""});
      if (schema.has_value()) {
        handle = handles.emplace(name, schema->typed<Signature>()).first->second;
      }
    }
  }
  TORCH_CHECK_NOT_IMPLEMENTED(handle.has_value(), op, ": the substrate's mkernel.", name,
                              " is not registered (needed for the unfused path)");
  return handle->call(x, group, world_size);
}

namespace {

// Shapes whose measured verdict is the unfused path, keyed by group, shape key and the
// environment the candidate list depends on (unfused_key): known_unfused answers from it before
// an op sets up any fused launch.
std::mutex unfused_mu;
std::set<std::string> unfused_shapes;

// "<group>/<key>|<MKERNEL_FUSED_GRIDS>|<..._ORDERS>|<..._ORDER>|<..._CONFIG>|<..._SMS>|<..._GATE>
// |<..._CO_GRID>|<..._GATE_MODE>|<..._GATE_GPU>|<..._RS_NODES_COALESCE>|<..._C1X1>":
// these variables (read per call, measurement knobs) change candidate_plans' list or what a
// fused call costs (the gate), so a verdict taken under other values does not hold.
std::string unfused_key(int64_t group, const std::string& key) {
  std::string s = std::to_string(group) + "/" + key;
  for (const char* name : {"MKERNEL_FUSED_GRIDS", "MKERNEL_FUSED_ORDERS", "MKERNEL_FUSED_ORDER",
                           "MKERNEL_FUSED_CONFIG", "MKERNEL_FUSED_SMS", "MKERNEL_FUSED_GATE",
                           "MKERNEL_FUSED_CO_GRID", "MKERNEL_FUSED_GATE_MODE",
                           "MKERNEL_FUSED_GATE_GPU", "MKERNEL_FUSED_RS_NODES_COALESCE",
                           "MKERNEL_FUSED_C1X1"}) {
    const char* v = env::get(name);
    s += '|';
    s += v != nullptr ? v : "-";
  }
  return s;
}

}  // namespace

bool known_unfused(int64_t group, const std::string& key) {
  if (const char* pin = env::get("MKERNEL_FUSED")) {
    if (std::strcmp(pin, "off") == 0) return true;
    if (std::strcmp(pin, "force") == 0) return false;
  }
  const std::string k = unfused_key(group, key);
  std::lock_guard<std::mutex> lock(unfused_mu);
  return unfused_shapes.count(k) != 0;
}

namespace {

// Calls per timing sample for a path of `flops` (the same count on every rank: the paths are
// collective calls): about 40 GFLOP per sample, so a sample of a short call (tens to a few
// hundred us) spans enough calls that a launch gap or a timer tick does not decide it; 2 to 16
// calls. (s9run1: at 20 GFLOP an ag_gemm of 8.6 GFLOP took 2 calls per sample.) The screen
// rounds take half (fused17: they only tell candidates 10 % apart); the test rounds this count
// or more: fused_verdict::Measurement::test_calls lengthens them to ~50 ms of the fastest path
// (s54: 2-call samples of the Llama shapes left the unfused path's MPS interleaving noise in
// them). MKERNEL_FUSED_SAMPLE_CALLS=n (a measurement knob, session 53) fixes the test rounds'
// count (*fixed: true); benchmarks/fused_sample_length.py times the paths per sample length.
int calls_per_sample(double flops, bool* fixed) {
  *fixed = false;
  if (const char* v = env::get("MKERNEL_FUSED_SAMPLE_CALLS")) {
    char* end = nullptr;
    const long n = std::strtol(v, &end, 10);
    TORCH_CHECK(end != v && *end == '\0' && n >= 1 && n <= 64, "MKERNEL_FUSED_SAMPLE_CALLS=\"", v,
                "\": want an integer in [1, 64] (calls per timed sample)");
    *fixed = true;
    return static_cast<int>(n);
  }
  if (flops <= 0) return 2;
  const double want = 4e10 / flops;
  return want >= 16 ? 16 : want <= 2 ? 2 : static_cast<int>(want);
}

// A measurement knob holding a number in [lo, hi] (`what` says what it is), else `dflt`; a
// malformed value raises naming the variable.
double number_knob(const char* name, double dflt, double lo, double hi, const char* what) {
  const char* v = env::get(name);
  if (v == nullptr) return dflt;
  char* end = nullptr;
  const double x = std::strtod(v, &end);
  TORCH_CHECK(end != v && *end == '\0' && x >= lo && x <= hi, name, "=\"", v,
              "\": want a number in [", lo, ", ", hi, "] (", what, ")");
  return x;
}

// MKERNEL_FUSED_BUDGET_S / MKERNEL_FUSED_SAMPLE_MS (measurement, session 55; every rank the
// same): the first-call measurement's rounds budget and its test samples' span
// (fused_verdict::Settings budget_s, sample_ms), to weigh a longer measurement's verdicts now that
// the verdict cache pays it once per job configuration.
void measurement_knobs(fused_verdict::Settings* s) {
  s->budget_s = number_knob("MKERNEL_FUSED_BUDGET_S", s->budget_s, 0.1, 30.0,
                            "seconds of paired rounds after the warm-up");
  s->sample_ms = number_knob("MKERNEL_FUSED_SAMPLE_MS", s->sample_ms, 1.0, 1000.0,
                             "ms of the fastest path per test sample");
}

// MKERNEL_FUSED_ALIGN=1 (opt-in until a device run has checked it; every rank of the group must
// see the same value, as for MKERNEL_FUSED): choose_path aligns the ranks before each timed
// sample (align_ranks). Read when a shape is measured.
bool align_requested() {
  const char* v = env::get("MKERNEL_FUSED_ALIGN");
  return v != nullptr && std::strcmp(v, "1") == 0;
}

// A device-side barrier of the group on the current stream: the substrate's all_gather of 8
// floats per rank. Its kernel completes on a rank only after every same-node rank's kernel has
// started (entry barrier) and staged its 32 bytes, i.e. after every rank's stream has finished
// what it queued before; so the next launch on every rank starts within a few us of the others',
// with no host synchronization. (An all_gather, not a new kernel: the collective is the
// substrate's code that already runs between the fused calls in choose_path's unfused path.)
void align_ranks(const char* op, int64_t group, int64_t world_size, const at::Tensor& tiny) {
  substrate_collective(op, "all_gather", tiny, group, world_size);
}

// One round's exchange (fused17): this rank's ms per call of every path (NaN where the round did
// not time it) and its seconds since the measurement began go to every rank; back come the
// group's figures — per path the slowest rank's sample (the path's wall time on the group in
// this round), and the slowest rank's elapsed time. The same bytes on every rank, so every rank
// feeds fused_verdict::Measurement the same figures and reaches the same verdict.
std::vector<float> exchange_round(const char* op, int64_t group, const std::vector<float>& mine,
                                  double elapsed_s, double* group_elapsed_s) {
  std::vector<float> words(mine);
  words.push_back(static_cast<float>(elapsed_s));
  const std::string blob(reinterpret_cast<const char*>(words.data()), words.size() * sizeof(float));
  const std::vector<std::string> all =
      session_allgather_blobs(op, static_cast<mk_session_t>(group), blob, op_timeout_seconds(),
                              "a round of the fused / unfused timings");
  std::vector<float> worst(words.size(), NAN);
  for (const std::string& b : all) {
    TORCH_CHECK(b.size() == blob.size(), op, ": a rank sent a malformed timing record (",
                b.size(), " bytes, want ", blob.size(),
                "; are the knobs that shape the candidate list, e.g. MKERNEL_FUSED_AG_PEER_TMA, "
                "MKERNEL_FUSED_GRIDS, the same on every rank?)");
    std::vector<float> theirs(words.size());
    std::memcpy(theirs.data(), b.data(), b.size());
    for (size_t i = 0; i < words.size(); ++i) {
      if (theirs[i] > 0.f && !(worst[i] >= theirs[i])) worst[i] = theirs[i];
    }
  }
  *group_elapsed_s = worst.back() > 0.f ? worst.back() : elapsed_s;
  worst.pop_back();
  return worst;
}

float median_of(std::vector<float> v) { return fused_verdict::median_of(std::move(v)); }

}  // namespace

int32_t side_mode(int32_t fallback) {
  const char* v = env::get("MKERNEL_FUSED_SIDE");
  if (v == nullptr) return fallback;
  if (std::strcmp(v, "regs") == 0) return fused::kSideRegs;
  if (std::strcmp(v, "staged") == 0) return fused::kSideStaged;
  if (std::strcmp(v, "idle") == 0) return fused::kSideIdle;
  if (std::strcmp(v, "bulk") == 0) return fused::kSideBulk;
  if (std::strcmp(v, "pipe") == 0) return fused::kSidePipe;
  return fallback;
}

int32_t tail_mode(int32_t fallback) {
  const char* v = env::get("MKERNEL_FUSED_TAIL");
  if (v == nullptr) return fallback;
  if (std::strcmp(v, "regs") == 0) return fused::kTailRegs;
  if (std::strcmp(v, "staged") == 0) return fused::kTailStaged;
  return fallback;
}

std::string shape_key(const at::Tensor& x, const at::Tensor& w, int64_t world) {
  return "M=" + std::to_string(x.size(0)) + " N=" + std::to_string(w.size(0)) +
         " K=" + std::to_string(x.size(1)) + " " + std::string(c10::toString(x.scalar_type())) +
         " W=" + std::to_string(world);
}

bool fused_nodes_enabled(const char* op) {
  const char* v = env::get("MKERNEL_FUSED_NODES");
  bool on = false;
  if (v != nullptr && *v != '\0') {
    on = std::strcmp(v, "1") == 0;
  } else if (std::strcmp(op, "mkernel.ag_gemm") == 0) {
    on = kAgGemmNodesByDefault;
  } else if (std::strcmp(op, "mkernel.gemm_rs") == 0) {
    on = kGemmRsNodesByDefault;
  } else if (std::strcmp(op, "mkernel.gemm_ar") == 0) {
    on = kGemmArNodesByDefault;
  }
  // The in-process copier cannot carry a fused kernel's inter-node traffic: its copies are this
  // rank's own CUDA work, queued where the fused grid's waits for them hold the GPU, and they
  // never ran (session 20 call F, test_first_calls_across_nodes_gpu_direct[thread-rs1-1]: 0 of 64
  // copies done on one rank, 95 of 159 on the other, then the proxies' 15 s timeout; s14run1
  // xn5_B the same). The copier process (the default) is another client and runs beside it.
  if (on && comm::gdr_copies_in_process()) {
    note_fallback(op, "the GPU-direct emulation's copies run in this process (MKERNEL_NET_GDR_COPIER=thread), "
                      "behind the fused kernel's waits for them; the copier process (the default) carries them");
    return false;
  }
  return on;
}

namespace {
// MKERNEL_FUSED_VERBOSE=1 (measurement): choose_path's verdicts and captures on stderr.
bool verbose_requested() {
  const char* v = env::get("MKERNEL_FUSED_VERBOSE");
  return v != nullptr && std::strcmp(v, "1") == 0;
}

// MKERNEL_FUSED_BUCKET=0 (measurement): every M measured on its own; by default a shape reuses
// its M bucket's verdict (fused_verdict.h bucket_key). Every rank must see the same value.
bool bucket_requested() {
  const char* v = env::get("MKERNEL_FUSED_BUCKET");
  return v == nullptr || std::strcmp(v, "0") != 0;
}

// ag_gemm's route of a plan: " peer-TMA", " copy-engine" or " copy".
const char* route_name(const FusedPlan& p) {
  return p.peer_tma ? " peer-TMA" : p.copy_engine ? " copy-engine" : " copy";
}
// The same where only the other routes than the copy kernel are named ("" for it and for the
// reduce ops' fused kernel).
const char* route_tag(const FusedPlan& p) {
  return p.peer_tma ? " peer-TMA" : p.copy_engine ? " copy-engine" : "";
}

// "unfused", or paths[i]'s plan ("coop_128x256_c2x1 grid 48", ag_gemm's with " peer-TMA",
// " copy-engine" or " copy", gemm_rs's copy-engine route with " copy-engine" — a label apart
// from the fused plan it copies; "fused" without plans).
std::string path_name(const char* op, int i, int unfused, const std::vector<FusedPlan>* plans) {
  if (i == unfused) return "unfused";
  if (plans == nullptr || i >= static_cast<int>(plans->size())) return "fused";
  const FusedPlan& p = (*plans)[i];
  const bool ag = std::strcmp(op, "mkernel.ag_gemm") == 0;
  return std::string(gemm::config_name(p.config)) + " grid " + std::to_string(p.grid) +
         (ag ? route_name(p) : route_tag(p));
}

// path_name with the plan's tile order: what a bucket's or a stored verdict names a path by.
std::string path_label(const char* op, int i, int unfused, const std::vector<FusedPlan>* plans) {
  std::string label = path_name(op, i, unfused, plans);
  if (plans != nullptr && i != unfused && i < static_cast<int>(plans->size())) {
    const FusedPlan& p = (*plans)[i];
    label += " order " + std::to_string(p.swizzle) + "/" + std::to_string(p.raster);
  }
  return label;
}

// The extension binary's identity for the verdict cache's keys: the size and modification time
// of the shared object holding this code (a rebuilt or reinstalled extension measures again);
// "" where it cannot be read (then nothing is stored or reused).
const std::string& build_stamp() {
  static const std::string stamp = [] {
    Dl_info info{};
    struct stat st {};
    if (dladdr(reinterpret_cast<void*>(&note_fallback), &info) == 0 || info.dli_fname == nullptr ||
        ::stat(info.dli_fname, &st) != 0) {
      return std::string();
    }
    return "so" + std::to_string(st.st_size) + "." + std::to_string(st.st_mtime);
  }();
  return stamp;
}

// The verdict cache's key (fused_verdict_store.h) of a shape or its bucket (`shape`) with the
// candidates `paths_text`; "" where the group or the build is unknown (nothing stored).
std::string store_key(const char* op, int64_t group, const std::string& shape,
                      const std::string& paths_text) {
  if (build_stamp().empty()) return "";
  const int dev = c10::cuda::current_device();
  const comm::SymmetricGroup* sg = comm::SymmetricGroup::find(group, dev);
  if (sg == nullptr) return "";
  const int sms = at::cuda::getDeviceProperties(dev)->multiProcessorCount;
  return gemm_device_signature(dev, sms) + "|" + build_stamp() + "|" + op + "|" +
         sg->layout_text() + "|" + shape + " paths=" + paths_text;
}

// Across processes: the verdict this rank's cache file holds for `skey`, all-gathered; the
// index of its path in the candidate list where every rank found the same one, else -1 (the
// group measures). Every rank calls it at the same point (a collective), whatever it found.
int agreed_stored_verdict(const char* op, int64_t group, const std::string& skey,
                          const std::vector<std::string>& labels, fused_store::Verdict* verdict) {
  std::optional<fused_store::Verdict> mine;
  if (!skey.empty()) mine = fused_store::find(skey);
  const std::string blob = mine ? fused_store::encode(*mine) : std::string();
  const std::vector<std::string> all =
      session_allgather_blobs(op, static_cast<mk_session_t>(group), blob, op_timeout_seconds(),
                              "the ranks' stored fused verdicts");
  if (blob.empty()) return -1;
  for (const std::string& b : all) {
    if (b != blob) return -1;
  }
  for (size_t i = 0; i < labels.size(); ++i) {
    if (labels[i] == mine->path) {
      *verdict = *mine;
      return static_cast<int>(i);
    }
  }
  return -1;  // a path this build's list does not name (the key names the list: not expected)
}
}  // namespace

int choose_path(const char* op, int64_t group, const std::string& key,
                const std::vector<std::function<void()>>& paths, double flops,
                const std::vector<FusedPlan>* plans, int64_t world_size) {
  const int unfused = static_cast<int>(paths.size()) - 1;
  int candidates = unfused + 1;  // every path
  // The verdict is an index into `paths`: key it by the list's length too (the candidates
  // depend on the environment, e.g. MKERNEL_FUSED_GRIDS).
  std::string full = std::to_string(group) + "/" + key + " paths=" +
                     std::to_string(paths.size()) + " gate=" + gate_setting();
  bool forced = false;
  if (const char* pin = env::get("MKERNEL_FUSED")) {
    if (std::strcmp(pin, "off") == 0) return unfused;
    if (std::strcmp(pin, "force") == 0) {  // the fused configs only
      candidates = unfused;
      full += " (fused forced)";
      forced = true;
    }
  }
  if (candidates == 1) return 0;
  static std::mutex mu;
  static std::map<std::string, int> verdicts;
  // A bucket's verdict and the shape key that measured it.
  static std::map<std::string, std::pair<int, std::string>> bucket_verdicts;
  int cached = -1;
  {
    std::lock_guard<std::mutex> lock(mu);
    auto it = verdicts.find(full);
    if (it != verdicts.end()) cached = it->second;
  }
  // A shape not yet decided: another M of its bucket (fused_verdict.h bucket_key) with the same
  // candidate paths by name may have been (the key names every path, so an index means the same
  // plan). Built only here, off the cached calls' path.
  std::string bucket;
  std::vector<std::string> labels;  // every path by name (path_label), where undecided
  std::string paths_text;           // the labels, the gate and the pin: half of a verdict's key
  const bool by_bucket = bucket_requested();
  if (cached < 0) {
    for (int i = 0; i <= unfused; ++i) {
      labels.push_back(path_label(op, i, unfused, plans));
      paths_text += (i > 0 ? "; " : "") + labels.back();
    }
    paths_text += " gate=" + gate_setting();
    if (forced) paths_text += " (fused forced)";
  }
  // A verdict taken without measuring (its M bucket's, or an earlier process's, measured at
  // `at`): this shape's from now on, the same on every rank (every rank's maps, and an agreed
  // file entry, hold the same verdicts). An unfused one skips the fused set-up on later calls,
  // as a measured one does.
  auto adopt = [&](int path, const std::string& at, const char* source) {
    {
      std::lock_guard<std::mutex> lock(mu);
      verdicts[full] = path;
    }
    const bool runs_unfused = path == unfused && candidates == unfused + 1;
    if (runs_unfused) {
      std::lock_guard<std::mutex> lock(unfused_mu);
      unfused_shapes.insert(unfused_key(group, key));
    }
    if (!verbose_requested()) return;
    if (runs_unfused) {
      std::fprintf(stderr, "%s: runs unfused (%s) at %s (measured at %s)\n", op, source,
                   key.c_str(), at.c_str());
    } else {
      std::fprintf(stderr, "%s: runs fused %s at %s (%s, measured at %s)\n", op,
                   path_name(op, path, unfused, plans).c_str(), key.c_str(), source, at.c_str());
    }
  };
  if (cached < 0 && by_bucket) {
    bucket = std::to_string(group) + "/" + fused_verdict::bucket_key(key) + " paths=" + paths_text;
    std::pair<int, std::string> found{-1, ""};
    {
      std::lock_guard<std::mutex> lock(mu);
      auto b = bucket_verdicts.find(bucket);
      if (b != bucket_verdicts.end()) found = b->second;
    }
    if (found.first >= 0) {
      cached = found.first;
      adopt(cached, found.second, "its M bucket's verdict");
    }
  }
  // Across processes (fused_verdict_store.h): an earlier run's verdict for this shape's bucket
  // (or the shape, with MKERNEL_FUSED_BUCKET=0), used where every rank's file holds the same
  // one. Not inside a capture (the group's exchange is eager work; the capture runs paths[0]).
  const bool undecided_eager = cached < 0 && !capturing();
  const std::string skey =
      undecided_eager
          ? store_key(op, group, by_bucket ? fused_verdict::bucket_key(key) : key, paths_text)
          : std::string();
  const std::string skey_forced = skey.empty() || forced ? std::string() : skey + " (fused forced)";
  if (undecided_eager) {
    fused_store::Verdict stored;
    const int found = agreed_stored_verdict(op, group, skey, labels, &stored);
    if (found >= 0 && found < candidates) {
      cached = found;
      adopt(cached, stored.measured_at, "a stored verdict");
      if (!bucket.empty()) {
        std::lock_guard<std::mutex> lock(mu);
        bucket_verdicts.emplace(bucket, std::make_pair(cached, stored.measured_at));
      }
      if (cached == unfused && candidates == unfused + 1) {
        const std::string why = "a stored verdict (measured at " + stored.measured_at +
                                " by an earlier process; " + fused_store::file_path() +
                                ", MKERNEL_FUSED_VERDICT_CACHE=0 measures again) at " + key;
        note_fallback(op, why.c_str());
      }
    }
  }
  // Inside a capture the cached verdict runs as it would eagerly (the group's measured path, or
  // its M bucket's); an unmeasured bucket runs paths[0] (no timing can happen there: the model's
  // fused config). MKERNEL_FUSED_VERBOSE=1 says which at each capture (tests check the cached
  // one is used).
  if (cached >= 0 || capturing()) {
    const int path = cached >= 0 ? cached : 0;
    if (verbose_requested() && capturing()) {
      std::fprintf(stderr, "%s: graph capture at %s: %s, path %d (%s)\n", op, key.c_str(),
                   cached >= 0 ? "the cached verdict" : "no verdict cached (unmeasured)", path,
                   path_name(op, path, unfused, plans).c_str());
    }
    return path;
  }
  // Every rank measures the same calls in the same order (the ops' calls are collective).
  const bool aligned = world_size > 1 && align_requested();
  std::function<void()> align;
  at::Tensor tiny;
  if (aligned) {
    tiny = at::zeros({8}, at::TensorOptions().dtype(at::kFloat).device(
                              at::kCUDA, at::cuda::current_device()));
    align = [&] { align_ranks(op, group, world_size, tiny); };
  }
  const auto t_measure = std::chrono::steady_clock::now();
  const bool all_paths = candidates == unfused + 1;
  bool calls_fixed = false;
  const int calls = calls_per_sample(flops, &calls_fixed);  // the test rounds' floor
  const int screen_calls = std::max(1, calls / 2);
  // fused17 (fused_verdict.h): one warm-up call each (the engine's tuner and allocations run
  // there), then rounds until the group's Measurement is done: each round times every path still
  // active once — an untimed lead-in call (the ranks leave the previous path at different times,
  // by up to a GEMM's tail: the lead-in absorbs that skew), then `calls` calls (the screen
  // rounds: `screen_calls`) between CUDA events
  // — in an order rotating from round to round and reversed in odd rounds (whatever a path leaves
  // behind reaches every path alike), then the ranks exchange the round's samples; the figure of
  // a path in a round is its slowest rank's sample. The Measurement prunes, screens, plans the
  // rounds from the budget and stops once the paired sign tests are settled. The same calls in
  // the same order on every rank (the active set follows from the exchanged figures).
  const cudaStream_t stream = at::cuda::getCurrentCUDAStream();
  for (int i = 0; i < candidates; ++i) paths[i]();
  // The rounds' budget starts after the warm-up: its time is mostly the engine tuner's for the
  // unfused path's GEMM (s13run2: ~1.4 s at a Llama shape never seen before, ~0 at one already
  // tuned), which the unfused path costs anyway; the verbose line reports both.
  C10_CUDA_CHECK(cudaStreamSynchronize(stream));
  const auto t_rounds = std::chrono::steady_clock::now();
  const double warmup_s = std::chrono::duration<double>(t_rounds - t_measure).count();
  cudaEvent_t start = nullptr, end = nullptr;
  C10_CUDA_CHECK(cudaEventCreate(&start));
  C10_CUDA_CHECK(cudaEventCreate(&end));
  fused_verdict::Settings settings;
  measurement_knobs(&settings);
  if (calls_fixed) settings.sample_ms = 0.0;  // the knob's count, as given
  fused_verdict::Measurement meas(candidates, all_paths ? unfused : -1, settings);
  std::vector<std::vector<float>> own(candidates);  // this rank's samples (the verbose line)
  constexpr int kRoundCap = 64;  // the Measurement ends by 17 rounds; a guard, not a setting
  for (int r = 0; !meas.done(); ++r) {
    TORCH_CHECK(r < kRoundCap, op, ": internal: the first-call measurement at ", key,
                " did not settle within ", kRoundCap, " rounds");
    std::vector<int> active;
    for (int i = 0; i < candidates; ++i) {
      if (meas.active()[i]) active.push_back(i);
    }
    const int count = static_cast<int>(active.size());
    const int n_calls = meas.screening() ? screen_calls : meas.test_calls(calls);
    std::vector<float> mine(candidates, NAN);
    for (int j = 0; j < count; ++j) {
      const int i = active[r % 2 == 0 ? (j + r) % count : (count - 1 - j + r) % count];
      paths[i]();  // the lead-in call
      if (align) align();
      C10_CUDA_CHECK(cudaEventRecord(start, stream));
      for (int c = 0; c < n_calls; ++c) paths[i]();
      C10_CUDA_CHECK(cudaEventRecord(end, stream));
      C10_CUDA_CHECK(cudaEventSynchronize(end));
      float ms = 0.f;
      C10_CUDA_CHECK(cudaEventElapsedTime(&ms, start, end));
      mine[i] = ms / n_calls;
      own[i].push_back(mine[i]);
    }
    const double elapsed =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t_rounds).count();
    double group_elapsed = elapsed;
    const std::vector<float> figs = exchange_round(op, group, mine, elapsed, &group_elapsed);
    meas.add_round(figs, group_elapsed, calls);
  }
  C10_CUDA_CHECK(cudaEventDestroy(start));
  C10_CUDA_CHECK(cudaEventDestroy(end));
  const double measure_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t_measure).count();
  const fused_verdict::Result res = meas.result();
  constexpr float kMargin = fused_verdict::Settings().margin;
  const int fastest_fused = res.fastest_fused;
  const int best = res.path;
  // A path's figure for the lines below: the median over the rounds that timed it of its
  // slowest rank's sample.
  auto figure_us = [&](int i) { return meas.median_figure(i) * 1e3f; };
  const std::string test = fused_verdict::describe(res, kMargin);
  if (all_paths && best == unfused) {
    // Once per shape and process (note_fallback: once per message; the key is in it). The
    // figures are the medians over the rounds the test counted (those the line's test names).
    auto test_us = [&](int i) { return meas.median_figure(i, res.test_from) * 1e3f; };
    char figs[160];
    std::snprintf(figs, sizeof figs,
                  "fused %.1f us vs unfused %.1f us over the test's rounds, slowest rank per round",
                  test_us(fastest_fused), test_us(unfused));
    const std::string why = "measured not faster than the unfused path with confidence at " + key +
                            " (" + figs + (aligned ? ", aligned samples" : "") + "; " + test + ")";
    note_fallback(op, why.c_str());
    const std::string k = unfused_key(group, key);
    std::lock_guard<std::mutex> lock(unfused_mu);
    unfused_shapes.insert(k);
  }
  const bool verbose_on = verbose_requested();
  if (verbose_on) {
    // Every path's figure (the median of its slowest rank's samples; dropped paths over their
    // rounds), this rank's own median and rounds, the test, and what the measurement took:
    // whether one candidate (e.g. an ungated grid across emulated nodes) decides the verdict or
    // the first call's time (benchmarks/NOTES.md "xnode3", "fused17").
    char head[96];
    std::snprintf(head, sizeof head,
                  " in %.3f s (warm-up %.3f s, %d calls per sample, %d rounds):", measure_s,
                  warmup_s, meas.test_calls(calls), res.rounds);
    std::string line = std::string(op) + ": measured " + key + head;
    for (int i = 0; i < candidates; ++i) {
      char buf[200];
      const bool is_unfused = all_paths && i == unfused;
      const int timed = static_cast<int>(own[i].size());
      const char* kept = meas.active()[i] ? "" : ", dropped";
      if (is_unfused || plans == nullptr || i >= static_cast<int>(plans->size())) {
        std::snprintf(buf, sizeof buf, " %s %.1f us (own %.1f, %d rounds%s);",
                      is_unfused ? "unfused" : "path", figure_us(i), median_of(own[i]) * 1e3,
                      timed, kept);
      } else {
        const FusedPlan& p = (*plans)[i];
        std::snprintf(buf, sizeof buf, " %s%s grid %d%s %.1f us (own %.1f, %d rounds%s);",
                      gemm::config_name(p.config), route_tag(p), p.grid,
                      gate_requested(p) ? " gated" : "", figure_us(i), median_of(own[i]) * 1e3,
                      timed, kept);
      }
      line += buf;
    }
    line += " " + test;
    line += best == unfused && all_paths ? " -> unfused" : " -> fused path " + std::to_string(best);
    std::fprintf(stderr, "%s\n", line.c_str());
  }
  if ((best != unfused || !all_paths) && plans != nullptr &&
      best < static_cast<int>(plans->size()) && verbose_on) {
    const FusedPlan& p = (*plans)[best];
    std::fprintf(stderr, "%s: runs fused %s%s order %d/%d grid %d%s at %s (%.1f us", op,
                 gemm::config_name(p.config), route_tag(p), p.swizzle, p.raster, p.grid,
                 p.grid == 0 ? " (the share)" : "", key.c_str(), figure_us(best));
    if (all_paths) std::fprintf(stderr, " vs unfused %.1f us", figure_us(unfused));
    std::fprintf(stderr, ", slowest rank per round%s%s)\n", aligned ? ", aligned samples" : "",
                 gate_requested(p) ? ", launch gate" : "");
  }
  // For the next process (fused_verdict_store.h; every rank writes the same verdict), unless an
  // unfused verdict left a fused edge unconfirmed (fused_verdict::storable: the next process
  // measures again).
  const bool store = fused_verdict::storable(res, settings);
  if (!store && !skey.empty() && verbose_on) {
    std::fprintf(stderr,
                 "%s: verdict at %s not stored for the next process (fused median %.3f "
                 "of unfused, below %.2f, without the test's confidence)\n",
                 op, key.c_str(), res.vs_unfused.median, settings.store_below);
  }
  if (!skey.empty()) {
    if (store) fused_store::insert(skey, {labels[best], key});
    if (!skey_forced.empty() && all_paths)
      fused_store::insert(skey_forced, {labels[fastest_fused], key});
  }
  std::lock_guard<std::mutex> lock(mu);
  verdicts[full] = best;
  if (!bucket.empty()) bucket_verdicts.emplace(bucket, std::make_pair(best, key));
  // The same measurement answers MKERNEL_FUSED=force (benchmarks time both sides): the fused
  // route it kept, with no second measurement.
  if (all_paths) {
    verdicts.emplace(full + " (fused forced)", fastest_fused);
    if (!bucket.empty()) {
      bucket_verdicts.emplace(bucket + " (fused forced)", std::make_pair(fastest_fused, key));
    }
  }
  return best;
}

at::Tensor run_kept_path(const char* op, int64_t group, const std::string& key,
                         const std::vector<FusedPlan>& plans,
                         const std::function<at::Tensor(const FusedPlan&)>& fused,
                         const std::function<at::Tensor()>& unfused, double flops,
                         int64_t world_size) {
  std::vector<std::function<void()>> paths;
  for (const FusedPlan& c : plans) paths.emplace_back([&fused, c] { fused(c); });
  paths.emplace_back([&unfused] { unfused(); });
  const int path = choose_path(op, group, key, paths, flops, &plans, world_size);
  // The measurement's calls (if this one measured) wrote outputs nobody keeps: the kept path
  // runs once more, as every later call of the shape does.
  if (path + 1 == static_cast<int>(paths.size())) return unfused();
  return fused(plans[path]);
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
