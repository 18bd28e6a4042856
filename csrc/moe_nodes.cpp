// The MoE ops on CUDA for a group spanning several nodes (see moe_nodes.h).
#ifdef MKERNEL_WITH_CUDA

#include "moe_nodes.h"

#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/cuda/CUDAContext.h>
#include <ATen/cuda/CUDAEvent.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/library.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "comm/symmetric_group.h"
#include "env_knobs.h"
#include "comm/wait_record.h"
#include "kernels/comm/wait_diagnostic.h"
#include "kernels/moe/moe_ep_api.h"
#include "kernels/moe/moe_net_api.h"
#include "kernels/moe/moe_net_plan.h"
#include "kernels/moe/moe_partial_api.h"
#include "kernels/moe/moe_routing_api.h"
#include "moe_local.h"
#include "moe_net.h"

namespace mkernel {
namespace moe {
namespace {

constexpr int64_t kRankShift = int64_t{1} << 32;  // route = (rank << 32) | row

// mkernel.all_gather through the dispatcher (the substrate's CUDA kernel: peer memory inside a
// node, the FIFO path across nodes).
at::Tensor all_gather(const at::Tensor& x, int64_t group, int64_t world) {
  static auto op = c10::Dispatcher::singleton()
                       .findSchemaOrThrow("mkernel::all_gather", "")
                       .typed<at::Tensor(const at::Tensor&, int64_t, int64_t)>();
  return op.call(x.contiguous(), group, world);
}

// mkernel.reduce_scatter through the dispatcher: x [W*n, ...] summed over the ranks in fp32 and
// rank order; rank r keeps rows [r*n, (r+1)*n).
at::Tensor reduce_scatter(const at::Tensor& x, int64_t group, int64_t world) {
  static auto op = c10::Dispatcher::singleton()
                       .findSchemaOrThrow("mkernel::reduce_scatter", "")
                       .typed<at::Tensor(const at::Tensor&, int64_t, int64_t)>();
  return op.call(x.contiguous(), group, world);
}

// Integer tensors ride the all_gather as float32 bit patterns (it copies bytes).
at::Tensor all_gather_bits(const at::Tensor& t, int64_t group, int64_t world) {
  return all_gather(t.contiguous().view(at::kFloat), group, world).view(t.scalar_type());
}

// t [T, ...] -> [rows, ...]: rows past T filled with `fill` (every rank's shape the same).
at::Tensor pad_rows(const at::Tensor& t, int64_t rows, int64_t fill) {
  if (t.size(0) == rows) return t.contiguous();
  std::vector<int64_t> s(t.sizes().begin(), t.sizes().end());
  s[0] = rows;
  at::Tensor out = at::full(s, fill, t.options());
  out.narrow(0, 0, t.size(0)).copy_(t);
  return out;
}

// (owner rank, row) of route codes; `kept`: a route of a group with `world` ranks and `rows`
// layout rows.
struct Decoded {
  at::Tensor rank, row, kept;
};
Decoded decode(const at::Tensor& route, int64_t world, int64_t rows) {
  const at::Tensor flat = route.reshape({-1});
  Decoded d;
  d.rank = at::div(flat, kRankShift, "floor");
  d.row = flat - d.rank * kRankShift;
  d.kept = flat.ge(0).logical_and(d.rank.lt(world)).logical_and(d.row.lt(rows));
  return d;
}

}  // namespace

namespace {

// MKERNEL_MOE_DISPATCH_PIPELINE (read at every call; every rank must see the same value, except
// that "1" and "3" interoperate). Unset: "1" (session 21; it was "3" eagerly and "1" under CUDA-graph
// capture). Both apply where the MoE's own exchange runs (one rank per node) and from a group's
// second call (the first sizes the areas); elsewhere the sequence runs.
// "1" (moe10), the headed gather with each landed piece's rows gathered beside the link, on the
// caller's stream (moe_net.h: MKERNEL_MOE_HOOKS_ON_CALLER, MKERNEL_MOE_FINISH_AT_JOIN): eagerly
// 1.38-1.48 ms = 0.79-0.85x the link in session 21 against 1.58-1.65 for mode 3 as it was, replayed
// from a graph 1.27 ms (0.92x). "3" (moe14, the eager default of sessions 18-20): the same exchange,
// the other ranks' rows in one counted gather after the join. Modes 1 and 3 put the same bytes on
// the wire and write every row once from the same data, so they interoperate. "0", the sequence (the
// routing all_gathered first, the rows joined whole, then index_select over the static row bound).
// Retired after their measurements (session 20; the code is in git history, NOTES.md has the
// figures): "2" (the GEMM on this rank's own tokens first: 1.25x slower), "4" (stage / unstage /
// gather in one launch each: 1.3x mode 3), "5" (mode 3's exchange with a landed-rows launch).
int dispatch_mode(cudaStream_t /*stream*/) {
  const char* v = env::get("MKERNEL_MOE_DISPATCH_PIPELINE");
  if (v == nullptr || *v == '\0') return 1;
  const std::string m(v);
  TORCH_CHECK_VALUE(m == "0" || m == "1" || m == "3",
                    "MKERNEL_MOE_DISPATCH_PIPELINE must be \"0\", \"1\" or \"3\" (or unset; 2, 4 and 5 were "
                    "retired in session 20), got \"", m, "\"");
  return m[0] - '0';
}

// MKERNEL_MOE_LAYOUT (moe14; read at every call, every rank the same): "aten", the
// packed layout by ATen ops (~30 launches: sort, searchsorted, index ops; s17's phases put the
// host's issue of the dispatch at ~1.5 ms, ~0.8 ms of it this layout, on the critical path once
// the rows move early); "kernel" (opt-in), the routing kernels (moe_routing_api.h route() over
// every rank's choices) and one layout kernel (nodes_layout): the same route, counts,
// recv_counts and counted rows, bit for bit, in 4 launches — the default (unset) since session 17
// (moe14's rule 1: its tests at W=2 and W=4 over 2 nodes passed, rows equal, the counted dispatch
// 2.009 vs 2.667 ms). Used where the gather is counted
// (MKERNEL_MOE_DISPATCH_GATHER=counted, or modes 1 and 3) with capacity 0 and E <= the routing
// kernels' table; elsewhere (the default sequence's bound gather, capacity > 0) ATen.
bool layout_kernel_requested() {
  const char* v = env::get("MKERNEL_MOE_LAYOUT");
  if (v == nullptr || *v == '\0') return true;
  const std::string m(v);
  TORCH_CHECK_VALUE(m == "aten" || m == "kernel",
                    "MKERNEL_MOE_LAYOUT must be \"aten\" or \"kernel\" (or unset), got \"", m, "\"");
  return m == "kernel";
}

// MKERNEL_MOE_GATHER_SMS (moe14; read at every call): the headed dispatch's row gathers that run
// beside the link's copies (mode 1's per-piece hooks, modes 1 / 3's own-rows gather) launch at
// most 8 CTAs per this many SMs instead of per every SM (1056 CTAs on an H200): fewer SMs taken from the copies that carry
// the link (s17: a copy beside a full grid runs ~15x slower). Unset or 0: every SM.
int gather_sms(int sms) {
  const char* v = env::get("MKERNEL_MOE_GATHER_SMS");
  if (v == nullptr || *v == '\0') return sms;
  char* end = nullptr;
  const long n = std::strtol(v, &end, 10);
  TORCH_CHECK_VALUE(end != v && *end == '\0' && n >= 0, "MKERNEL_MOE_GATHER_SMS must be an integer >= 0, got \"",
                    v, "\"");
  return n == 0 ? sms : static_cast<int>(std::min<long>(n, sms));
}

// The layout of moe_routing_api.h nodes_layout: route() over every rank's choices, then the
// layout kernel. idx_all [W*Tm, k] int32 (-1: no expert). Fills r.route, r.counts,
// r.recv_counts; returns token_live [rows_out] int64 (the counted gather's rows: token or -1).
at::Tensor layout_by_kernel(const char* op, const at::Tensor& idx_all, int64_t T, int64_t Tm,
                            int64_t k, int64_t E, int64_t W, int64_t me, int64_t rows_out,
                            DispatchResult& r) {
  const at::Tensor idx = idx_all.contiguous();
  // pad_ids_weighted's words (int64: weight bits above the id): read as int32 pairs, and the
  // combine's words of every rank written beside the layout.
  const bool packed = idx.scalar_type() == at::kLong;
  const int64_t tokens = W * Tm, n = tokens * k, El = E / W;
  const int64_t scratch = moe_ep::routing_scratch_ints(tokens, static_cast<int>(E), static_cast<int>(W));
  const auto int_opts = idx.options().dtype(at::kInt);
  const auto long_opts = idx.options().dtype(at::kLong);
  at::Tensor buf = at::empty({2 * n + E + tokens * W + scratch}, int_opts);
  int32_t* b = buf.data_ptr<int32_t>();
  const cudaStream_t stream = at::cuda::getCurrentCUDAStream();
  moe_ep::RoutingArgs a;
  a.topk_idx = idx.data_ptr();
  a.idx_is_64 = false;
  a.idx_stride = packed ? 2 : 1;
  a.tokens = tokens;
  a.k = static_cast<int>(k);
  a.experts = static_cast<int>(E);
  a.world = static_cast<int>(W);
  a.expert = b;
  a.pos = b + n;
  a.cnt = b + 2 * n;
  a.slot = b + 2 * n + E;
  a.scratch = b + 2 * n + E + tokens * W;
  a.stream = stream;
  const char* reason = nullptr;
  cudaError_t err = moe_ep::route(a, &reason);
  if (err != cudaSuccess) {
    cudaGetLastError();
    TORCH_CHECK(false, op, ": the routing kernels failed to launch: ", cudaGetErrorString(err),
                reason ? std::string(" (") + reason + ")" : std::string());
  }
  r.route = at::empty({T, k}, long_opts);
  r.counts = at::empty({El}, int_opts);
  r.recv_counts = at::zeros({W, El}, int_opts);
  at::Tensor token = at::empty({rows_out}, long_opts);
  moe_ep::NodesLayoutArgs l;
  l.expert = a.expert;
  l.pos = a.pos;
  l.cnt = a.cnt;
  l.max_tokens = Tm;
  l.tokens = T;
  l.k = static_cast<int>(k);
  l.experts = static_cast<int>(E);
  l.world = static_cast<int>(W);
  l.me = static_cast<int>(me);
  l.rows_out = rows_out;
  l.route = r.route.data_ptr<int64_t>();
  l.token = token.data_ptr<int64_t>();
  l.counts = r.counts.data_ptr<int32_t>();
  l.recv_counts = r.recv_counts.data_ptr<int32_t>();
  if (packed) {
    r.peer_routes = at::empty({tokens, 3 * k}, int_opts);
    l.packed = static_cast<const int32_t*>(idx.data_ptr());
    l.words = reinterpret_cast<uint32_t*>(r.peer_routes.data_ptr<int32_t>());
  }
  l.stream = stream;
  reason = nullptr;
  err = moe_ep::nodes_layout(l, &reason);
  if (err != cudaSuccess) {
    cudaGetLastError();
    TORCH_CHECK(false, op, ": the layout kernel failed to launch: ", cudaGetErrorString(err),
                reason ? std::string(" (") + reason + ")" : std::string());
  }
  return token;
}

// MKERNEL_MOE_DISPATCH_GATHER (moe13; read at every call, every rank the same): unset or "bound",
// the sequential dispatch (mode 0) reads its rows with index_select over the static row bound
// (W * max_T * min(k, E_local) rows: 65536 at the seed's 8k over W=2, the counts cover ~32.9k, so
// ~2x the bytes read and written after the join, none of it beside the link); "counted" (opt-in),
// the row-gather kernel over the rows the counts cover only (the pipelined path's gather; rows past
// the counts stay unwritten: unspecified, as on one node and on the pipelined path).
bool gather_counted() {
  const char* v = env::get("MKERNEL_MOE_DISPATCH_GATHER");
  if (v == nullptr || *v == '\0') return false;
  const std::string m(v);
  TORCH_CHECK_VALUE(m == "bound" || m == "counted",
                    "MKERNEL_MOE_DISPATCH_GATHER must be \"bound\" or \"counted\" (or unset), got \"", m,
                    "\"");
  return m == "counted";
}

// MKERNEL_MOE_DISPATCH_ONLY=1 (measurement only, read at every call, every rank the same): the
// several-node dispatch returns once the received rows are in place, before the grouped GEMM, with
// `out` = the received rows ([rows_out, H] or [E_local, C, H], NOT the GEMM's output). The bench
// times it by CUDA events on the caller's stream: the dispatch alone, as DeepEP measures it (bytes
// over the link / dispatch time), instead of "op minus a GEMM timed in another call".
bool dispatch_only() {
  const char* v = env::get("MKERNEL_MOE_DISPATCH_ONLY");
  return v != nullptr && std::string(v) == "1";
}

// MKERNEL_MOE_HEADED_SYNC=1 (tests only, read at every call; every rank the same): the host
// waits for the whole device between the headed gather's two halves, the worst any host call
// there may do (a lazily loaded kernel's first launch may synchronize the context; moe12 found
// that both ranks then deadlocked at DONE when DONE was queued by the second half). Skipped
// under graph capture.
void headed_sync_for_test(const char* op, const at::cuda::CUDAStream& s) {
  const char* v = env::get("MKERNEL_MOE_HEADED_SYNC");
  if (v == nullptr || std::string(v) != "1") return;
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  if (cudaStreamIsCapturing(s.stream(), &capture) != cudaSuccess) {
    cudaGetLastError();
    return;
  }
  if (capture != cudaStreamCaptureStatusNone) return;
  const cudaError_t err = cudaDeviceSynchronize();
  if (err == cudaSuccess) return;
  cudaGetLastError();
  const std::string record = comm::last_wait_failure();
  TORCH_CHECK(false, op, ": MKERNEL_MOE_HEADED_SYNC: the device synchronization between the "
              "headed gather's halves failed: ", cudaGetErrorString(err), "; wait record: ",
              record.empty() ? std::string("none") : record);
}

// MKERNEL_MOE_PHASES=1 (measurement, read at every call): the dispatch records timing events at
// its phase boundaries on the caller's stream (not under graph capture); mkernel._moe_phases()
// returns the last call's as JSON, ms from the op's start on the GPU, plus the host's issue time.
struct Phases {
  struct Mark {
    std::string name;
    std::shared_ptr<at::cuda::CUDAEvent> event;
    double host_ms;  // when the host recorded it (< 0: recorded on a side stream, no host time)
  };
  bool on = false;
  std::vector<Mark> marks;
  std::chrono::steady_clock::time_point host0;
  double host_ms = 0.0;
  double host_now() const {
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - host0).count();
  }
  void mark(const char* name, const at::cuda::CUDAStream& s) {
    if (!on) return;
    auto ev = std::make_shared<at::cuda::CUDAEvent>(cudaEventDefault);
    ev->record(s);
    marks.push_back({name, std::move(ev), host_now()});
  }
  void mark_event(const char* name, const at::cuda::CUDAEvent* ev) {
    if (!on || ev == nullptr) return;
    // Borrowed: the caller keeps the event alive until mkernel._moe_phases reads it.
    marks.push_back({name,
                     std::shared_ptr<at::cuda::CUDAEvent>(std::shared_ptr<void>(),
                                                          const_cast<at::cuda::CUDAEvent*>(ev)),
                     -1.0});
  }
};
thread_local Phases last_phases;
thread_local std::shared_ptr<void> last_phases_keep;  // what borrowed events belong to

bool phases_requested(const at::cuda::CUDAStream& s) {
  const char* v = env::get("MKERNEL_MOE_PHASES");
  if (v == nullptr || std::string(v) != "1") return false;
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  if (cudaStreamIsCapturing(s.stream(), &capture) != cudaSuccess) {
    cudaGetLastError();
    return false;
  }
  return capture == cudaStreamCaptureStatusNone;
}

// {"<phase>": GPU ms from the start mark, "host_<phase>": host ms from the op's host start when
// the host recorded it (a GPU time close to its host time: the GPU waited for the host there),
// "host_ms": the op's host time up to the GEMM's launch}.
std::string phases_json() {
  Phases& ph = last_phases;
  if (ph.marks.empty()) return "{}";
  std::string out = "{";
  ph.marks.front().event->synchronize();
  for (size_t i = 1; i < ph.marks.size(); ++i) {
    ph.marks[i].event->synchronize();
    const float ms = ph.marks.front().event->elapsed_time(*ph.marks[i].event);
    out += "\"" + ph.marks[i].name + "\":" + std::to_string(ms) + ",";
    if (ph.marks[i].host_ms >= 0) {
      out += "\"host_" + ph.marks[i].name + "\":" + std::to_string(ph.marks[i].host_ms) + ",";
    }
  }
  out += "\"host_ms\":" + std::to_string(ph.host_ms) + "}";
  return out;
}

}  // namespace

namespace {
// dispatch_nodes' body, on the current stream (the caller's, or the op stream: OpStreamScope).
DispatchResult dispatch_nodes_here(const char* op, const at::Tensor& x, const at::Tensor& topk_idx,
                                   const at::Tensor& w1, int64_t group, int64_t world_size,
                                   int64_t num_experts, int64_t capacity, bool return_recv,
                                   int64_t max_tokens, const c10::optional<at::Tensor>& topk_weights) {
  const c10::cuda::CUDAGuard device_guard(x.device());
  const int64_t me = comm::SymmetricGroup::get(op, group, world_size, x.device()).rank();
  const int64_t T = x.size(0), H = x.size(1), k = topk_idx.size(1);
  const int64_t W = world_size, E = num_experts, El = E / W, Tm = max_tokens;
  const int64_t rows_out = capacity > 0 ? El * capacity : W * Tm * std::min(k, El);
  const int64_t n = W * Tm * k;  // every rank's choices, padded
  const auto long_opts = x.options().dtype(at::kLong);
  const auto int_opts = x.options().dtype(at::kInt);
  DispatchResult r;
  if (n == 0) {  // no token on any rank (every rank takes this branch: Tm is the group's)
    r.counts = at::zeros({El}, int_opts);
    r.recv_counts = at::zeros({W, El}, int_opts);
    r.route = at::empty({T, k}, long_opts);
    at::Tensor recv = at::zeros({rows_out, H}, x.options());
    if (capacity > 0) recv = recv.view({El, capacity, H});
    r.out = expert_gemm(recv, w1, r.counts, capacity);
    r.recv_x = return_recv ? recv : x.new_empty({0});
    return r;
  }
  const at::cuda::CUDAStream main = at::cuda::getCurrentCUDAStream();
  Phases ph;
  ph.on = phases_requested(main);
  ph.host0 = std::chrono::steady_clock::now();
  ph.mark("start", main);
  comm::SymmetricGroup& g = comm::SymmetricGroup::get(op, group, world_size, x.device());
  // The same answers on every rank: the environment and H are the group's, and the group's
  // inter-node path is opened collectively (the first call's all_gather below opens it, where
  // no earlier op did; exchange_by_copy_engine looks at its areas).
  const int mode = dispatch_mode(main.stream());
  const bool pipelined = mode >= 1 && H > 0;
  const bool net_open = g.device_view().net.send_area != nullptr;
  bool own_path = net_open && exchange_by_copy_engine(op, group, W, x.device());
  // Every rank's tokens and choices (out-of-range ids as -1, padding rows choose nothing).
  // MKERNEL_MOE_LAYOUT=kernel (moe14): padded and checked in one launch (pad_ids) instead of six
  // ATen ops, the same int32 values.
  const bool layout_kernel = layout_kernel_requested();
  // Session 22: with the routing weights, the head is pad_ids_weighted's [Tm, k] int64 words
  // (weight bits above the id) and the layout kernel also writes every rank's combine words
  // (r.peer_routes). Only where the layout kernel runs (the same answer on every rank).
  const bool carry_weights = topk_weights.has_value() && layout_kernel && capacity == 0 &&
                             topk_idx.is_contiguous() && E <= moe_ep::kMaxExperts &&
                             (topk_idx.scalar_type() == at::kLong || topk_idx.scalar_type() == at::kInt);
  at::Tensor idx_head;  // [Tm, k] int32, or int64 words with the weights
  if (carry_weights) {
    const at::Tensor& w = *topk_weights;
    idx_head = at::empty({Tm, k}, long_opts);
    const cudaError_t err = moe_ep::pad_ids_weighted(
        topk_idx.data_ptr(), topk_idx.scalar_type() == at::kLong, w.data_ptr<float>(), T, Tm,
        static_cast<int>(k), static_cast<int>(E), idx_head.data_ptr<int64_t>(), main.stream());
    TORCH_CHECK(err == cudaSuccess, op, ": the routing head kernel failed to launch: ",
                cudaGetErrorString(err));
  } else if (layout_kernel && topk_idx.is_contiguous() &&
      (topk_idx.scalar_type() == at::kLong || topk_idx.scalar_type() == at::kInt)) {
    idx_head = at::empty({Tm, k}, int_opts);
    const cudaError_t err = moe_ep::pad_ids(topk_idx.data_ptr(), topk_idx.scalar_type() == at::kLong,
                                            T, Tm, static_cast<int>(k), static_cast<int>(E),
                                            idx_head.data_ptr<int32_t>(), main.stream());
    TORCH_CHECK(err == cudaSuccess, op, ": the routing head kernel failed to launch: ",
                cudaGetErrorString(err));
  } else {
    const at::Tensor idx = topk_idx.to(at::kLong);
    const at::Tensor idx32 = at::where(idx.ge(0).logical_and(idx.lt(E)), idx, -1).to(at::kInt);
    idx_head = pad_rows(idx32, Tm, -1);
  }
  const at::Tensor x_pad = pad_rows(x, Tm, 0);
  at::Tensor idx_all, x_all;
  std::shared_ptr<HeadedGather> headed;
  if (own_path && pipelined) {
    // The routing travels ahead of the rows in the same exchange (no collective before the
    // rows move); the caller's stream has every rank's routing when this returns.
    headed = gather_headed_start(op, comm::kOpMoeDispatch, x_pad, idx_head, group, W, ph.on);
    idx_all = headed_head_out(*headed);  // [W*Tm, k]
    x_all = headed_out(*headed);         // [W*Tm, H], other ranks' blocks as their pieces land
  } else {
    idx_all = all_gather_bits(idx_head, group, W);  // [W*Tm, k]
    own_path = exchange_by_copy_engine(op, group, W, x.device());  // the path is open now
    if (own_path && pipelined) {
      // The group's first call: size the areas for the headed gather of the next calls too (a
      // later capture cannot grow them).
      // (The head's int64 size, with or without the weights: a later call may carry them.)
      const moe_net::HeadedLayout lay = moe_net::headed_layout(
          static_cast<uint64_t>(x_pad.numel()) * x_pad.element_size(),
          static_cast<uint64_t>(Tm * k) * sizeof(int64_t));
      g.ensure_net(op, lay.send_bytes(static_cast<int>(W)), lay.recv_bytes(static_cast<int>(W)));
    }
    // [W*Tm, H]: through the MoE's own exchange (moe_net.h: one rank per node; the layout's
    // ATen work below runs while it is in flight, joined before the rows are read) or the
    // substrate's all_gather.
    x_all = own_path ? exchange_nodes(op, comm::kOpMoeDispatch, x_pad, false, group, W,
                                      /*join=*/false)
                     : all_gather(x_pad, group, W);
  }
  ph.mark("routing", main);

  const bool counted = !pipelined && gather_counted();
  // moe14: the layout by the routing kernels + one layout kernel where the gather is counted
  // (MKERNEL_MOE_LAYOUT=kernel; the same bits as the ATen sequence below).
  const bool kernel_layout = layout_kernel && capacity == 0 &&
                             (counted || pipelined) && E <= moe_ep::kMaxExperts &&
                             W <= comm::kMaxRanks && n < (int64_t{1} << 31) &&
                             rows_out < (int64_t{1} << 31);
  at::Tensor token, token_kl;
  if (kernel_layout) {
    token_kl = layout_by_kernel(op, idx_all, T, Tm, k, E, W, me, rows_out, r);
  } else {
    // Choices in (source, token, choice) order, stably sorted by expert: expert g's rows in the
    // order moe_host.h lays them out, at sorted positions starts[g] .. starts[g+1] - 1.
    // (The weighted head's ids are the low words of its int64 words; no combine words here.)
    const at::Tensor ids =
        idx_all.scalar_type() == at::kLong ? idx_all.view(at::kInt).reshape({-1, 2}).select(1, 0) : idx_all;
    const at::Tensor flat = ids.reshape({-1}).to(at::kLong);
    const at::Tensor key = at::where(flat.ge(0), flat, E);  // no expert: sorts last
    auto sorted = at::sort(key, /*stable=*/true, /*dim=*/0, /*descending=*/false);
    const at::Tensor skey = std::get<0>(sorted);
    const at::Tensor perm = std::get<1>(sorted);
    const at::Tensor starts = at::searchsorted(skey, at::arange(E + 1, long_opts));
    const at::Tensor i = at::arange(n, long_opts);
    const at::Tensor pos = i - starts.index_select(0, skey);  // index among its expert's rows
    const at::Tensor owner = at::div(skey, El, "floor");
    const at::Tensor le = skey - owner * El;
    at::Tensor row, keep;
    if (capacity > 0) {  // the first C rows of each expert, at le * C
      row = le * capacity + pos;
      keep = skey.lt(E).logical_and(pos.lt(capacity));
    } else {  // packed: the owner's experts back to back, rows past the static bound dropped
      row = i - starts.index_select(0, (owner * El).clamp_max(E));
      keep = skey.lt(E).logical_and(row.lt(rows_out));
    }
    const at::Tensor code = at::where(keep, owner.clamp_max(W - 1) * kRankShift + row, -1);
    const at::Tensor route_all = at::empty({n}, long_opts).index_copy_(0, perm, code);
    r.route = route_all.view({W, Tm, k}).select(0, me).narrow(0, 0, T).contiguous();

    // This rank's experts: rows held, and from which source.
    const at::Tensor mine = starts.narrow(0, me * El + 1, El) - starts.narrow(0, me * El, El);
    if (capacity > 0) {
      r.counts = mine.clamp_max(capacity).to(at::kInt);
    } else {
      const at::Tensor base = starts.narrow(0, me * El, El) - starts.narrow(0, me * El, 1);
      r.counts = ((base + mine).clamp_max(rows_out) - base.clamp_max(rows_out)).to(at::kInt);
    }
    const at::Tensor src = at::div(perm, Tm * k, "floor");
    const at::Tensor bin = at::where(keep.logical_and(owner.eq(me)), src * El + le, W * El);
    r.recv_counts = at::zeros({W * El + 1}, long_opts)
                        .index_add_(0, bin, at::ones({n}, long_opts))
                        .narrow(0, 0, W * El)
                        .view({W, El})
                        .to(at::kInt);

    // The received rows: row q of the layout is sorted choice starts[first expert] + q (packed)
    // or starts[expert of q] + q % C (padded); rows past the counts are unspecified, as on one
    // node (the previous sequence copies some token's row there, the pipelined one nothing).
    at::Tensor sorted_pos;
    if (capacity > 0) {
      const at::Tensor q = at::arange(rows_out, long_opts);
      sorted_pos = starts.index_select(0, at::div(q, capacity, "floor") + me * El) +
                   q.remainder(capacity);
    } else {
      sorted_pos = starts.narrow(0, me * El, 1) + at::arange(rows_out, long_opts);
    }
    token = at::div(perm.index_select(0, sorted_pos.clamp_max(n - 1)), k, "floor");
  }  // the ATen layout
  if (!headed) ph.mark("layout", main);  // (the headed path marks it after its own-rows setup)
  at::Tensor recv;
  // Every exit after the layout: keep the phases (the borrowed sent / received events live in
  // `headed`), the output and the received rows.
  auto finish = [&](const at::Tensor& out) {
    if (ph.on) {
      ph.host_ms = ph.host_now();
      last_phases_keep = headed;
      last_phases = std::move(ph);
    }
    r.out = out;
    r.recv_x = return_recv ? recv : x.new_empty({0});
    return std::move(r);
  };
  if (!pipelined && !counted) {
    if (own_path) exchange_join();
    ph.mark("joined", main);
    recv = x_all.index_select(0, token);
  } else {
    // Only the rows the counts cover are gathered (the static bound holds W * min(k, E_local)
    // / k times the mean); the others stay unwritten (unspecified, as on one node): token -1.
    at::Tensor live, token_live;
    if (kernel_layout) {
      token_live = token_kl;  // rows past the counts already -1
    } else {
      const at::Tensor q = at::arange(rows_out, long_opts);
      live = capacity > 0
                 ? q.remainder(capacity).lt(r.counts.to(at::kLong).index_select(0, at::div(q, capacity, "floor")))
                 : q.lt(r.counts.sum().to(at::kLong));
      token_live = at::where(live, token, -1).contiguous();
    }
    const int64_t row_bytes = H * x.element_size();
    const int sms = at::cuda::getCurrentDeviceProperties()->multiProcessorCount;
    const int hook_sms = gather_sms(sms);  // mode 1's per-piece gathers (beside the link)
    auto gather_on = [&](const at::Tensor& from, int64_t row0, int64_t rows, cudaStream_t s,
                         int grid_sms) {
      const auto* base = static_cast<const uint8_t*>(from.data_ptr());
      const cudaError_t err = moe_net::launch_gather_rows(
          base, row0, rows, token_live.data_ptr<int64_t>(), rows_out, recv.data_ptr(), row_bytes,
          grid_sms, s);
      TORCH_CHECK(err == cudaSuccess, op, ": the row gather failed to launch: ",
                  cudaGetErrorString(err));
    };
    auto gather = [&](const at::Tensor& from, int64_t row0, int64_t rows, cudaStream_t s) {
      gather_on(from, row0, rows, s, sms);
    };
    if (counted) {  // mode 0 with MKERNEL_MOE_DISPATCH_GATHER=counted: the sequence, counted rows
      recv = at::empty({rows_out, H}, x.options());
      if (own_path) exchange_join();
      ph.mark("joined", main);
      gather(x_all, 0, W * Tm, main.stream());
    } else {
      recv = at::empty({rows_out, H}, x.options());
      if (headed) {
        // This rank's rows from x now (this stream); every other rank's as its pieces land (the
        // headed gather's hooks' stream, once this stream's layout is done and the receive stream
        // unstaged the piece: moe_net.h). Each row is written by one launch.
        at::cuda::CUDAEvent layout_done;
        layout_done.record(main);
        ph.mark("layout", main);
        // Disjoint rows from the hooks' stream's; beside the link, so capped like them.
        gather_on(x_pad, me * Tm, Tm, main.stream(), hook_sms);
        headed_sync_for_test(op, main);
        if (mode == 3) {
          // moe14: no row hooks beside the link; the other ranks' rows after the join.
          gather_headed_finish(*headed, layout_done, RowsLanded());
        } else {
          gather_headed_finish(*headed, layout_done,
                               [&](int p, int64_t r0, int64_t r1, cudaStream_t s) {
                                 const int64_t row0 = p * Tm + r0;
                                 gather_on(x_all.narrow(0, row0, r1 - r0), row0, r1 - r0, s,
                                           hook_sms);
                               });
        }
        ph.mark_event("sent", headed_sent_event(*headed));
        ph.mark_event("received", headed_received_event(*headed));
        exchange_join();  // token_live, recv, x_all: read on the receive stream until here
        ph.mark("joined", main);
        if (mode == 3) {
          for (int64_t p = 0; p < W; ++p) {
            if (p != me) gather(x_all.narrow(0, p * Tm, Tm), p * Tm, Tm, main.stream());
          }
        }
      } else {
        if (own_path) exchange_join();
        ph.mark("joined", main);
        gather(x_all, 0, W * Tm, main.stream());
      }
    }  // counted
  }
  ph.mark("gathered", main);
  if (capacity > 0) recv = recv.view({El, capacity, H});
  if (dispatch_only()) {  // measurement only (see dispatch_only): no GEMM, out = the rows
    return finish(recv);
  }
  const at::Tensor out = expert_gemm(recv, w1, r.counts, capacity);
  ph.mark("gemm", main);
  return finish(out);
}

}  // namespace

at::Tensor gather_nodes(const char* op, const at::Tensor& y, const at::Tensor& route,
                        int64_t group, int64_t world_size) {
  (void)op;
  const c10::cuda::CUDAGuard device_guard(y.device());
  const int64_t H = y.size(-1), Y = y.numel() / std::max<int64_t>(H, 1);
  const int64_t T = route.size(0), k = route.size(1);
  // Y is the same on every rank (the dispatch's static bound): all skip the collective alike.
  if (Y == 0) return at::zeros({T, k, H}, y.options());
  const at::Tensor all = all_gather(y.reshape({Y, H}), group, world_size);  // [W*Y, H]
  const Decoded d = decode(route, world_size, Y);
  const at::Tensor at_row = at::where(d.kept, d.rank * Y + d.row, 0);
  return all.index_select(0, at_row)
      .masked_fill_(d.kept.logical_not().unsqueeze(1), 0)
      .view({T, k, H});
}

namespace {
std::string nodes_combine_mode() {
  const char* v = env::get("MKERNEL_MOE_NODES_COMBINE");
  const std::string m = v == nullptr ? std::string() : std::string(v);
  TORCH_CHECK_VALUE(m.empty() || m == "reduce" || m == "reduce16" || m == "allgather",
                    "MKERNEL_MOE_NODES_COMBINE must be \"reduce\" (the default), \"reduce16\" or "
                    "\"allgather\", got \"", m, "\"");
  return m;
}
}  // namespace

bool combine_by_reduce_scatter() {
  // The default since s9run1 passed it at W=2 and W=4 over 2 nodes; "allgather" opts out.
  static const bool on = nodes_combine_mode() != "allgather";
  return on;
}

// Read at every call since moe14 (every rank the same), so that one bench run can time the
// fp32 and the narrow partials side by side; "allgather" (combine_by_reduce_scatter) stays
// process-static. Unset: narrow where the combine is pipelined (moe17, session 19: DeepEP's
// combine also carries each rank's partial in bf16 and sums them in fp32), fp32 elsewhere;
// "reduce": fp32 partials everywhere; "reduce16": narrow everywhere.
bool combine_partials_narrow(bool pipelined) {
  const std::string m = nodes_combine_mode();
  return m == "reduce16" || (m.empty() && pipelined);
}

namespace {
// MKERNEL_MOE_COMBINE_EARLY (moe14; read at every call, every rank the same; on unless "0" since
// session 17 — moe14's rule 3: tests at W=2 and W=4 over 2 and 4 nodes passed, the same bits,
// the combine 3.837 vs 3.988 ms): with the
// MoE's own exchange and the partial-sum kernel, the partials of the other ranks' tokens are
// computed first, the exchange starts right after them (no copy of this rank's own block: the
// sum reads it from the partials), and this rank's own partials are computed on the caller's
// stream while the others are on the link. The same values summed in the same order: the same
// bits as the default.
bool combine_early() {
  return env_flag("MKERNEL_MOE_COMBINE_EARLY", true);
}

// MKERNEL_MOE_COMBINE_PIPELINE (moe17; read at every call, every rank the same; unset or "1": on,
// "0": off): where the MoE's own exchange runs over GPU-memory areas, the partials of each piece
// are made straight into the send area and pushed piece by piece, and each piece's output rows
// are summed from the receive area as they land (moe_net.h reduce_nodes_pipelined).
bool combine_pipeline() {
  return env_flag("MKERNEL_MOE_COMBINE_PIPELINE", true);
}

// The partial-sum kernel unless MKERNEL_MOE_NODES_PARTIAL=aten (the ATen sequence it replaces).
bool partials_by_kernel() {
  static const bool on = [] {
    const char* v = env::get("MKERNEL_MOE_NODES_PARTIAL");
    return v == nullptr || std::string(v) != "aten";
  }();
  return on;
}

moe_ep::DType moe_dtype(at::ScalarType t) {
  return t == at::kBFloat16 ? moe_ep::DType::kBF16
         : t == at::kHalf   ? moe_ep::DType::kFP16
                            : moe_ep::DType::kFP32;
}
}  // namespace

namespace {
// combine_nodes' body, on the current stream (the caller's, or the op stream: OpStreamScope).
at::Tensor combine_nodes_here(const char* op, const at::Tensor& y, const at::Tensor& route,
                              const at::Tensor& topk_weights, int64_t group, int64_t world_size,
                              int64_t max_tokens, const c10::optional<at::Tensor>& peer_routes) {
  const c10::cuda::CUDAGuard device_guard(y.device());
  const int64_t me = comm::SymmetricGroup::get(op, group, world_size, y.device()).rank();
  const int64_t H = y.size(-1), Y = y.numel() / std::max<int64_t>(H, 1);
  const int64_t T = route.size(0), k = route.size(1), W = world_size, Tm = max_tokens;
  // Y and Tm are the group's (the dispatch's static bound, token_bound): every rank skips the
  // collectives alike.
  if (Y == 0 || Tm == 0) return at::zeros({T, H}, y.options());
  const at::cuda::CUDAStream main = at::cuda::getCurrentCUDAStream();
  Phases ph;  // MKERNEL_MOE_PHASES=1 (moe14): the combine's phases, as the dispatch's
  ph.on = phases_requested(main);
  ph.host0 = std::chrono::steady_clock::now();
  ph.mark("start", main);
  auto done = [&](const at::Tensor& out) {
    ph.mark("summed", main);
    if (ph.on) {
      ph.host_ms = ph.host_now();
      last_phases_keep.reset();
      last_phases = std::move(ph);
    }
    return out;
  };
  const bool by_kernel = partials_by_kernel() && k <= moe_partial::kMaxChoices;
  const bool own_exchange = exchange_by_copy_engine(op, group, W, y.device());
  const bool pipelined =
      by_kernel && own_exchange && combine_pipeline() && net_areas_on_device(op, group, W, y.device());
  const bool narrow = combine_partials_narrow(pipelined);
  const at::Tensor y2 = y.reshape({Y, H}).contiguous();
  if (pipelined) {
    // moe17: every rank's routes and weights packed by one launch and all-gathered (decoded by
    // the partials' kernel itself: no decode sequence), then every owner's partials made inside
    // the exchange's pieces and summed as they land.
    const int sms = at::cuda::getCurrentDeviceProperties()->multiProcessorCount;
    at::Tensor words_all;  // [W*Tm, 3k]
    if (peer_routes.has_value() && peer_routes->numel() > 0) {
      // Session 22: the dispatch carried every rank's routes and weights (no round trip here).
      const at::Tensor& pr = *peer_routes;
      TORCH_CHECK(pr.dim() == 2 && pr.size(0) == W * Tm && pr.size(1) == 3 * k &&
                      pr.scalar_type() == at::kInt && pr.is_contiguous() && pr.device() == y.device(),
                  op, ": peer_routes must be the dispatch's [world_size * max_tokens, 3k] = [", W * Tm,
                  ", ", 3 * k, "] int32 words on y's device, got ", pr.sizes(), " ", pr.scalar_type(),
                  " on ", pr.device());
      words_all = pr;
    } else {
      const at::Tensor r = route.contiguous();
      const at::Tensor wf = topk_weights.to(at::kFloat).contiguous();
      at::Tensor words = at::empty({Tm, 3 * k}, y.options().dtype(at::kFloat));
      TORCH_CHECK(r.scalar_type() == at::kLong && wf.sizes() == r.sizes() && T <= Tm, op,
                  ": routes [T, k] int64 and weights [T, k] with T <= ", Tm, " expected");
      cudaError_t err = moe_partial::launch_pack_routes(r.data_ptr<int64_t>(), wf.data_ptr<float>(), T, Tm,
                                                        static_cast<int>(k),
                                                        static_cast<uint32_t*>(words.data_ptr()), sms, main.stream());
      TORCH_CHECK(err == cudaSuccess, op, ": packing the routes failed to launch: ", cudaGetErrorString(err));
      words_all = all_gather(words, group, W);
    }
    ph.mark("routes", main);
    const at::ScalarType pt = narrow ? y.scalar_type() : at::kFloat;
    ph.mark("partial", main);  // (no partials yet: they are made piece by piece below)
    const auto* all_words = static_cast<const uint32_t*>(words_all.data_ptr());
    const at::Tensor out = reduce_nodes_pipelined(
        op, comm::kOpMoeCombine, group, W, y.device(), Tm, H, pt, T, y.scalar_type(),
        [&](int p, int64_t r0, int64_t r1, void* dst, cudaStream_t stream) {
          const int64_t s0 = static_cast<int64_t>(p) * Tm + r0;
          const cudaError_t e = moe_partial::launch_routed(
              y2.data_ptr(), moe_dtype(y.scalar_type()), all_words + s0 * 3 * k, static_cast<int>(me), Y, dst,
              moe_dtype(pt), r1 - r0, static_cast<int>(k), H, sms, stream);
          TORCH_CHECK(e == cudaSuccess, op, ": the partial-sum kernel failed to launch: ", cudaGetErrorString(e));
        });
    ph.mark("joined", main);
    return done(out);
  }
  // Every rank's routes and weights (small: [W*Tm, k]); padding tokens route nowhere.
  const at::Tensor w = topk_weights.to(at::kFloat).masked_fill(route.lt(0), 0.0);
  // One all_gather for both (a collective's latency, not its bytes, is their cost): the routes'
  // int64 bits and the weights side by side as fp32 words, [Tm, 2k + k].
  const at::Tensor both = all_gather(
      at::cat({pad_rows(route, Tm, -1).view(at::kFloat), pad_rows(w, Tm, 0)}, 1), group, W);
  const at::Tensor route_all = both.narrow(1, 0, 2 * k).contiguous().view(at::kLong);  // [W*Tm, k]
  const at::Tensor w_all = both.narrow(1, 2 * k, k).contiguous();                      // [W*Tm, k]
  ph.mark("routes", main);
  const Decoded d = decode(route_all, W, Y);
  const at::Tensor here = d.kept.logical_and(d.rank.eq(me)).view({W * Tm, k});
  const at::Tensor row = at::where(here, d.row.view({W * Tm, k}), 0);
  // partial[s*Tm + t] = sum over token t of rank s's choices held here, in choice order (fp32);
  // with narrow partials (MKERNEL_MOE_NODES_COMBINE=reduce16) they travel in y's dtype (half the
  // bytes; each owner's partial rounded once more before the fp32 sum over owners).
  const bool early = by_kernel && own_exchange && combine_early();
  at::Tensor sent, held, wk;
  // Partials of token slots [r0, r0 + rows) (rows are independent: any split, the same bits).
  auto partial_rows = [&](int64_t r0, int64_t rows) {
    if (rows <= 0) return;
    const cudaError_t err = moe_partial::launch(
        y2.data_ptr(), moe_dtype(y.scalar_type()), held.data_ptr<int64_t>() + r0 * k,
        wk.data_ptr<float>() + r0 * k,
        static_cast<uint8_t*>(sent.data_ptr()) + r0 * H * static_cast<int64_t>(sent.element_size()),
        moe_dtype(sent.scalar_type()), rows, static_cast<int>(k), H,
        at::cuda::getCurrentDeviceProperties()->multiProcessorCount, main.stream());
    TORCH_CHECK(err == cudaSuccess, op, ": the partial-sum kernel failed to launch: ",
                cudaGetErrorString(err));
  };
  if (by_kernel) {
    // One kernel (moe_partial.cu): reads only the held rows, the same bits as the loop below.
    held = at::where(here, d.row.view({W * Tm, k}), -1).contiguous();
    wk = w_all.contiguous();
    sent = at::empty({W * Tm, H}, y.options().dtype(narrow ? y.scalar_type() : at::kFloat));
    if (early) {  // the other ranks' token slots first (this rank's: beside the link, below)
      partial_rows(0, me * Tm);
      partial_rows((me + 1) * Tm, (W - me - 1) * Tm);
    } else {
      partial_rows(0, W * Tm);
    }
  } else {  // MKERNEL_MOE_NODES_PARTIAL=aten: the ATen sequence
    at::Tensor partial = at::zeros({W * Tm, H}, y.options().dtype(at::kFloat));
    for (int64_t j = 0; j < k; ++j) {
      const at::Tensor mask = here.select(1, j).unsqueeze(1);
      // Rows not held here read row 0 and are zeroed (a row past the counts may hold anything).
      const at::Tensor g = y2.index_select(0, row.select(1, j)).to(at::kFloat).masked_fill_(
          mask.logical_not(), 0.0);
      partial.add_(g * w_all.select(1, j).unsqueeze(1));
    }
    sent = narrow ? partial.to(y.scalar_type()) : partial;
  }
  ph.mark("partial", main);
  if (own_exchange) {
    // The MoE's own exchange: every owner's partial of this rank's tokens, summed here in fp32
    // and rank order (the reduce_scatter's order), rounded once.
    if (early) {
      const at::Tensor got = exchange_nodes(op, comm::kOpMoeCombine, sent, true, group, W,
                                            /*join=*/false, /*copy_own=*/false);
      partial_rows(me * Tm, Tm);  // rows the send stream does not read
      ph.mark("own_partial", main);
      exchange_join();
      ph.mark("joined", main);
      auto block = [&](int64_t s) {
        return s == me ? sent.narrow(0, me * Tm, Tm) : got.narrow(0, s * Tm, Tm);
      };
      at::Tensor sum = block(0).to(at::kFloat, /*non_blocking=*/false, /*copy=*/true);
      for (int64_t s = 1; s < W; ++s) sum.add_(block(s));
      return done(sum.narrow(0, 0, T).to(y.scalar_type()));
    }
    const at::Tensor got = exchange_nodes(op, comm::kOpMoeCombine, sent, true, group, W);
    ph.mark("joined", main);
    at::Tensor sum = got.narrow(0, 0, Tm).to(at::kFloat, /*non_blocking=*/false, /*copy=*/true);
    for (int64_t s = 1; s < W; ++s) sum.add_(got.narrow(0, s * Tm, Tm));
    return done(sum.narrow(0, 0, T).to(y.scalar_type()));
  }
  return done(reduce_scatter(sent, group, W).narrow(0, 0, T).to(y.scalar_type()));
}

}  // namespace

namespace {

// MKERNEL_MOE_OP_STREAM (moe15; read at every call, every rank the same): unset or "1" runs the
// dispatch and the combine across nodes on a stream of mkernel's own for the device, forked from
// the caller's stream and joined back before the op returns; "0" runs them on the caller's stream.
// Session 18 call F (moe_ranks_nvidia_h200_20261204-061820 / -061829.json): the caller's work on a
// stream of its own instead of the legacy default stream ran the eager dispatch in 1.623 vs 1.806
// ms: how the op's streams meet the caller's in the hardware queues costs 10-15 % (NOTES "Session
// 18, moe15"). Session 19 call A (-080023.json): with the op stream the default-stream dispatch
// ran 1.655 ms vs 1.869 (0.885x), and the 12 default-path MoE tests across nodes passed with it.
bool op_stream_requested() {
  return env_flag("MKERNEL_MOE_OP_STREAM", true);
}

// mkernel's op stream of a device: non-blocking, created at the first use and kept for the
// process, as torch keeps its pool streams (destroying one at exit would race the runtime's own
// teardown).
at::cuda::CUDAStream op_stream(c10::DeviceIndex device) {
  static std::mutex mu;
  static std::array<cudaStream_t, 256> streams{};
  TORCH_CHECK(device >= 0 && device < static_cast<int>(streams.size()),
              "mkernel: the MoE op stream: device index ", static_cast<int>(device),
              " out of range");
  const std::lock_guard<std::mutex> lock(mu);
  if (streams[device] == nullptr) {
    const c10::cuda::CUDAGuard on(device);
    const cudaError_t err = cudaStreamCreateWithFlags(&streams[device], cudaStreamNonBlocking);
    TORCH_CHECK(err == cudaSuccess, "mkernel: the MoE op stream of device ",
                static_cast<int>(device),
                ": cudaStreamCreateWithFlags failed: ", cudaGetErrorString(err));
  }
  return at::cuda::getStreamFromExternal(streams[device], device);
}

// For its scope the op stream is the current stream, forked from the caller's; at its end the
// caller's stream waits for everything the op queued there (also when the body throws). The
// outputs handed to the caller are recorded on the caller's stream (keep), so that the caching
// allocator does not hand their memory to the op stream while the caller still reads them.
class OpStreamScope {
 public:
  explicit OpStreamScope(c10::DeviceIndex device)
      : caller_(at::cuda::getCurrentCUDAStream(device)), ops_(op_stream(device)), on_ops_(ops_) {
    at::cuda::CUDAEvent fork;
    fork.record(caller_);
    fork.block(ops_);
  }
  OpStreamScope(const OpStreamScope&) = delete;
  OpStreamScope& operator=(const OpStreamScope&) = delete;
  ~OpStreamScope() {
    try {
      at::cuda::CUDAEvent joined;
      joined.record(ops_);
      joined.block(caller_);
    } catch (...) {  // a destructor does not throw; the op's own error is already on its way
    }
  }
  void keep(const at::Tensor& t) const {
    if (t.defined() && t.is_cuda()) t.record_stream(caller_.unwrap());
  }

