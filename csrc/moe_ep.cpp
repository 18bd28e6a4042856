// The MoE ops on CUDA at world size > 1 on one node (see moe_ep.h).
#ifdef MKERNEL_WITH_CUDA

#include "moe_ep.h"

#include <ATen/cuda/CUDAContext.h>
#include <ATen/cuda/CUDAEvent.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/library.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "comm/symmetric_group.h"
#include "env_knobs.h"
#include "fused_common.h"
#include "gemm_engine.h"
#include "kernels/moe/moe_ep_api.h"
#include "kernels/moe/moe_fused_api.h"
#include "kernels/moe/moe_routing_api.h"
#include "moe_local.h"
#include "session_layout.h"

namespace mkernel {
namespace moe {
namespace {

// Max T over the ranks: a host all-gather of one integer through the Go session (T is a
// shape; no device data is read). Collective: every rank calls it in the same op order.
int64_t max_tokens(const char* op, int64_t group, int64_t tokens) {
  std::string blob(sizeof(int64_t), '\0');
  std::memcpy(blob.data(), &tokens, sizeof tokens);
  const std::vector<std::string> all = session_allgather_blobs(
      op, static_cast<mk_session_t>(group), blob, op_timeout_seconds(), "the ranks' token counts");
  int64_t m = 0;
  for (const std::string& b : all) {
    TORCH_CHECK(b.size() == sizeof(int64_t), op, ": a rank sent a malformed token count");
    int64_t t = 0;
    std::memcpy(&t, b.data(), sizeof t);
    m = std::max(m, t);
  }
  return m;
}

}  // namespace

int64_t token_bound(const char* op, int64_t group, int64_t tokens) {
  const int64_t reserved = reserved_tokens(group);
  TORCH_CHECK_VALUE(reserved == 0 || tokens <= reserved, op, ": this rank has ", tokens,
                    " tokens, more than the ", reserved,
                    " the group reserved (mkernel.moe.reserve_tokens)");
  return reserved > 0 ? reserved : max_tokens(op, group, tokens);
}

namespace {

void check_launch(const char* op, cudaError_t err, const char* reason,
                  const comm::SymmetricGroup& g) {
  if (err == cudaSuccess) return;
  cudaGetLastError();
  const std::string wait = g.diagnostic();
  TORCH_CHECK(false, op, ": launch failed: ", cudaGetErrorString(err),
              reason ? std::string(" (") + reason + ")" : std::string(),
              wait.empty() ? std::string() : "; " + wait);
}

// The routing of this rank's choices, on the device: expert id per choice (-1 out of range),
// its index among this rank's choices of the same expert in (token, choice) order, choices
// per expert, and each token's slot at every rank it goes to (-1: not sent there).
struct Routing {
  at::Tensor expert, pos, cnt, slot;
};

Routing route_on_device(const at::Tensor& topk_idx, int64_t experts, int64_t world) {
  const int64_t T = topk_idx.size(0), k = topk_idx.size(1), n = T * k, E = experts;
  const int64_t El = E / world;
  const auto long_opts = topk_idx.options().dtype(at::kLong);
  at::Tensor flat = topk_idx.reshape({-1}).to(at::kLong);
  at::Tensor valid = flat.ge(0).logical_and(flat.lt(E));
  at::Tensor key = at::where(valid, flat, E);  // out-of-range ids sort last
  auto sorted = at::sort(key, /*stable=*/true, /*dim=*/0, /*descending=*/false);
  at::Tensor skey = std::get<0>(sorted), perm = std::get<1>(sorted);
  at::Tensor starts = at::searchsorted(skey, at::arange(E + 1, long_opts));
  Routing r;
  r.cnt = (starts.narrow(0, 1, E) - starts.narrow(0, 0, E)).to(at::kInt);
  at::Tensor pos_sorted = at::arange(n, long_opts) - starts.index_select(0, skey);
  r.pos = at::empty({n}, topk_idx.options().dtype(at::kInt));
  r.pos.index_put_({perm}, pos_sorted.to(at::kInt));
  r.expert = at::where(valid, flat, -1).to(at::kInt);
  // in_rank[t, d]: token t has a choice at rank d (column `world`: out-of-range choices).
  at::Tensor dest = at::where(valid, at::div(flat, El, "floor"), world).view({T, k});
  at::Tensor in_rank = at::zeros({T, world + 1}, topk_idx.options().dtype(at::kInt));
  in_rank.scatter_(1, dest, 1);
  in_rank = in_rank.narrow(1, 0, world);
  at::Tensor u = at::cumsum(in_rank, 0, at::kInt) - 1;
  r.slot = at::where(in_rank.gt(0), u, -1).to(at::kInt).contiguous();
  return r;
}

// The routing kernels (moe_routing.cu: two launches, one int32 allocation) by default;
// MKERNEL_MOE_ROUTING=aten opts back into route_on_device's ~30 ATen ops (same arrays entry
// for entry: tests/gpu/test_moe_routing.py). Device run s8run1 (seed 8k, W=2): routing GPU
// time 0.36 -> 0.027 ms, host issue per call 1.60 -> 0.43 ms, dispatch+GEMM 6.77 -> 5.64 ms.
bool routing_kernel_enabled() {
  static const bool on = [] {
    const char* v = env::get("MKERNEL_MOE_ROUTING");
    return v == nullptr || std::string(v) != "aten";
  }();
  return on;
}

// The routing of route_on_device by the routing kernels; the four arrays are views of one
// int32 buffer (with the kernels' scratch after them).
Routing route_by_kernel(const char* op, const at::Tensor& topk_idx, int64_t experts,
                        int64_t world, cudaStream_t stream) {
  const int64_t T = topk_idx.size(0), k = topk_idx.size(1), n = T * k;
  const at::Tensor idx = topk_idx.contiguous();
  const int64_t scratch = moe_ep::routing_scratch_ints(T, static_cast<int>(experts),
                                                      static_cast<int>(world));
  at::Tensor buf = at::empty({2 * n + experts + T * world + scratch},
                             topk_idx.options().dtype(at::kInt));
  Routing r;
  r.expert = buf.narrow(0, 0, n);
  r.pos = buf.narrow(0, n, n);
  r.cnt = buf.narrow(0, 2 * n, experts);
  r.slot = buf.narrow(0, 2 * n + experts, T * world).view({T, world});
  moe_ep::RoutingArgs a;
  a.topk_idx = idx.data_ptr();
  a.idx_is_64 = idx.scalar_type() == at::kLong;
  a.tokens = T;
  a.k = static_cast<int>(k);
  a.experts = static_cast<int>(experts);
  a.world = static_cast<int>(world);
  a.scratch = buf.data_ptr<int32_t>() + 2 * n + experts + T * world;
  a.expert = r.expert.data_ptr<int32_t>();
  a.pos = r.pos.data_ptr<int32_t>();
  a.cnt = r.cnt.data_ptr<int32_t>();
  a.slot = r.slot.data_ptr<int32_t>();
  a.stream = stream;
  const char* reason = nullptr;
  const cudaError_t err = moe_ep::route(a, &reason);
  if (err != cudaSuccess) {
    cudaGetLastError();
    TORCH_CHECK(false, op, ": routing launch failed: ", cudaGetErrorString(err),
                reason ? std::string(" (") + reason + ")" : std::string());
  }
  return r;
}

// Whether the one-node grouped GEMM reads the received rows where they landed
// (gemm::Problem::a_row_map) instead of the dispatch kernel expanding them into a packed copy
// first (capacity 0, no recv_x asked for). MKERNEL_MOE_GATHER_A=1 / 0 forces it; unset (auto):
// on where this rank has its GPU to itself. Two real H200s (session 24, one rank each):
// 0.80 / 0.82 / 0.84x compute alone at seed 8k / Mixtral / seed 32k against 0.78 / 0.84 / 0.73x
// with the expansion in the same call; ranks sharing one GPU under MPS measured slower with it
// (session 23: their GEMMs then run all at once instead of staggered behind the expansion).
// `sharers` (fused_common.h gpu_sharers) is the same on every rank of a one-node group only if
// every GPU holds as many ranks; the choice is local (each rank's GEMM reads its own rows), so
// ranks may differ.
bool gather_enabled(int sharers) {
  static const int forced = [] {
    const char* v = env::get("MKERNEL_MOE_GATHER_A");
    if (v == nullptr || *v == '\0' || std::string(v) == "auto") return -1;
    return std::string(v) == "1" ? 1 : 0;
  }();
  return forced >= 0 ? forced == 1 : sharers == 1;
}

// MKERNEL_MOE_OVERLAP=1 (opt-in, session 24; measurement until a GPU per rank has timed it): the
// gathered path in two dispatch launches and two GEMM launches, so that the grouped GEMM runs
// on this rank's own rows while its tokens travel (kernels/moe/README.md "Overlap"):
//   stream S: dispatch kLayout (entry barrier, counts, every row's place, own row maps)
//             -> GEMM over the own-row segments on all SMs but the sends' -> [wait: sends done]
//             -> GEMM over the peers' row segments (every SM);
//   side stream: [after kLayout] dispatch kSend (the tokens, the arrival flags, the wait for
//             every rank's) on MKERNEL_MOE_OVERLAP_SEND_CTAS CTAs (default 16: 8 SMs).
// No kernel waits for another launch of the same rank: the GEMMs read only rows their stream
// order has made visible, so neither order of placement on the SMs can deadlock.
bool overlap_enabled() {
  static const bool on = [] {
    const char* v = env::get("MKERNEL_MOE_OVERLAP");
    return v != nullptr && std::string(v) == "1";
  }();
  return on;
}

int overlap_send_ctas() {
  static const int n = [] {
    const char* v = env::get("MKERNEL_MOE_OVERLAP_SEND_CTAS");
    const int c = v != nullptr ? std::atoi(v) : 0;
    return c >= 1 ? c : 16;
  }();
  return n;
}

// MKERNEL_MOE_FUSED (opt-in, session 28; its tests pass on the GPU since session 29, not timed
// yet): the dispatch's sends and the grouped GEMM in one persistent kernel after the layout launch
// (kernels/moe/moe_fused_api.h), one node, capacity 0, at most 32 ranks. "1" runs it wherever it
// applies; "auto" lets the group's first eager call of a shape time it against the default path
// (fused_common.h choose_path: kept only if it beats the default in enough paired rounds, the
// same verdict on every rank, a fallback logged once); unset or "0": the default path.
enum class FusedMode { kOff, kOn, kAuto };
FusedMode fused_mode() {
  static const FusedMode mode = [] {
    const char* v = env::get("MKERNEL_MOE_FUSED");
    if (v == nullptr) return FusedMode::kOff;
    if (std::strcmp(v, "1") == 0) return FusedMode::kOn;
    if (std::strcmp(v, "auto") == 0) return FusedMode::kAuto;
    return FusedMode::kOff;
  }();
  return mode;
}

}  // namespace

namespace {

// The fused grouped GEMM's launch shape for a call of this group (dispatch_fused): its CTAs wait
// for the peers' side warps, so on a GPU the ranks share their grids must all be placed at once.
gemm::Launch fused_launch(const char* op, int64_t group, cudaStream_t stream) {
  gemm::Launch launch;
  launch.stream = stream;
  const int grid = fused_glue::fused_grid(op, group);
  const int co = fused_glue::co_resident_grid(grid);
  launch.sm_count = co > 0 ? co : grid;
  launch.splits = 1;
  return launch;
}

// Why the fused dispatch cannot run a call (nullptr: it can). Asked before any launch of the call
// (a refusal after the layout launch would leave the call open and the peers waiting) and from
// what every rank of the group shares (rows_out, E_local, F, H, dtype, the grid), so every rank
// gets the same answer and takes the same path.
const char* fused_refusal(const char* op, int64_t group, const at::Tensor& xc, const at::Tensor& w1,
                          int64_t rows_out, int64_t El, cudaStream_t stream) {
  if (moe_fused::tile_flags(rows_out, static_cast<int>(El)) > comm::kOpFlagRoom)
    return "more M tiles than the tile-flag region holds";
  if (rows_out == 0 || w1.size(1) == 0) return nullptr;
  gemm::Problem p{nullptr,
                  nullptr,
                  nullptr,
                  static_cast<int>(rows_out),
                  static_cast<int>(w1.size(1)),
                  static_cast<int>(xc.size(1)),
                  xc.scalar_type() == at::kBFloat16 ? gemm::DType::kBF16 : gemm::DType::kFP16};
  p.batches = static_cast<int>(El);
  p.groups_per_b = 2;
  p.group_b_head = static_cast<int>(El);
  return gemm::can_implement(p, gemm::ConfigId::kPing128x128Cluster1x2,
                             fused_launch(op, group, stream));
}

// The dispatch + grouped GEMM as one persistent kernel (fused_enabled): the layout launch, then
// the packed GEMM over this rank's own rows of every expert first and the peers' rows after, its
// side warps sending the tokens and expanding each M tile's rows into recv_x before the tile's
// TMA loads (moe_fused_hooks.cuh). recv_x is returned when asked for (return_recv).
DispatchResult dispatch_fused(const char* op, int64_t group, comm::SymmetricGroup& g,
                              moe_ep::DispatchArgs a, const moe_ep::DispatchLayout& lay,
                              const at::Tensor& xc, const at::Tensor& w1, int64_t rows_out,
                              const at::Tensor& counts, const at::Tensor& route,
                              const at::Tensor& recv_counts, bool return_recv) {
  const int64_t El = counts.size(0), H = xc.size(1), F = w1.size(1);
  at::Tensor seg = at::empty({6 * El}, counts.options());
  at::Tensor recv = at::empty({rows_out, H}, xc.options());
  at::Tensor out = at::empty({rows_out, F}, xc.options());
  const bool gemm_work = rows_out > 0 && F > 0;
  const int32_t* s3 = seg.data_ptr<int32_t>();
  gemm::Problem p =
      engine_problem(op, recv, w1, out.data_ptr(), std::max<int64_t>(rows_out, 1), F, H);
  p.batches = static_cast<int>(El);
  p.group_begin = s3;
  p.group_end = s3 + 3 * El;
  p.groups_per_b = 2;
  p.group_b_head = static_cast<int>(El);
  // The caller asked fused_refusal first: nothing here refuses the call.
  const gemm::Launch launch = fused_launch(op, group, a.stream);
  a.phase = moe_ep::DispatchArgs::Phase::kLayout;
  a.segments = nullptr;
  a.segments3 = seg.data_ptr<int32_t>();
  a.recv_x = nullptr;
  const char* reason = nullptr;
  check_launch(op, moe_ep::dispatch(a, &reason), reason, g);

  if (gemm_work) {
    moe_fused::MoeFusedParams h;
    h.group = a.group;
    // x may be empty (T = 0: no own rows, no sends); the token area stands in as a valid base.
    h.x = xc.size(0) > 0 ? static_cast<const uint8_t*>(xc.data_ptr())
                         : a.group.data[a.group.rank] + lay.tokens;
    h.tokens = xc.size(0);
    h.row_bytes = a.row_bytes;
    h.max_tokens = a.max_tokens;
    h.tokens_area = lay.tokens;
    h.row_map = lay.row_map;
    h.slot = a.slot;
    h.recv_counts = a.recv_counts;
    h.recv_x = static_cast<uint8_t*>(recv.data_ptr());
    h.tile_flag_base = comm::FlagSlot::kOpSlotBase;
    h.e_local = static_cast<int>(El);
    // The first wave's own tiles are expanded before any token leaves (a CTA pair per tile).
    h.first_wave = std::max(1, moe_fused::grid_ctas(p.dtype, launch) / 2);
    check_launch(op, moe_fused::run(p, launch, h, &reason), reason, g);
  } else {
    // No GEMM work: the layout launch began the call; an empty kSend launch ends it (every
    // rank's arrival flags, op_end).
    moe_ep::DispatchArgs send = a;
    send.phase = moe_ep::DispatchArgs::Phase::kSend;
    send.segments3 = nullptr;
    check_launch(op, moe_ep::dispatch(send, &reason), reason, g);
  }
  return DispatchResult{out, counts, route, recv_counts, return_recv ? recv : xc.new_empty({0})};
}

// The gathered dispatch + grouped GEMM in four launches (overlap_enabled): see there.
DispatchResult dispatch_overlapped(const char* op, comm::SymmetricGroup& g, moe_ep::DispatchArgs a,
                                   const moe_ep::DispatchLayout& lay, const at::Tensor& xc,
                                   const at::Tensor& w1, int64_t rows_out, const at::Tensor& counts,
                                   const at::Tensor& route, const at::Tensor& recv_counts) {
  const int64_t El = counts.size(0), T = xc.size(0), H = xc.size(1), F = w1.size(1);
  at::Tensor seg = at::empty({6 * El}, counts.options());
  a.phase = moe_ep::DispatchArgs::Phase::kLayout;
  a.segments = seg.data_ptr<int32_t>();
  const char* reason = nullptr;
  check_launch(op, moe_ep::dispatch(a, &reason), reason, g);

  // The sends on a side stream, after the layout launch (the same call number).
  const c10::cuda::CUDAStream side = c10::cuda::getStreamFromPool(false, xc.get_device());
  at::cuda::CUDAEvent laid;
  laid.record(c10::cuda::getCurrentCUDAStream());
  laid.block(side);
  moe_ep::DispatchArgs send = a;
  send.phase = moe_ep::DispatchArgs::Phase::kSend;
  send.segments = nullptr;
  send.stream = side.stream();
  send.max_ctas = overlap_send_ctas();
  check_launch(op, moe_ep::dispatch(send, &reason), reason, g);

  const uint8_t* region = a.group.data[a.group.rank];
  const at::Tensor own =
      T > 0 ? xc : at::from_blob(const_cast<uint8_t*>(region + lay.tokens), {1, H}, xc.options());
  const auto* row_map = reinterpret_cast<const int32_t*>(region + lay.row_map);
  at::Tensor out = at::empty({rows_out, F}, xc.options());
  const int32_t* s = seg.data_ptr<int32_t>();
  try {
    // Own rows first, on the SMs the sends leave (two send CTAs per SM).
    grouped_packed_gathered_segments(op, region + lay.tokens, own, row_map, w1, s, s + El, 1, out,
                                     (send.max_ctas + 1) / 2);
    at::cuda::CUDAEvent sent;
    sent.record(side);
    sent.block(c10::cuda::getCurrentCUDAStream());
    // The peers' rows, once every rank's tokens have landed (the send launch waited for them).
    grouped_packed_gathered_segments(op, region + lay.tokens, own, row_map, w1, s + 2 * El,
                                     s + 4 * El, 2, out, 0);
  } catch (const c10::Error& e) {
    const std::string wait = g.diagnostic();
    TORCH_CHECK(wait.empty(), op, ": the dispatch kernel failed (", wait,
                "); the grouped GEMM after it reported: ", e.what_without_backtrace());
    throw;
  }
  return DispatchResult{out, counts, route, recv_counts, xc.new_empty({0})};
}

}  // namespace

namespace {
DispatchResult dispatch_call(const char* op, int64_t group, comm::SymmetricGroup& g,
                             const Routing& r, const moe_ep::DispatchLayout& lay,
                             const at::Tensor& xc, const at::Tensor& topk_idx, const at::Tensor& w1,
                             int64_t E, int64_t capacity, int64_t Tm, int64_t rows_out, int sharers,
                             bool return_recv, bool fused);
}  // namespace

std::optional<DispatchResult> dispatch_ep(const char* op, const at::Tensor& x,
                                          const at::Tensor& topk_idx, const at::Tensor& w1,
                                          int64_t group, int64_t world_size, int64_t num_experts,
                                          int64_t capacity, bool return_recv,
                                          int64_t reserved_tokens) {
  const c10::cuda::CUDAGuard device_guard(x.device());
  comm::SymmetricGroup& g = comm::SymmetricGroup::get(op, group, world_size, x.device());
  if (!g.single_node()) return std::nullopt;
  TORCH_CHECK_VALUE(x.scalar_type() == at::kBFloat16 || x.scalar_type() == at::kHalf, op,
                    ": on CUDA x must be bfloat16 or float16 (the grouped GEMM's inputs), got ",
                    x.scalar_type());
  const int64_t T = x.size(0), H = x.size(1), k = topk_idx.size(1), F = w1.size(1);
  const int64_t W = world_size, E = num_experts, El = E / W;
  const int64_t row_bytes = H * x.element_size();
  TORCH_CHECK_VALUE(row_bytes % 16 == 0, op, ": on CUDA x's rows must be a multiple of 16 bytes "
                    "(H a multiple of 8), got H = ", H);
  TORCH_CHECK_VALUE(E <= moe_ep::kMaxExperts, op, ": num_experts must be <= ",
                    moe_ep::kMaxExperts, " on CUDA, got ", E);
  TORCH_CHECK_VALUE(reserved_tokens == 0 || T <= reserved_tokens, op, ": x has ", T,
                    " tokens, more than the ", reserved_tokens,
                    " the group reserved (mkernel.moe.reserve_tokens)");
  const int64_t Tm = reserved_tokens > 0 ? reserved_tokens : max_tokens(op, group, T);
  const int64_t rows_out = capacity > 0 ? El * capacity : W * Tm * std::min(k, El);
  const moe_ep::DispatchLayout lay = moe_ep::dispatch_layout(static_cast<int>(W),
                                                             static_cast<int>(E), Tm, rows_out,
                                                             row_bytes);
  g.ensure(op, lay.total);

  const cudaStream_t stream = at::cuda::getCurrentCUDAStream();
  const Routing r = routing_kernel_enabled() ? route_by_kernel(op, topk_idx, E, W, stream)
                                             : route_on_device(topk_idx, E, W);
  // Collective at the group's first call: every rank gets here once the inputs are validated.
  const int sharers = fused_glue::gpu_sharers(op, group);
  // (F a multiple of 8: the packed GEMM's 16-byte row stores; the same on every rank, as W)
  const bool fusable = capacity == 0 && W <= 32 && F % 8 == 0;
  FusedMode mode = fusable ? fused_mode() : FusedMode::kOff;
  at::Tensor xc = x.contiguous();
  if (mode != FusedMode::kOff) {
    // A shape the fused kernel refuses runs the default path (logged once), as an unmeasured
    // fallback would: the same on every rank (fused_refusal reads only what they share).
    if (const char* why = fused_refusal(op, group, xc, w1, rows_out, E / W, stream)) {
      fused_glue::note_fallback(op, (std::string("the fused dispatch cannot run: ") + why).c_str());
      mode = FusedMode::kOff;
    }
  }
  // One whole call (after the routing, which every path reads) on the fused path or the default.
  auto call = [&](bool fused) -> DispatchResult {
    return dispatch_call(op, group, g, r, lay, xc, topk_idx, w1, E, capacity, Tm, rows_out, sharers,
                         return_recv, fused);
  };
  if (mode != FusedMode::kAuto) return call(mode == FusedMode::kOn);
  // The verdict's key: what every rank shares (T may differ between ranks; Tm does not).
  const std::string key =
      "E=" + std::to_string(E) + " k=" + std::to_string(k) + " H=" + std::to_string(H) +
      " F=" + std::to_string(F) + " Tm=" + std::to_string(Tm) + " " +
      std::string(c10::toString(x.scalar_type())) + (return_recv ? " recv" : "");
  if (fused_glue::known_unfused(group, key)) return call(false);
  DispatchResult result;
  const std::vector<std::function<void()>> paths{[&] { result = call(true); },
                                                 [&] { result = call(false); }};
  // A call's GEMM work, about the same on every rank: its Tm tokens' k rows through [F, H].
  const double flops = 2.0 * static_cast<double>(Tm) * k * F * H;
  paths[fused_glue::choose_path(op, group, key, paths, flops, nullptr, world_size)]();
  return result;
}

namespace {

// One dispatch call after the routing: the fused kernel (dispatch_fused) or the default path
// (the dispatch kernel, then the grouped GEMM over the expanded or the gathered rows).
DispatchResult dispatch_call(const char* op, int64_t group, comm::SymmetricGroup& g,
                             const Routing& r, const moe_ep::DispatchLayout& lay,
                             const at::Tensor& xc, const at::Tensor& topk_idx, const at::Tensor& w1,
                             int64_t E, int64_t capacity, int64_t Tm, int64_t rows_out, int sharers,
                             bool return_recv, bool fused) {
  const int64_t T = xc.size(0), H = xc.size(1), k = topk_idx.size(1), F = w1.size(1);
  const int64_t W = g.world(), El = E / W;
  const int64_t row_bytes = H * xc.element_size();
  const at::Tensor& x = xc;
  const cudaStream_t stream = at::cuda::getCurrentCUDAStream();
  const auto int_opts = x.options().dtype(at::kInt);
  at::Tensor route = at::empty({T, k}, x.options().dtype(at::kLong));
  at::Tensor counts = at::empty({El}, int_opts);
  at::Tensor recv_counts = at::empty({W, El}, int_opts);
  // Gathered rows: no recv_x; the GEMM reads row r from the token area at row_map[r] or from
  // x (this rank's own tokens).
  const bool gather = !fused && capacity == 0 && !return_recv && gather_enabled(sharers);
  at::Tensor recv = gather || fused ? at::Tensor() : at::empty({rows_out, H}, x.options());

  moe_ep::DispatchArgs a;
  a.group = g.device_view();
  a.x = xc.data_ptr();
  a.tokens = T;
  a.row_bytes = row_bytes;
  a.k = static_cast<int>(k);
  a.experts = static_cast<int>(E);
  a.capacity = static_cast<int>(capacity);
  a.max_tokens = Tm;
  a.rows_out = rows_out;
  a.expert = r.expert.data_ptr<int32_t>();
  a.pos = r.pos.data_ptr<int32_t>();
  a.cnt = r.cnt.data_ptr<int32_t>();
  a.slot = r.slot.data_ptr<int32_t>();
  a.route = route.data_ptr<int64_t>();
  a.counts = counts.data_ptr<int32_t>();
  a.recv_counts = recv_counts.data_ptr<int32_t>();
  a.recv_x = gather || fused ? nullptr : recv.data_ptr();
  // Every rank must agree on these (T may differ between ranks).
  // (and on the fused path: its launches pair with no other path's; MKERNEL_MOE_FUSED set on
  // some ranks only is named at the entry barrier)
  a.signature = comm::call_signature(
      comm::kOpMoeDispatch,
      {static_cast<int64_t>(x.scalar_type()), H, k, E, capacity, Tm, F, fused ? 1 : 0});
  a.stream = stream;
  const char* reason = nullptr;
  if (fused) {
    return dispatch_fused(op, group, g, a, lay, xc, w1, rows_out, counts, route, recv_counts,
                          return_recv);
  }
  if (gather && overlap_enabled()) {
    return dispatch_overlapped(op, g, a, lay, xc, w1, rows_out, counts, route, recv_counts);
  }
  check_launch(op, moe_ep::dispatch(a, &reason), reason, g);

  if (capacity > 0) recv = recv.view({El, capacity, H});
  at::Tensor out;
  try {
    if (gather) {
      const uint8_t* region = a.group.data[a.group.rank];
      // x may be empty (T = 0 here, rows from peers only): no row names it then, but the
      // GEMM wants a valid base; the token area stands in.
      const at::Tensor own = T > 0 ? xc : at::from_blob(const_cast<uint8_t*>(region + lay.tokens),
                                                        {1, H}, x.options());
      out = grouped_packed_gathered(op, region + lay.tokens, own,
                                    reinterpret_cast<const int32_t*>(region + lay.row_map),
                                    rows_out, w1, at::cumsum(counts, 0, at::kInt));
    } else {
      out = expert_gemm(recv, w1, counts, capacity);
    }
  } catch (const c10::Error& e) {
    // A trapped wait of the dispatch kernel surfaces at the GEMM's launch (a dead context):
    // name the kernel's wait record (op, peer, flag) instead of the GEMM alone.
    const std::string wait = g.diagnostic();
    TORCH_CHECK(wait.empty(), op, ": the dispatch kernel failed (", wait,
                "); the grouped GEMM after it reported: ", e.what_without_backtrace());
    throw;
  }
  return DispatchResult{out, counts, route, recv_counts, return_recv ? recv : x.new_empty({0})};
}

}  // namespace

namespace {

enum class MoveKind { kCombine, kGather, kScatter };

// The combine-family launch: y's rows in the dispatch layout ([R, H] or [E_local, C, H]; for
// scatter the choices' rows [T, k, H] and the layout's row count y_rows), into `out`.
void run_move(const char* op, MoveKind kind, comm::SymmetricGroup& g, const at::Tensor& src,
              int64_t y_rows, int64_t capacity, const at::Tensor& route,
              const at::Tensor& recv_counts, const at::Tensor* topk_weights, at::Tensor& out) {
  const int64_t H = src.size(-1), k = route.size(1), T = route.size(0);
  const int64_t row_bytes = H * src.element_size();
  const int64_t El = recv_counts.size(1);
  TORCH_CHECK_VALUE(row_bytes % 16 == 0, op, ": on CUDA the rows must be a multiple of 16 "
                    "bytes, got H = ", H, " of ", src.scalar_type());
  TORCH_CHECK_VALUE(El <= moe_ep::kMaxExperts, op, ": E_local must be <= ",
                    moe_ep::kMaxExperts, " on CUDA, got ", El);
  moe_ep::DType dt = moe_ep::DType::kFP32;
  if (src.scalar_type() == at::kBFloat16) {
    dt = moe_ep::DType::kBF16;
  } else if (src.scalar_type() == at::kHalf) {
    dt = moe_ep::DType::kFP16;
  } else {
    TORCH_CHECK_VALUE(src.scalar_type() == at::kFloat, op,
                      ": on CUDA the rows must be bfloat16, float16 or float32, got ",
                      src.scalar_type());
  }
  g.ensure(op, moe_ep::combine_bytes(y_rows, row_bytes));
  const at::Tensor yc = src.contiguous(), rc = route.contiguous(), cc = recv_counts.contiguous();
  at::Tensor wc;
  moe_ep::CombineArgs a;
  a.group = g.device_view();
  a.y = yc.data_ptr();
  a.y_rows = y_rows;
  a.hidden = H;
  a.dtype = dt;
  a.capacity = static_cast<int>(capacity);
  a.e_local = static_cast<int>(El);
  a.recv_counts = cc.data_ptr<int32_t>();
  a.route = rc.data_ptr<int64_t>();
  if (topk_weights != nullptr) {
    wc = topk_weights->contiguous();
    a.weights = wc.data_ptr<float>();
  }
  a.tokens = T;
  a.k = static_cast<int>(k);
  a.out = out.data_ptr();
  // Every rank must agree on these (T may differ between ranks).
  a.signature = comm::call_signature(comm::kOpMoeCombine,
                                     {static_cast<int>(kind), static_cast<int64_t>(
                                      src.scalar_type()), y_rows, H, k, capacity, El});
  a.stream = at::cuda::getCurrentCUDAStream();
  const char* reason = nullptr;
  cudaError_t err = cudaSuccess;
  switch (kind) {
    case MoveKind::kCombine:
      err = moe_ep::combine(a, &reason);
      break;
    case MoveKind::kGather:
      err = moe_ep::gather(a, &reason);
      break;
    case MoveKind::kScatter:
      err = moe_ep::scatter(a, &reason);
      break;
  }
  check_launch(op, err, reason, g);
}

int64_t layout_rows(const at::Tensor& y) { return y.numel() / std::max<int64_t>(y.size(-1), 1); }

}  // namespace

std::optional<at::Tensor> combine_ep(const char* op, const at::Tensor& y, const at::Tensor& route,
                                     const at::Tensor& recv_counts,
                                     const at::Tensor& topk_weights, int64_t group,
                                     int64_t world_size, int64_t num_tokens) {
  const c10::cuda::CUDAGuard device_guard(y.device());
  comm::SymmetricGroup& g = comm::SymmetricGroup::get(op, group, world_size, y.device());
  if (!g.single_node()) return std::nullopt;
  at::Tensor out = at::empty({num_tokens, y.size(-1)}, y.options());
  run_move(op, MoveKind::kCombine, g, y, layout_rows(y), y.dim() == 3 ? y.size(1) : 0, route,
           recv_counts, &topk_weights, out);
  return out;
}

std::optional<at::Tensor> gather_ep(const char* op, const at::Tensor& y, const at::Tensor& route,
                                    const at::Tensor& recv_counts, int64_t group,
                                    int64_t world_size) {
  const c10::cuda::CUDAGuard device_guard(y.device());
  comm::SymmetricGroup& g = comm::SymmetricGroup::get(op, group, world_size, y.device());
  if (!g.single_node()) return std::nullopt;
  at::Tensor out = at::empty({route.size(0), route.size(1), y.size(-1)}, y.options());
  run_move(op, MoveKind::kGather, g, y, layout_rows(y), y.dim() == 3 ? y.size(1) : 0, route,
           recv_counts, nullptr, out);
  return out;
}

std::optional<at::Tensor> scatter_ep(const char* op, const at::Tensor& rows,
                                     const at::Tensor& route, const at::Tensor& recv_counts,
                                     int64_t group, int64_t world_size, int64_t capacity,
                                     int64_t out_rows) {
  const c10::cuda::CUDAGuard device_guard(rows.device());
  comm::SymmetricGroup& g = comm::SymmetricGroup::get(op, group, world_size, rows.device());
  if (!g.single_node()) return std::nullopt;
  const int64_t El = recv_counts.size(1), H = rows.size(2);
  at::Tensor out = capacity > 0 ? at::empty({El, capacity, H}, rows.options())
                                : at::empty({out_rows, H}, rows.options());
  run_move(op, MoveKind::kScatter, g, rows, capacity > 0 ? El * capacity : out_rows, capacity,
           route, recv_counts, nullptr, out);
  return out;
}

namespace {

// mkernel._moe_route (tests only): this rank's routing arrays (expert, pos, cnt, slot) by the
// ATen ops or by the routing kernels, so a GPU test can compare the two entry for entry.
std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor> route_arrays(
    const at::Tensor& topk_idx, int64_t num_experts, int64_t world_size, bool kernel) {
  constexpr const char* kOp = "mkernel._moe_route";
  TORCH_CHECK_VALUE(topk_idx.dim() == 2 && (topk_idx.scalar_type() == at::kLong ||
                                            topk_idx.scalar_type() == at::kInt),
                    kOp, ": topk_idx must be [T, k] int64 or int32, got ", topk_idx.sizes(),
                    " ", topk_idx.scalar_type());
  TORCH_CHECK_VALUE(world_size >= 1 && num_experts >= world_size &&
                        num_experts % world_size == 0 && num_experts <= moe_ep::kMaxExperts,
                    kOp, ": num_experts (", num_experts, ") must be a multiple of world_size (",
                    world_size, ") and <= ", moe_ep::kMaxExperts);
  const c10::cuda::CUDAGuard device_guard(topk_idx.device());
  const Routing r = kernel ? route_by_kernel(kOp, topk_idx, num_experts, world_size,
                                             at::cuda::getCurrentCUDAStream())
                           : route_on_device(topk_idx, num_experts, world_size);
  return {r.expert, r.pos, r.cnt, r.slot};
}

}  // namespace

TORCH_LIBRARY_IMPL(mkernel, CUDA, m) { m.impl("_moe_route", &route_arrays); }

}  // namespace moe
}  // namespace mkernel

#endif  // MKERNEL_WITH_CUDA
