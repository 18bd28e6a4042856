// The MoE's own inter-node exchange (see moe_net.h; protocol kernels/moe/moe_net_api.h).
#ifdef MKERNEL_WITH_CUDA

#include "moe_net.h"

#include <ATen/cuda/CUDAContext.h>
#include <ATen/cuda/CUDAEvent.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/library.h>

#include <algorithm>
#include <array>
#include <cstdlib>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "comm/symmetric_group.h"
#include "kernels/comm/wait_diagnostic.h"
#include "kernels/moe/moe_net_api.h"
#include "kernels/moe/moe_net_plan.h"

namespace mkernel {
namespace moe {

// The wait record names the exchange's slots from moe_net_plan.h's copy of the layout.
static_assert(moe_net::slots::kReady == moe_net::kReady && moe_net::slots::kDone == moe_net::kDone &&
                  moe_net::slots::kData == moe_net::kData &&
                  moe_net::slots::kPieces == moe_net::kPieces &&
                  moe_net::slots::kEnd == moe_net::kSlotEnd,
              "moe_net_plan.h's slots must match moe_net_api.h's");

namespace {

constexpr uint64_t kAlign = 256;
constexpr uint64_t kMinPiece = uint64_t{1} << 20;  // below 1 MiB a piece costs more than it hides

uint64_t align_up(uint64_t v, uint64_t a) { return (v + a - 1) / a * a; }

void check(const char* op, cudaError_t err, const char* what, const comm::SymmetricGroup& g) {
  if (err == cudaSuccess) return;
  cudaGetLastError();
  const std::string wait = g.diagnostic();
  TORCH_CHECK(false, op, ": inter-node exchange (", what, ") failed: ", cudaGetErrorString(err),
              wait.empty() ? std::string() : "; " + wait);
}

}  // namespace

// The exchange's side streams come from torch's pool: mkernel's own set, created together (so that
// they sit on distinct hardware queues), measured no faster (session 20 call B: the eager dispatch
// 1.741 vs 1.791 ms, mode 1 1.613 vs 1.600; NOTES "Session 20").
at::cuda::CUDAStream side_stream(c10::DeviceIndex device) {
  return at::cuda::getStreamFromPool(false, device);
}

bool exchange_by_copy_engine(const char* op, int64_t group, int64_t world_size,
                             const at::Device& device) {
  // MKERNEL_MOE_NODES_PATH: "substrate" never, "ce" wherever every rank is alone on its node,
  // unset: there too when the nodes are emulated on this host (the loopback transport) and the
  // inter-node areas are host staging (where s9run2 verified it and measured it 2x faster than
  // the collectives) or the GPU memory of the GPU-direct emulation (MKERNEL_NET_GDR=1: the
  // stage and unstage copies are device copies, the transport's copy engine moves each piece
  // when the emulated link delivers it, and no SM is held while the pieces are in flight).
  static const int mode = [] {
    const char* v = std::getenv("MKERNEL_MOE_NODES_PATH");
    const std::string m = v == nullptr ? "" : v;
    TORCH_CHECK_VALUE(m.empty() || m == "substrate" || m == "ce",
                      "MKERNEL_MOE_NODES_PATH must be \"substrate\" or \"ce\" (or unset), got \"", m, "\"");
    return m == "substrate" ? 0 : m == "ce" ? 2 : 1;
  }();
  static const bool emulated = std::getenv("MKERNEL_EMULATED_NODE") != nullptr;
  if (mode == 0) return false;
  const comm::SymmetricGroup& g = comm::SymmetricGroup::get(op, group, world_size, device);
  if (g.nodes() != g.world()) return false;
  if (mode == 2) return true;
  // Every rank takes the same branch: the same environment, and the group's inter-node path
  // (opened collectively by the collective that precedes every call) is the same kind at every
  // rank.
  const void* area = g.device_view().net.send_area;
  if (!emulated || area == nullptr) return false;
  cudaPointerAttributes attr{};
  if (cudaPointerGetAttributes(&attr, area) != cudaSuccess) {
    cudaGetLastError();
    return false;
  }
  return attr.type == cudaMemoryTypeHost || attr.type == cudaMemoryTypeDevice;
}

namespace {

// What an exchange started without `join` leaves for exchange_join (this thread's: the ops run
// on the caller's thread): the side streams' end events, and the tensors they still read or
// write, held until the caller's stream waits for them (then the allocator may reuse them on
// that stream: no record_stream needed, also under graph capture).
struct Pending {
  std::vector<at::cuda::CUDAEvent> events;
  std::vector<at::Tensor> held;
};
thread_local Pending pending;

}  // namespace

void exchange_join() {
  const at::cuda::CUDAStream main = at::cuda::getCurrentCUDAStream();
  for (at::cuda::CUDAEvent& ev : pending.events) ev.block(main);
  pending.events.clear();
  pending.held.clear();
}

at::Tensor exchange_nodes(const char* op, int32_t op_id, const at::Tensor& src, bool all_to_all,
                          int64_t group, int64_t world_size, bool join, bool copy_own) {
  const c10::cuda::CUDAGuard device_guard(src.device());
  comm::SymmetricGroup& g = comm::SymmetricGroup::get(op, group, world_size, src.device());
  const int W = g.world(), me = g.rank();
  const at::Tensor s = src.contiguous();
  TORCH_CHECK(!all_to_all || s.size(0) % W == 0, op, ": the all-to-all's source has ", s.size(0),
              " rows, not a multiple of the ", W, " ranks");
  const int64_t rows = all_to_all ? s.size(0) / W : s.size(0);
  std::vector<int64_t> shape(s.sizes().begin(), s.sizes().end());
  shape[0] = W * rows;
  at::Tensor out = at::empty(shape, s.options());
  const uint64_t block = static_cast<uint64_t>(s.numel() / (all_to_all ? W : 1)) * s.element_size();
  if (block == 0) return out;  // the same on every rank: all skip alike
  const uint64_t stride = align_up(block, kAlign);
  g.ensure_net(op, all_to_all ? W * stride : stride, W * stride);
  const comm::GroupDevice view = g.device_view();  // after ensure_net: the current path
  uint8_t* const send_area = view.net.send_area;
  uint8_t* const recv_area = view.net.recv_area;
  const uint64_t pieces =
      std::min<uint64_t>(moe_net::kPieces, std::max<uint64_t>(1, block / kMinPiece));
  const uint64_t piece = align_up((block + pieces - 1) / pieces, kAlign);
  auto piece_bytes = [&](uint64_t c) { return std::min(block, (c + 1) * piece) - std::min(block, c * piece); };
  const auto* in = static_cast<const uint8_t*>(s.data_ptr());
  auto* res = static_cast<uint8_t*>(out.data_ptr());

  const at::cuda::CUDAStream main = at::cuda::getCurrentCUDAStream();
  const at::cuda::CUDAStream send = side_stream(src.device().index());
  const at::cuda::CUDAStream recv = side_stream(src.device().index());
  at::Tensor state = at::empty({2}, s.options().dtype(at::kLong));
  auto* st = reinterpret_cast<uint64_t*>(state.data_ptr());
  check(op, moe_net::launch_begin(view, st, op_id, main.stream()), "begin", g);
  // This rank's own block: a device copy on the caller's stream (unless the caller reads it
  // from src: copy_own false).
  if (copy_own) {
    check(op,
          cudaMemcpyAsync(res + me * block, in + (all_to_all ? me * block : 0), block,
                          cudaMemcpyDeviceToDevice, main.stream()),
          "own block", g);
  }
  at::cuda::CUDAEvent forked, sent, received;
  forked.record(main);
  forked.block(send);
  forked.block(recv);

  // Send: every other node's READY, then per piece the copy-engine stage and the push.
  check(op, moe_net::launch_wait(view, st, -1, moe_net::kReady, op_id, send.stream()), "ready", g);
  for (uint64_t c = 0; c < pieces; ++c) {
    const uint64_t off = c * piece, n = piece_bytes(c);
    if (n == 0) continue;
    for (int p = 0; p < W; ++p) {
      if (p == me || (!all_to_all && p != (me + 1) % W)) continue;  // all_gather: one stage
      const uint64_t dst = (all_to_all ? p * stride : 0) + off;
      check(op,
            cudaMemcpyAsync(send_area + dst, in + (all_to_all ? p * block : 0) + off, n,
                            cudaMemcpyDefault, send.stream()),
            "stage", g);
    }
    check(op,
          moe_net::launch_push(view, st, off, all_to_all ? stride : 0, me * stride + off, n,
                               moe_net::data_slot(me, static_cast<uint32_t>(c)), true, op_id,
                               send.stream()),
          "push", g);
  }
  check(op, moe_net::launch_finish(view, st, op_id, send.stream()), "finish", g);
  sent.record(send);

  // Receive: per piece, every other rank's copy as it lands, out by the copy engine; then DONE.
  for (uint64_t c = 0; c < pieces; ++c) {
    const uint64_t off = c * piece, n = piece_bytes(c);
    if (n == 0) continue;
    for (int j = 1; j < W; ++j) {
      const int p = (me + j) % W;
      check(op,
            moe_net::launch_wait(view, st, p, moe_net::data_slot(p, static_cast<uint32_t>(c)),
                                 op_id, recv.stream()),
            "arrival", g);
      check(op,
            cudaMemcpyAsync(res + p * block + off, recv_area + p * stride + off, n,
                            cudaMemcpyDefault, recv.stream()),
            "unstage", g);
    }
  }
  check(op, moe_net::launch_push(view, st, 0, 0, 0, 0, moe_net::kDone + me, false, op_id,
                                 recv.stream()),
        "done", g);
  received.record(recv);
  pending.events.push_back(std::move(sent));
  pending.events.push_back(std::move(received));
  pending.held.push_back(s);
  pending.held.push_back(state);
  pending.held.push_back(out);
  if (join) exchange_join();
  return out;
}

namespace {
// An integer knob in [lo, hi] (read at every call; every rank must see the same value); unset
// or empty: dflt.
uint64_t env_count(const char* name, const char* op, uint64_t lo, uint64_t hi, uint64_t dflt) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return dflt;
  char* end = nullptr;
  const long n = std::strtol(v, &end, 10);
  TORCH_CHECK_VALUE(end != v && *end == '\0' && n >= static_cast<long>(lo) && n <= static_cast<long>(hi), op, ": ",
                    name, " must be an integer in [", lo, ", ", hi, "], got \"", v, "\"");
  return static_cast<uint64_t>(n);
}

// MKERNEL_MOE_NET_PIECES: at most this many pieces per block in the headed gather, 1 ..
// kPieces - 1 (the default).
uint64_t headed_max_pieces(const char* op) {
  return env_count("MKERNEL_MOE_NET_PIECES", op, 1, moe_net::kPieces - 1, moe_net::kPieces - 1);
}
}  // namespace

struct HeadedGather {
  const char* op = nullptr;
  int32_t op_id = 0;
  comm::SymmetricGroup* group = nullptr;
  comm::GroupDevice view{};
  int world = 0, me = 0;
  moe_net::PiecePlan plan;
  moe_net::HeadedLayout lay;
  uint64_t row_bytes = 0;
  uint64_t block = 0, head_bytes = 0;  // src's and head's bytes
  int64_t rows = 0;  // rows per rank (src's)
  at::Tensor src, head, out, head_out, state;
  at::cuda::CUDAStream recv;
  // One per piece, recorded on the receive stream after that piece's unstages (moe12): the
  // row hooks wait for these on their own stream, never the receive stream for the host.
  std::vector<at::cuda::CUDAEvent> piece_unstaged;
  // The same, recorded by the receive graph's event nodes where the exchange runs as graphs
  // (exchange_graphs_requested; owned by the cached ExchangeGraphs, re-recorded by its next launch).
  std::vector<cudaEvent_t> piece_landed;
  bool timed = false;
  // moe16: the pieces staged, unstaged and gathered by the launch_stage_push / launch_unstage /
  // launch_gather_landed kernels; words (zeroed on the caller's stream before the fork) their
  // landed words and counts (moe_net_api.h).
  bool kernels = false;
  bool landed = false;  // moe18: mode 3's exchange releasing landed words for gather_headed_rows
  at::Tensor words;
  at::cuda::CUDAEvent sent_timed{cudaEventDefault}, received_timed{cudaEventDefault};
  bool finished = false;
  explicit HeadedGather(at::cuda::CUDAStream r) : recv(r) {}
};

namespace {

// A copy of the headed gather whose pointers follow the call's tensors (the areas' side of it is
// the same at every call).
enum class CopyRole { kStageHead, kStagePiece, kUnstageHead, kUnstagePiece };
struct CopyStep {
  CopyRole role;
  int peer;       // the unstages' source rank
  uint64_t off;   // the piece's offset in the block
  uint64_t bytes;
};
// Issues one copy (the direct path: cudaMemcpyAsync; the capture: the same, remembered).
using IssueCopy = std::function<void(const CopyStep&, void* dst, const void* src, cudaStream_t)>;
// Marks a point of the receive stream: after the heads (piece -1) or after piece c's unstages.
using MarkRecv = std::function<void(int64_t piece, cudaStream_t)>;

// The send stream's part of the headed gather (modes 1-3, 5): every other node's READY, the head,
// then src's pieces, each staged and pushed, then finish.
void issue_send(const HeadedGather& x, uint64_t* st, const uint8_t* in, const void* h,
                cudaStream_t s, const IssueCopy& copy) {
  const comm::SymmetricGroup& g = *x.group;
  uint8_t* const send_area = x.view.net.send_area;
  const uint64_t head_bytes = x.head_bytes;
  check(x.op, moe_net::launch_wait(x.view, st, -1, moe_net::kReady, x.op_id, s), "ready", g);
  copy({CopyRole::kStageHead, x.me, 0, head_bytes}, send_area + x.lay.send_head_off(), h, s);
  check(x.op,
        moe_net::launch_push(x.view, st, x.lay.send_head_off(), 0, x.lay.recv_head_off(x.me, x.world),
                             head_bytes, moe_net::data_slot(x.me, 0), true, x.op_id, s),
        "push head", g);
  for (uint64_t c = 0; c < x.plan.pieces; ++c) {
    const uint64_t off = x.plan.offset(c), n = x.plan.bytes(c);
    if (n == 0) continue;
    copy({CopyRole::kStagePiece, x.me, off, n}, send_area + off, in + off, s);
    check(x.op,
          moe_net::launch_push(x.view, st, off, 0, x.lay.recv_block_off(x.me) + off, n,
                               moe_net::data_slot(x.me, static_cast<uint32_t>(1 + c)), true,
                               x.op_id, s),
          "push", g);
  }
  check(x.op, moe_net::launch_finish(x.view, st, x.op_id, s), "finish", g);
}

// The receive stream's part (modes 1-3, 5): every other rank's head (unstaged into hres), then per
// piece and other rank the arrival wait and the unstage into res, then DONE. `words` (mode 5): the
// landed word of each (source, piece), released by the next wait launch (or DONE's).
void issue_recv(const HeadedGather& x, uint64_t* st, uint8_t* res, uint8_t* hres,
                unsigned long long* words, cudaStream_t s, const IssueCopy& copy,
                const MarkRecv& mark) {
  const comm::SymmetricGroup& g = *x.group;
  const int W = x.world, me = x.me;
  uint8_t* const recv_area = x.view.net.recv_area;
  const uint64_t head_bytes = x.head_bytes;
  const uint64_t block = x.block, P = x.plan.pieces;
  for (int j = 1; j < W; ++j) {
    const int p = (me + j) % W;
    check(x.op, moe_net::launch_wait(x.view, st, p, moe_net::data_slot(p, 0), x.op_id, s),
          "head arrival", g);
    copy({CopyRole::kUnstageHead, p, 0, head_bytes}, hres + p * head_bytes,
         recv_area + x.lay.recv_head_off(p, W), s);
  }
  mark(-1, s);
  unsigned long long* unstaged = nullptr;  // moe18: the landed word of the copy just queued
  for (uint64_t c = 0; c < P; ++c) {
    const uint64_t off = x.plan.offset(c), n = x.plan.bytes(c);
    for (int j = 1; j < W && n > 0; ++j) {
      const int p = (me + j) % W;
      check(x.op,
            moe_net::launch_wait(x.view, st, p, moe_net::data_slot(p, static_cast<uint32_t>(1 + c)),
                                 x.op_id, s, unstaged),
            "arrival", g);
      if (words != nullptr) unstaged = words + static_cast<uint64_t>(p) * P + c;
      copy({CopyRole::kUnstagePiece, p, off, n}, res + p * block + off,
           recv_area + x.lay.recv_block_off(p) + off, s);
    }
    mark(static_cast<int64_t>(c), s);
  }
  check(x.op,
        moe_net::launch_push(x.view, st, 0, 0, 0, 0, moe_net::kDone + me, false, x.op_id, s,
                             unstaged),
        "done", g);
}

// MKERNEL_MOE_EXCHANGE_GRAPH (read at every call; ranks may differ: the wire is the same): "1" runs
// the headed gather's send and receive sequences (modes 1 and 3) as two CUDA graphs captured once
// per shape and group state and replayed at every eager call, their copies re-pointed at the call's
// tensors, instead of issuing ~5 stream operations per piece. Why: replayed from a graph the whole
// dispatch ran 1.29 ms (mode 1) against 1.60-1.79 eagerly, the host taking ~1.3-1.5 ms to issue it
// (session 20, NOTES "Session 20, the exchange as graphs").
bool exchange_graphs_requested() {
  const char* v = std::getenv("MKERNEL_MOE_EXCHANGE_GRAPH");
  if (v == nullptr || *v == '\0') return false;
  const std::string m(v);
  TORCH_CHECK_VALUE(m == "0" || m == "1", "MKERNEL_MOE_EXCHANGE_GRAPH must be 0 or 1 (or unset), got \"",
                    m, "\"");
  return m == "1";
}

struct GraphDeleter {
  void operator()(CUgraph_st* g) const { cudaGraphDestroy(g); }
};
struct GraphExecDeleter {
  void operator()(CUgraphExec_st* e) const { cudaGraphExecDestroy(e); }
};
struct EventDeleter {
  void operator()(CUevent_st* e) const { cudaEventDestroy(e); }
};
using GraphPtr = std::unique_ptr<CUgraph_st, GraphDeleter>;
using GraphExecPtr = std::unique_ptr<CUgraphExec_st, GraphExecDeleter>;
using EventPtr = std::unique_ptr<CUevent_st, EventDeleter>;
struct StreamDeleter {
  void operator()(CUstream_st* s) const { cudaStreamDestroy(s); }
};
using StreamPtr = std::unique_ptr<CUstream_st, StreamDeleter>;

EventPtr make_event() {
  cudaEvent_t e = nullptr;
  if (cudaEventCreateWithFlags(&e, cudaEventDisableTiming) != cudaSuccess) return nullptr;
  return EventPtr(e);
}

// One side's graph: the template (its nodes name the copies to re-point), the executable, and
// each re-pointed copy's node with its step.
struct SideGraph {
  GraphPtr graph;
  GraphExecPtr exec;
  std::vector<std::pair<cudaGraphNode_t, CopyStep>> copies;
  EventPtr done;  // recorded after each launch: the next call's begin waits for it
};

// The headed gather's two graphs for one (group state, shape): state is the exchange's two words
// (kept: the graphs' kernels read them at a fixed address); marks[0] after the heads,
// [1 + c] after piece c.
struct ExchangeGraphs {
  std::string key;
  at::Tensor state;
  SideGraph send, recv;
  std::vector<EventPtr> marks;
};

template <typename T>
void key_add(std::string& k, const T& v) {
  k.append(reinterpret_cast<const char*>(&v), sizeof(T));
}

// Every value the graphs' kernels and copies were captured with, except the call's tensors.
std::string graphs_key(const HeadedGather& x, c10::DeviceIndex device) {
  std::string k;
  const comm::GroupDevice& v = x.view;
  key_add(k, x.group);
  key_add(k, device);
  key_add(k, x.op_id);
  key_add(k, v.rank);
  key_add(k, v.world);
  for (int r = 0; r < v.world; ++r) {
    key_add(k, v.node_of[r]);
    key_add(k, v.flags[r]);
    key_add(k, v.data[r]);
  }
  key_add(k, v.local_ranks);
  key_add(k, v.data_bytes);
  key_add(k, v.epoch);
  key_add(k, v.exit_ticket);
  key_add(k, v.diag);
  key_add(k, v.timeout_ns);
  key_add(k, v.group_id);
  const comm::NetDevice& n = v.net;
  key_add(k, n.fifo);
  key_add(k, n.fifo_capacity);
  key_add(k, n.fifo_format);
  key_add(k, n.fifo_head);
  key_add(k, n.send_area);
  key_add(k, n.recv_area);
  key_add(k, n.arrival);
  key_add(k, n.send_buf_id);
  key_add(k, n.recv_buf_id);
  key_add(k, n.send_bytes);
  key_add(k, n.recv_bytes);
  key_add(k, n.arrival_slots);
  key_add(k, n.stage_count);
  key_add(k, n.arrival_mirror);
  key_add(k, n.arrival_claim);
  key_add(k, n.spare_ctas);
  key_add(k, n.gpu_direct);
  key_add(k, x.plan.pieces);
  key_add(k, x.plan.piece);
  key_add(k, x.block);
  key_add(k, x.head_bytes);
  key_add(k, x.lay.stride);
  key_add(k, x.lay.head_stride);
  return k;
}

// Captures one side on a stream of its own and instantiates it; its copies' nodes are found by the
// pointers they were captured with. Returns the reason on failure (the caller falls back).
std::string capture_side(SideGraph& side, c10::DeviceIndex device,
                         const std::function<void(cudaStream_t, const IssueCopy&)>& issue) {
  cudaStream_t raw = nullptr;
  if (cudaStreamCreateWithFlags(&raw, cudaStreamNonBlocking) != cudaSuccess) {
    cudaGetLastError();
    return "cudaStreamCreateWithFlags failed";
  }
  const StreamPtr s(raw);
  struct Captured {
    CopyStep step;
    void* dst;
    const void* src;
  };
  std::vector<Captured> steps;
  if (cudaStreamBeginCapture(s.get(), cudaStreamCaptureModeThreadLocal) != cudaSuccess) {
    cudaGetLastError();
    return "cudaStreamBeginCapture failed";
  }
  std::string why;
  try {
    issue(s.get(), [&](const CopyStep& step, void* dst, const void* src, cudaStream_t st) {
      const cudaError_t err = cudaMemcpyAsync(dst, src, step.bytes, cudaMemcpyDefault, st);
      TORCH_CHECK(err == cudaSuccess, "capture: cudaMemcpyAsync: ", cudaGetErrorString(err));
      steps.push_back({step, dst, src});
    });
  } catch (const c10::Error& e) {
    why = e.what_without_backtrace();
  }
  cudaGraph_t graph = nullptr;
  const cudaError_t end = cudaStreamEndCapture(s.get(), &graph);
  if (graph != nullptr) side.graph.reset(graph);
  if (!why.empty()) return why;
  if (end != cudaSuccess || graph == nullptr) {
    cudaGetLastError();
    return std::string("cudaStreamEndCapture: ") + cudaGetErrorString(end);
  }
  size_t n = 0;
  if (cudaGraphGetNodes(graph, nullptr, &n) != cudaSuccess) return "cudaGraphGetNodes failed";
  std::vector<cudaGraphNode_t> nodes(n);
  if (cudaGraphGetNodes(graph, nodes.data(), &n) != cudaSuccess) return "cudaGraphGetNodes failed";
  std::vector<bool> found(steps.size(), false);
  for (cudaGraphNode_t node : nodes) {
    cudaGraphNodeType type;
    if (cudaGraphNodeGetType(node, &type) != cudaSuccess) return "cudaGraphNodeGetType failed";
    if (type != cudaGraphNodeTypeMemcpy) continue;
    cudaMemcpy3DParms p{};
    if (cudaGraphMemcpyNodeGetParams(node, &p) != cudaSuccess) return "cudaGraphMemcpyNodeGetParams failed";
    bool matched = false;
    for (size_t i = 0; i < steps.size() && !matched; ++i) {
      if (!found[i] && p.dstPtr.ptr == steps[i].dst && p.srcPtr.ptr == steps[i].src) {
        found[i] = matched = true;
        side.copies.emplace_back(node, steps[i].step);
      }
    }
    if (!matched) return "a captured copy matched none issued";
  }
  if (side.copies.size() != steps.size()) return "a copy issued was not captured as a copy node";
  cudaGraphExec_t exec = nullptr;
  const cudaError_t inst = cudaGraphInstantiate(&exec, graph, 0);
  if (inst != cudaSuccess) {
    cudaGetLastError();
    return std::string("cudaGraphInstantiate: ") + cudaGetErrorString(inst);
  }
  side.exec.reset(exec);
  side.done = make_event();
  if (!side.done) return "cudaEventCreateWithFlags failed";
  (void)device;
  return "";
}

// The cached graphs for this gather's key, captured at its first use; nullptr where they cannot be
// (logged once per reason) or the cache is full (kMaxGraphs keys: shapes seldom vary per group).
ExchangeGraphs* exchange_graphs(const HeadedGather& x, c10::DeviceIndex device) {
  constexpr size_t kMaxGraphs = 16;
  static std::mutex mu;
  // Kept for the process (like torch's pool streams): destroying graphs at exit would race the
  // runtime's own teardown.
  static auto* cache = new std::vector<std::unique_ptr<ExchangeGraphs>>();
  static auto* failed = new std::vector<std::string>();
  const std::lock_guard<std::mutex> lock(mu);
  const std::string key = graphs_key(x, device);
  for (auto& e : *cache) {
    if (e->key == key) return e.get();
  }
  if (cache->size() >= kMaxGraphs) return nullptr;
  for (const auto& f : *failed) {
    if (f == key) return nullptr;
  }
  auto eg = std::make_unique<ExchangeGraphs>();
  eg->key = key;
  eg->state = at::empty({2}, x.src.options().dtype(at::kLong));
  auto* st = reinterpret_cast<uint64_t*>(eg->state.data_ptr());
  eg->marks.resize(1 + x.plan.pieces);
  std::string why;
  for (auto& m : eg->marks) {
    m = make_event();
    if (!m) why = "cudaEventCreateWithFlags failed";
  }
  // Captured with this call's tensors; every later launch re-points the copies first.
  const auto* in = static_cast<const uint8_t*>(x.src.data_ptr());
  auto* res = static_cast<uint8_t*>(x.out.data_ptr());
  auto* hres = static_cast<uint8_t*>(x.head_out.data_ptr());
  if (why.empty()) {
    why = capture_side(eg->send, device, [&](cudaStream_t s, const IssueCopy& copy) {
      issue_send(x, st, in, x.head.data_ptr(), s, copy);
    });
  }
  if (why.empty()) {
    why = capture_side(eg->recv, device, [&](cudaStream_t s, const IssueCopy& copy) {
      issue_recv(x, st, res, hres, nullptr, s, copy, [&](int64_t piece, cudaStream_t ms) {
        const cudaError_t err = cudaEventRecordWithFlags(eg->marks[1 + piece].get(), ms,
                                                         cudaEventRecordExternal);
        TORCH_CHECK(err == cudaSuccess, "capture: cudaEventRecordWithFlags: ", cudaGetErrorString(err));
      });
    });
  }
  if (!why.empty()) {
    failed->push_back(key);
    TORCH_WARN(x.op, ": the inter-node exchange runs without graphs (MKERNEL_MOE_EXCHANGE_GRAPH=1): ",
               why);
    return nullptr;
  }
  cache->push_back(std::move(eg));
  return cache->back().get();
}

// Points the side's copies at this call's tensors (the areas' side never changes).
void repoint(const HeadedGather& x, SideGraph& side) {
  const auto* in = static_cast<const uint8_t*>(x.src.data_ptr());
  auto* res = static_cast<uint8_t*>(x.out.data_ptr());
  auto* hres = static_cast<uint8_t*>(x.head_out.data_ptr());
  uint8_t* const send_area = x.view.net.send_area;
  uint8_t* const recv_area = x.view.net.recv_area;
  for (const auto& [node, step] : side.copies) {
    void* dst = nullptr;
    const void* src = nullptr;
    switch (step.role) {
      case CopyRole::kStageHead:
        dst = send_area + x.lay.send_head_off();
        src = x.head.data_ptr();
        break;
      case CopyRole::kStagePiece:
        dst = send_area + step.off;
        src = in + step.off;
        break;
      case CopyRole::kUnstageHead:
        dst = hres + step.peer * x.head_bytes;
        src = recv_area + x.lay.recv_head_off(step.peer, x.world);
        break;
      case CopyRole::kUnstagePiece:
        dst = res + step.peer * x.block + step.off;
        src = recv_area + x.lay.recv_block_off(step.peer) + step.off;
        break;
    }
    check(x.op, cudaGraphExecMemcpyNodeSetParams1D(side.exec.get(), node, dst, src, step.bytes,
                                                   cudaMemcpyDefault),
          "re-point a graph copy", *x.group);
  }
}

}  // namespace

std::shared_ptr<HeadedGather> gather_headed_start(const char* op, int32_t op_id,
                                                  const at::Tensor& src, const at::Tensor& head,
                                                  int64_t group, int64_t world_size, bool timed,
                                                  bool kernels, bool landed) {
  const c10::cuda::CUDAGuard device_guard(src.device());
  comm::SymmetricGroup& g = comm::SymmetricGroup::get(op, group, world_size, src.device());
  const int W = g.world(), me = g.rank();
  const at::cuda::CUDAStream main = at::cuda::getCurrentCUDAStream();
  const at::cuda::CUDAStream send = side_stream(src.device().index());
  auto x = std::make_shared<HeadedGather>(side_stream(src.device().index()));
  x->op = op;
  x->op_id = op_id;
  x->group = &g;
  x->world = W;
  x->me = me;
  x->timed = timed;
  x->kernels = kernels;
  x->src = src.contiguous();
  x->head = head.contiguous();
  const at::Tensor& s = x->src;
  const at::Tensor& h = x->head;
  x->rows = s.size(0);
  x->row_bytes = s.size(0) > 0 ? static_cast<uint64_t>(s.numel() / s.size(0)) * s.element_size() : 0;
  const uint64_t block = static_cast<uint64_t>(s.numel()) * s.element_size();
  const uint64_t head_bytes = static_cast<uint64_t>(h.numel()) * h.element_size();
  TORCH_CHECK(block > 0 && head_bytes > 0, op, ": the headed gather needs rows and a head (", block,
              " and ", head_bytes, " bytes)");
  x->block = block;
  x->head_bytes = head_bytes;
  // The head takes data slot 0 of its source, the pieces slots 1 .. (moe_net_plan.h).
  x->plan = moe_net::plan_pieces(block, headed_max_pieces(op));
  x->lay = moe_net::headed_layout(block, head_bytes);
  bool every_piece = true;  // the same plan (block, pieces) on every rank: all take one branch
  for (uint64_t c = 0; c < x->plan.pieces; ++c) every_piece = every_piece && x->plan.bytes(c) > 0;
  x->landed = landed && !kernels && every_piece;
  std::vector<int64_t> shape(s.sizes().begin(), s.sizes().end());
  shape[0] = W * s.size(0);
  x->out = at::empty(shape, s.options());
  std::vector<int64_t> hshape(h.sizes().begin(), h.sizes().end());
  hshape[0] = W * h.size(0);
  x->head_out = at::empty(hshape, h.options());
  g.ensure_net(op, x->lay.send_bytes(W), x->lay.recv_bytes(W));
  x->view = g.device_view();  // after ensure_net: the current path
  auto* hres = static_cast<uint8_t*>(x->head_out.data_ptr());
  auto* res = static_cast<uint8_t*>(x->out.data_ptr());
  const auto* in = static_cast<const uint8_t*>(s.data_ptr());

  // The send and receive sequences as graphs (modes 1 and 3, eager calls only: inside a capture
  // the caller's graph holds them already).
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  check(op, cudaStreamIsCapturing(main.stream(), &capture), "capture status", g);
  ExchangeGraphs* graphs = nullptr;
  if (!kernels && !x->landed && !timed && capture == cudaStreamCaptureStatusNone &&
      exchange_graphs_requested()) {
    graphs = exchange_graphs(*x, src.device().index());
  }
  if (graphs != nullptr) {
    x->state = graphs->state;
    // The previous launch of these graphs read the state words; this call's begin rewrites them.
    check(op, cudaStreamWaitEvent(main.stream(), graphs->send.done.get(), 0), "wait previous send", g);
    check(op, cudaStreamWaitEvent(main.stream(), graphs->recv.done.get(), 0), "wait previous receive", g);
  } else {
    x->state = at::empty({2}, s.options().dtype(at::kLong));
  }
  auto* st = reinterpret_cast<uint64_t*>(x->state.data_ptr());
  const uint64_t P = x->plan.pieces;
  unsigned long long* words = nullptr;
  if (kernels || x->landed) {  // on the caller's stream, before the fork: zero when either side's launch runs
    x->words = at::zeros({static_cast<int64_t>(3 * W * P + 2 + P)}, s.options().dtype(at::kLong));
    words = reinterpret_cast<unsigned long long*>(x->words.data_ptr());
  }
  const int sms = at::cuda::getCurrentDeviceProperties()->multiProcessorCount;
  check(op, moe_net::launch_begin(x->view, st, op_id, main.stream()), "begin", g);
  at::cuda::CUDAEvent forked;
  forked.record(main);
  forked.block(send);
  forked.block(x->recv);
  // This rank's head (small) on the caller's stream, beside the send.
  check(op,
        cudaMemcpyAsync(hres + me * head_bytes, h.data_ptr(), head_bytes, cudaMemcpyDeviceToDevice,
                        main.stream()),
        "own head", g);
  const IssueCopy issue_copy = [&](const CopyStep& step, void* dst, const void* from, cudaStream_t on) {
    check(op, cudaMemcpyAsync(dst, from, step.bytes, cudaMemcpyDefault, on),
          step.role == CopyRole::kStageHead     ? "stage head"
          : step.role == CopyRole::kStagePiece  ? "stage"
          : step.role == CopyRole::kUnstageHead ? "unstage head"
                                                : "unstage",
          g);
  };

  // Send: every other node's READY, the head, then src's pieces.
  if (graphs != nullptr) {
    repoint(*x, graphs->send);
    check(op, cudaGraphLaunch(graphs->send.exec.get(), send.stream()), "send graph", g);
    check(op, cudaEventRecord(graphs->send.done.get(), send.stream()), "send graph done", g);
  } else if (kernels) {
    check(op, moe_net::launch_wait(x->view, st, -1, moe_net::kReady, op_id, send.stream()), "ready", g);
    check(op,
          cudaMemcpyAsync(x->view.net.send_area + x->lay.send_head_off(), h.data_ptr(), head_bytes,
                          cudaMemcpyDefault, send.stream()),
          "stage head", g);
    check(op,
          moe_net::launch_push(x->view, st, x->lay.send_head_off(), 0, x->lay.recv_head_off(me, W),
                               head_bytes, moe_net::data_slot(me, 0), true, op_id, send.stream()),
          "push head", g);
    check(op,
          moe_net::launch_stage_push(x->view, st, in, block, x->plan.piece, static_cast<uint32_t>(P),
                                     x->lay.recv_block_off(me), words + 2 * W * P + 1, sms, op_id,
                                     send.stream()),
          "stage and push (one launch)", g);
    // moe16: the finish (the transport done with every push, every peer's DONE) ends the receive
    // stream instead, after this rank's own unstage and DONE: then no stream holds a wait for the
    // peers' DONE ahead of this rank's DONE, and the exchange completes even when every stream of
    // the rank shares one hardware queue (CUDA_DEVICE_MAX_CONNECTIONS=1; the deadlock model in
    // tests/host/test_moe_headed_protocol.py). Modes 1-3 keep it on the send stream.
  } else {
    issue_send(*x, st, in, h.data_ptr(), send.stream(), issue_copy);
  }
  at::cuda::CUDAEvent sent;
  sent.record(send);
  if (timed) x->sent_timed.record(send);

  // Receive: every other rank's head, then the caller's stream waits for them; then every piece of
  // every other rank (arrival wait, unstage into out) and DONE, queued here, before this returns
  // (moe12). The send stream's finish spins until every peer's DONE, and a peer's DONE used to be
  // queued only by its gather_headed_finish, i.e. after its host had derived the layout: any host
  // call in between that waits for the device (a lazily loaded kernel's first launch may
  // synchronize the context, CUDA's "Lazy Loading" hazards; cudaFree; a sync) then waited for this
  // rank's finish, which waited for the peer's host, stuck the same way: both ranks stopped at
  // DONE (s13run2 / s14run1, matrix case 2, the group's first headed call with shapes whose ATen
  // kernels had not run yet: NOTES "MoE, moe12"). Now nothing on the send or receive stream waits
  // for this host again; the row hooks run on a stream of their own in gather_headed_finish, after
  // piece c landed.
  if (graphs != nullptr) {
    repoint(*x, graphs->recv);
    check(op, cudaGraphLaunch(graphs->recv.exec.get(), x->recv.stream()), "receive graph", g);
    check(op, cudaEventRecord(graphs->recv.done.get(), x->recv.stream()), "receive graph done", g);
    // The graph's event nodes were recorded by this launch (external events: a wait issued after
    // the launch waits for this launch's record).
    check(op, cudaStreamWaitEvent(main.stream(), graphs->marks[0].get(), 0), "heads", g);
    for (uint64_t c = 0; c < P; ++c) x->piece_landed.push_back(graphs->marks[1 + c].get());
  } else if (kernels) {
    for (int j = 1; j < W; ++j) {
      const int p = (me + j) % W;
      check(op,
            moe_net::launch_wait(x->view, st, p, moe_net::data_slot(p, 0), op_id, x->recv.stream()),
            "head arrival", g);
      check(op,
            cudaMemcpyAsync(hres + p * head_bytes, x->view.net.recv_area + x->lay.recv_head_off(p, W),
                            head_bytes, cudaMemcpyDefault, x->recv.stream()),
            "unstage head", g);
    }
    at::cuda::CUDAEvent head_ready;
    head_ready.record(x->recv);
    head_ready.block(main);
    // moe16: every piece of every other rank, and DONE, in one launch
    check(op,
          moe_net::launch_unstage(x->view, st, res, block, x->lay.stride, x->plan.piece,
                                  static_cast<uint32_t>(P), words, sms, op_id, x->recv.stream()),
          "unstage (one launch)", g);
    sent.block(x->recv);  // state[1] holds the last push's ticket once the send stream is here
    check(op, moe_net::launch_finish(x->view, st, op_id, x->recv.stream()), "finish", g);
  } else {
    x->piece_unstaged.reserve(P);
    issue_recv(*x, st, res, hres, x->landed ? words : nullptr, x->recv.stream(), issue_copy,
               [&](int64_t piece, cudaStream_t) {
                 if (piece < 0) {
                   at::cuda::CUDAEvent head_ready;
                   head_ready.record(x->recv);
                   head_ready.block(main);
                 } else {
                   x->piece_unstaged.emplace_back();
                   x->piece_unstaged.back().record(x->recv);
                 }
               });
  }
  at::cuda::CUDAEvent received;
  received.record(x->recv);
  if (timed) x->received_timed.record(x->recv);
  // Joined by the caller's exchange_join (after gather_headed_finish): held from here, so that
  // an exception between the two halves leaves nothing the side streams still use unowned.
  pending.events.push_back(std::move(sent));
  pending.events.push_back(std::move(received));
  pending.held.push_back(x->src);
  pending.held.push_back(x->head);
  pending.held.push_back(x->state);
  pending.held.push_back(x->out);
  pending.held.push_back(x->head_out);
  if (kernels || x->landed) pending.held.push_back(x->words);
  return x;
}

bool headed_rows_ready(const HeadedGather& x) { return x.kernels || x.landed; }

const at::Tensor& headed_out(const HeadedGather& x) { return x.out; }
const at::Tensor& headed_head_out(const HeadedGather& x) { return x.head_out; }
const at::cuda::CUDAEvent* headed_sent_event(const HeadedGather& x) {
  return x.timed && x.finished ? &x.sent_timed : nullptr;
}
const at::cuda::CUDAEvent* headed_received_event(const HeadedGather& x) {
  return x.timed && x.finished ? &x.received_timed : nullptr;
}

void gather_headed_rows(HeadedGather& x, const at::Tensor& token, const at::Tensor& dst, int sm_count) {
  TORCH_CHECK(!x.finished, x.op, ": the headed gather was finished twice");
  TORCH_CHECK(headed_rows_ready(x), x.op,
              ": gather_headed_rows needs a headed gather started with kernels or landed words");
  TORCH_CHECK(token.scalar_type() == at::kLong && token.is_contiguous() && dst.is_contiguous() &&
                  dst.size(0) == token.size(0) && dst.numel() / std::max<int64_t>(dst.size(0), 1) ==
                  x.src.numel() / std::max<int64_t>(x.rows, 1),
              x.op, ": gather_headed_rows: token [n] int64 and dst [n, row] contiguous, rows as src's");
  const c10::cuda::CUDAGuard device_guard(x.src.device());
  const int all_sms = at::cuda::getCurrentDeviceProperties()->multiProcessorCount;
  const int sms = sm_count > 0 ? std::min(sm_count, all_sms) : all_sms;
  const uint64_t block = static_cast<uint64_t>(x.src.numel()) * x.src.element_size();
  check(x.op,
        moe_net::launch_gather_landed(
            x.view, reinterpret_cast<const uint64_t*>(x.state.data_ptr()),
            reinterpret_cast<const unsigned long long*>(x.words.data_ptr()), x.out.data_ptr(),
            x.rows, block, x.plan.piece, static_cast<uint32_t>(x.plan.pieces),
            token.data_ptr<int64_t>(), token.size(0), dst.data_ptr(),
            static_cast<int64_t>(x.row_bytes), sms, x.op_id,
            at::cuda::getCurrentCUDAStream().stream()),
        "gather landed rows", *x.group);
  x.finished = true;
}

void gather_headed_finish(HeadedGather& x, at::cuda::CUDAEvent& after,
                          const RowsLanded& on_rows) {
  TORCH_CHECK(!x.finished, x.op, ": the headed gather was finished twice");
  const c10::cuda::CUDAGuard device_guard(x.src.device());
  const int W = x.world, me = x.me;
  // The waits, unstages and DONE are queued (gather_headed_start). Here only the row hooks: on
  // a stream of their own, piece c's after the receive stream unstaged it (piece_unstaged[c])
  // and the first after `after` (the caller's layout). They read `out`, never the receive
  // area, so DONE does not wait for them.
  std::optional<at::cuda::CUDAStream> hooks;
  for (uint64_t c = 0; c < x.plan.pieces && on_rows; ++c) {
    if (x.plan.bytes(c) == 0) continue;
    const uint64_t r0 = c == 0 ? 0 : x.plan.rows_landed(c - 1, x.row_bytes);
    const uint64_t r1 = x.plan.rows_landed(c, x.row_bytes);
    if (r1 <= r0) continue;
    if (!hooks) {
      hooks.emplace(side_stream(x.src.device().index()));
      after.block(*hooks);
    }
    if (!x.piece_landed.empty()) {
      check(x.op, cudaStreamWaitEvent(hooks->stream(), x.piece_landed[c], 0), "piece landed", *x.group);
    } else {
      x.piece_unstaged[c].block(*hooks);
    }
    for (int j = 1; j < W; ++j) {
      on_rows((me + j) % W, static_cast<int64_t>(r0), static_cast<int64_t>(r1), hooks->stream());
    }
  }
  if (hooks) {
    at::cuda::CUDAEvent gathered;
    gathered.record(*hooks);
    pending.events.push_back(std::move(gathered));
  }
  x.finished = true;
}

namespace {
// MKERNEL_MOE_COMBINE_PIECES: at most this many pieces per block in the pipelined combine, 1 ..
// kPieces (the default): each piece costs four launches on the host (partials, push, arrival,
// sum), and the eager combine is issue-bound (session 19 call D: 2.03 ms eager vs 1.49 ms
// replayed from a graph; call E: 8 and 4 pieces 4-8 % slower than 16).
uint64_t combine_max_pieces(const char* op) {
  return env_count("MKERNEL_MOE_COMBINE_PIECES", op, 1, moe_net::kPieces, moe_net::kPieces);
}
}  // namespace

bool net_areas_on_device(const char* op, int64_t group, int64_t world_size, const at::Device& device) {
  const comm::SymmetricGroup& g = comm::SymmetricGroup::get(op, group, world_size, device);
  const comm::GroupDevice view = g.device_view();
  for (const void* area : {static_cast<const void*>(view.net.send_area), static_cast<const void*>(view.net.recv_area)}) {
    if (area == nullptr) return false;
    cudaPointerAttributes attr{};
    if (cudaPointerGetAttributes(&attr, area) != cudaSuccess) {
      cudaGetLastError();
      return false;
    }
    if (attr.type != cudaMemoryTypeDevice) return false;
  }
  return true;
}

namespace {
moe_net::SumType sum_type(at::ScalarType t) {
  return t == at::kBFloat16 ? moe_net::SumType::kBF16
         : t == at::kHalf   ? moe_net::SumType::kF16
                            : moe_net::SumType::kF32;
}
}  // namespace

at::Tensor reduce_nodes_pipelined(const char* op, int32_t op_id, int64_t group, int64_t world_size,
                                  const at::Device& device, int64_t rows, int64_t cols,
                                  at::ScalarType part_dtype, int64_t out_rows, at::ScalarType out_dtype,
                                  const ProduceRows& produce) {
  const c10::cuda::CUDAGuard device_guard(device);
  comm::SymmetricGroup& g = comm::SymmetricGroup::get(op, group, world_size, device);
  const int W = g.world(), me = g.rank();
  TORCH_CHECK(part_dtype == at::kFloat || part_dtype == out_dtype, op,
              ": the pipelined combine sums fp32 partials or partials in the output's dtype");
  TORCH_CHECK(out_rows >= 0 && out_rows <= rows, op, ": ", out_rows, " output rows of ", rows);
  const auto opts = at::TensorOptions().device(device);
  at::Tensor out = at::empty({out_rows, cols}, opts.dtype(out_dtype));
  const uint64_t row_bytes = static_cast<uint64_t>(cols) * at::elementSize(part_dtype);
  const uint64_t block = static_cast<uint64_t>(rows) * row_bytes;
  if (block == 0) return out;  // the same on every rank: all skip alike
  const uint64_t stride = align_up(block, kAlign);
  g.ensure_net(op, W * stride, W * stride);
  const comm::GroupDevice view = g.device_view();  // after ensure_net: the current path
  uint8_t* const send_area = view.net.send_area;
  uint8_t* const recv_area = view.net.recv_area;
  // Pieces of whole rows (a piece's partials are produced by one launch and pushed at once);
  // MKERNEL_MOE_COMBINE_PIECES caps their number (read at every call, every rank the same).
  const uint64_t pieces = std::min<uint64_t>(
      combine_max_pieces(op), std::max<uint64_t>(1, std::min<uint64_t>(block / kMinPiece, rows)));
  const int64_t piece_rows = (rows + static_cast<int64_t>(pieces) - 1) / static_cast<int64_t>(pieces);
  const int sms = at::cuda::getCurrentDeviceProperties()->multiProcessorCount;

  const at::cuda::CUDAStream main = at::cuda::getCurrentCUDAStream();
  const at::cuda::CUDAStream send = side_stream(device.index());
  const at::cuda::CUDAStream recv = side_stream(device.index());
  // Every kernel this exchange launches after its first spinning one is loaded now (a lazy load
  // may synchronize the context; see preload_sum_blocks). The partials' kernel is launched on the
  // send stream before its first wait.
  static std::once_flag loaded[3][3];
  std::call_once(loaded[static_cast<int>(sum_type(part_dtype))][static_cast<int>(sum_type(out_dtype))], [&] {
    check(op, moe_net::preload_sum_blocks(sum_type(part_dtype), sum_type(out_dtype)), "loading the sum kernel", g);
  });
  at::Tensor state = at::empty({2}, opts.dtype(at::kLong));
  at::Tensor own = at::empty({rows, cols}, opts.dtype(part_dtype));
  auto* st = reinterpret_cast<uint64_t*>(state.data_ptr());
  check(op, moe_net::launch_begin(view, st, op_id, main.stream()), "begin", g);
  at::cuda::CUDAEvent forked, sent, received;
  forked.record(main);
  forked.block(send);
  forked.block(recv);

  // Send: piece c's partials for every other rank written straight into the send area (no
  // stage copy), pushed once every other node's READY came (its receive area is free).
  for (uint64_t c = 0; c < pieces; ++c) {
    const int64_t r0 = static_cast<int64_t>(c) * piece_rows, r1 = std::min(rows, r0 + piece_rows);
    if (r1 <= r0) continue;
    for (int p = 0; p < W; ++p) {
      if (p != me) produce(p, r0, r1, send_area + p * stride + static_cast<uint64_t>(r0) * row_bytes, send.stream());
    }
    if (c == 0) check(op, moe_net::launch_wait(view, st, -1, moe_net::kReady, op_id, send.stream()), "ready", g);
    const uint64_t off = static_cast<uint64_t>(r0) * row_bytes, n = static_cast<uint64_t>(r1 - r0) * row_bytes;
    check(op,
          moe_net::launch_push(view, st, off, stride, me * stride + off, n,
                               moe_net::data_slot(me, static_cast<uint32_t>(c)), true, op_id, send.stream()),
          "push", g);
  }
  check(op, moe_net::launch_finish(view, st, op_id, send.stream()), "finish", g);
  sent.record(send);

  // Receive: this rank's own partials first (beside the link), then per piece every other
  // rank's arrival and the sum of that piece's output rows read straight from the receive area;
  // then DONE (every read of the receive area is done).
  produce(me, 0, rows, own.data_ptr(), recv.stream());
  for (uint64_t c = 0; c < pieces; ++c) {
    const int64_t r0 = static_cast<int64_t>(c) * piece_rows, r1 = std::min(rows, r0 + piece_rows);
    if (r1 <= r0) continue;
    for (int j = 1; j < W; ++j) {
      const int p = (me + j) % W;
      check(op,
            moe_net::launch_wait(view, st, p, moe_net::data_slot(p, static_cast<uint32_t>(c)), op_id,
                                 recv.stream()),
            "arrival", g);
    }
    const int64_t o1 = std::min(out_rows, r1);
    if (o1 > r0) {
      check(op,
            moe_net::launch_sum_blocks(recv_area, stride, own.data_ptr(), me, W, r0 * cols, (o1 - r0) * cols,
                                       sum_type(part_dtype), out.data_ptr(), sum_type(out_dtype), sms,
                                       recv.stream()),
            "sum", g);
    }
  }
  check(op, moe_net::launch_push(view, st, 0, 0, 0, 0, moe_net::kDone + me, false, op_id, recv.stream()),
        "done", g);
  received.record(recv);
  pending.events.push_back(std::move(sent));
  pending.events.push_back(std::move(received));
  pending.held.push_back(state);
  pending.held.push_back(own);
  pending.held.push_back(out);
  exchange_join();
  return out;
}

namespace {

// mkernel._moe_exchange (benchmarks and tests): the exchange alone, for a group whose every
// rank is alone on its node (whatever MKERNEL_MOE_NODES_PATH says).
at::Tensor exchange_op(const at::Tensor& src, bool all_to_all, int64_t group, int64_t world_size) {
  constexpr const char* kOp = "mkernel._moe_exchange";
  TORCH_CHECK_VALUE(src.is_cuda() && src.dim() >= 1, kOp, ": src must be a CUDA tensor of rank >= 1");
  const comm::SymmetricGroup& g = comm::SymmetricGroup::get(kOp, group, world_size, src.device());
  TORCH_CHECK_VALUE(g.nodes() == g.world() && g.world() > 1, kOp,
                    ": the exchange needs every rank of the group alone on its node (group has ",
                    g.world(), " ranks on ", g.nodes(), " nodes)");
  return exchange_nodes(kOp, all_to_all ? comm::kOpMoeCombine : comm::kOpMoeDispatch, src,
                        all_to_all, group, world_size);
}

}  // namespace

TORCH_LIBRARY_FRAGMENT(mkernel, m) {
  m.def("_moe_exchange(Tensor src, bool all_to_all, int group, int world_size) -> Tensor");
}
TORCH_LIBRARY_IMPL(mkernel, CUDA, m) { m.impl("_moe_exchange", &exchange_op); }

}  // namespace moe
}  // namespace mkernel

#endif  // MKERNEL_WITH_CUDA