 private:
  at::cuda::CUDAStream caller_, ops_;
  c10::cuda::CUDAStreamGuard on_ops_;
};

}  // namespace

DispatchResult dispatch_nodes(const char* op, const at::Tensor& x, const at::Tensor& topk_idx,
                              const at::Tensor& w1, int64_t group, int64_t world_size,
                              int64_t num_experts, int64_t capacity, bool return_recv,
                              int64_t max_tokens, const c10::optional<at::Tensor>& topk_weights) {
  if (!op_stream_requested()) {
    return dispatch_nodes_here(op, x, topk_idx, w1, group, world_size, num_experts, capacity,
                               return_recv, max_tokens, topk_weights);
  }
  const OpStreamScope scope(x.device().index());
  DispatchResult r = dispatch_nodes_here(op, x, topk_idx, w1, group, world_size, num_experts,
                                         capacity, return_recv, max_tokens, topk_weights);
  for (const at::Tensor* t : {&r.out, &r.counts, &r.route, &r.recv_counts, &r.recv_x, &r.peer_routes})
    scope.keep(*t);
  return r;
}

at::Tensor combine_nodes(const char* op, const at::Tensor& y, const at::Tensor& route,
                         const at::Tensor& topk_weights, int64_t group, int64_t world_size,
                         int64_t max_tokens, const c10::optional<at::Tensor>& peer_routes) {
  if (!op_stream_requested()) {
    return combine_nodes_here(op, y, route, topk_weights, group, world_size, max_tokens, peer_routes);
  }
  const OpStreamScope scope(y.device().index());
  at::Tensor out =
      combine_nodes_here(op, y, route, topk_weights, group, world_size, max_tokens, peer_routes);
  scope.keep(out);
  return out;
}

at::Tensor scatter_nodes(const char* op, const at::Tensor& rows, const at::Tensor& route,
                         int64_t group, int64_t world_size, int64_t e_local, int64_t capacity,
                         int64_t out_rows, int64_t max_tokens) {
  const c10::cuda::CUDAGuard device_guard(rows.device());
  const int64_t me = comm::SymmetricGroup::get(op, group, world_size, rows.device()).rank();
  const int64_t k = route.size(1), H = rows.size(2), Tm = max_tokens;
  const int64_t R = capacity > 0 ? e_local * capacity : out_rows;
  at::Tensor out;
  if (R == 0 || Tm == 0) {  // the same on every rank: all skip the collectives alike
    out = at::zeros({R, H}, rows.options());
  } else {
    const at::Tensor rows_all = all_gather(pad_rows(rows, Tm, 0), group, world_size);
    const at::Tensor route_all = all_gather_bits(pad_rows(route, Tm, -1), group, world_size);
    const int64_t n = world_size * Tm * k;
    const Decoded d = decode(route_all, world_size, R);
    // Which choice lands in each of this rank's rows (n: none). Each kept row has exactly one;
    // amin keeps it deterministic.
    const auto long_opts = route.options().dtype(at::kLong);
    const at::Tensor dest = at::where(d.kept.logical_and(d.rank.eq(me)), d.row, R);
    const at::Tensor from = at::full({R + 1}, n, long_opts)
                                .scatter_reduce_(0, dest, at::arange(n, long_opts), "amin")
                                .narrow(0, 0, R);
    out = rows_all.reshape({n, H})
              .index_select(0, from.clamp_max(n - 1))
              .masked_fill_(from.eq(n).unsqueeze(1), 0);
  }
  return capacity > 0 ? out.view({e_local, capacity, H}) : out;
}

// mkernel._moe_phases (measurement): the last MKERNEL_MOE_PHASES=1 dispatch's phase times on
// this thread (waits for its events), "{}" if none.
TORCH_LIBRARY_FRAGMENT(mkernel, m) {
  m.def("_moe_phases() -> str", [] { return phases_json(); });
}

}  // namespace moe
}  // namespace mkernel

#endif  // MKERNEL_WITH_CUDA
