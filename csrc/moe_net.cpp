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
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "comm/symmetric_group.h"
#include "env_knobs.h"
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

bool env_flag(const char* name, bool unset) {
  const char* v = env::get(name);
  if (v == nullptr || *v == '\0') return unset;
  const std::string m(v);
  TORCH_CHECK_VALUE(m == "0" || m == "1", name, " must be 0 or 1 (or unset), got \"", m, "\"");
  return m == "1";
}

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
    const char* v = env::get("MKERNEL_MOE_NODES_PATH");
    const std::string m = v == nullptr ? "" : v;
    TORCH_CHECK_VALUE(m.empty() || m == "substrate" || m == "ce",
                      "MKERNEL_MOE_NODES_PATH must be \"substrate\" or \"ce\" (or unset), got \"", m, "\"");
    return m == "substrate" ? 0 : m == "ce" ? 2 : 1;
  }();
  static const bool emulated = env::get("MKERNEL_EMULATED_NODE") != nullptr;
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
  // Launched on the caller's stream at the join, before it waits for the events (the headed
  // gather's finish under MKERNEL_MOE_FINISH_AT_JOIN=1).
  std::vector<std::function<void(cudaStream_t)>> at_join;
};
thread_local Pending pending;

// MKERNEL_MOE_FINISH_AT_JOIN (session 21; read at every call, every rank the same; unset or "1":
// on, "0": off): the headed gather's finish (a one-CTA kernel spinning until the transport is done
// with every push and every peer's DONE came, ~the whole exchange) runs on the caller's stream at
// the join instead of ending the send stream. Session 18's reading of the eager dispatch's phases
// was that the caller's stream woke exactly when the send stream's finish ended ("routing ~ sent"
// in every run), its layout kernels queued in the finish's hardware queue behind the spin; with the
// finish at the join the layout mark moved from ~1.43 to ~0.6-0.7 ms (session 21 call E).
bool finish_at_join() {
  return env_flag("MKERNEL_MOE_FINISH_AT_JOIN", true);
}

// MKERNEL_MOE_HOOKS_ON_CALLER (session 21; read at every call, every rank the same; unset or "1":
// on, "0": off): gather_headed_finish's per-piece row gathers run on the caller's stream instead
// of a pool stream, which may share a hardware queue with the receive stream's spinning arrival
// waits. With the finish at the join, mode 1's eager dispatch went from 1.59-1.66 ms to
// 1.38-1.45 (0.81-0.85x the link; session 21 call F).
bool hooks_on_caller() {
  return env_flag("MKERNEL_MOE_HOOKS_ON_CALLER", true);
}

}  // namespace

void exchange_join() {
  const at::cuda::CUDAStream main = at::cuda::getCurrentCUDAStream();
  std::vector<std::function<void(cudaStream_t)>> at_join;
  at_join.swap(pending.at_join);
  for (auto& launch : at_join) launch(main.stream());
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
  const char* v = env::get(name);
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
  int64_t rows = 0;  // rows per rank (src's)
  at::Tensor src, head, out, head_out, state;
  at::cuda::CUDAStream recv;
  // One per piece, recorded on the receive stream after that piece's unstages (moe12): the
  // row hooks wait for these on their own stream, never the receive stream for the host.
  std::vector<at::cuda::CUDAEvent> piece_unstaged;
  bool timed = false;
  at::cuda::CUDAEvent sent_timed{cudaEventDefault}, received_timed{cudaEventDefault};
  bool finished = false;
  explicit HeadedGather(at::cuda::CUDAStream r) : recv(r) {}
};

std::shared_ptr<HeadedGather> gather_headed_start(const char* op, int32_t op_id,
                                                  const at::Tensor& src, const at::Tensor& head,
                                                  int64_t group, int64_t world_size, bool timed) {
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
  // The head takes data slot 0 of its source, the pieces slots 1 .. (moe_net_plan.h).
  x->plan = moe_net::plan_pieces(block, headed_max_pieces(op));
  x->lay = moe_net::headed_layout(block, head_bytes);
  std::vector<int64_t> shape(s.sizes().begin(), s.sizes().end());
  shape[0] = W * s.size(0);
  x->out = at::empty(shape, s.options());
  std::vector<int64_t> hshape(h.sizes().begin(), h.sizes().end());
  hshape[0] = W * h.size(0);
  x->head_out = at::empty(hshape, h.options());
  g.ensure_net(op, x->lay.send_bytes(W), x->lay.recv_bytes(W));
  x->view = g.device_view();  // after ensure_net: the current path
  uint8_t* const send_area = x->view.net.send_area;
  uint8_t* const recv_area = x->view.net.recv_area;
  auto* hres = static_cast<uint8_t*>(x->head_out.data_ptr());
  auto* res = static_cast<uint8_t*>(x->out.data_ptr());
  const auto* in = static_cast<const uint8_t*>(s.data_ptr());

  x->state = at::empty({2}, s.options().dtype(at::kLong));
  auto* st = reinterpret_cast<uint64_t*>(x->state.data_ptr());
  check(op, moe_net::launch_begin(x->view, st, op_id, main.stream()), "begin", g);
  at::cuda::CUDAEvent forked, head_ready;
  forked.record(main);
  forked.block(send);
  forked.block(x->recv);
  // This rank's head (small) on the caller's stream, beside the send.
  check(op,
        cudaMemcpyAsync(hres + me * head_bytes, h.data_ptr(), head_bytes, cudaMemcpyDeviceToDevice,
                        main.stream()),
        "own head", g);

  // Send: every other node's READY, the head, then src's pieces.
  check(op, moe_net::launch_wait(x->view, st, -1, moe_net::kReady, op_id, send.stream()), "ready", g);
  check(op,
        cudaMemcpyAsync(send_area + x->lay.send_head_off(), h.data_ptr(), head_bytes,
                        cudaMemcpyDefault, send.stream()),
        "stage head", g);
  check(op,
        moe_net::launch_push(x->view, st, x->lay.send_head_off(), 0, x->lay.recv_head_off(me, W),
                             head_bytes, moe_net::data_slot(me, 0), true, op_id, send.stream()),
        "push head", g);
  for (uint64_t c = 0; c < x->plan.pieces; ++c) {
    const uint64_t off = x->plan.offset(c), n = x->plan.bytes(c);
    if (n == 0) continue;
    check(op, cudaMemcpyAsync(send_area + off, in + off, n, cudaMemcpyDefault, send.stream()),
          "stage", g);
    check(op,
          moe_net::launch_push(x->view, st, off, 0, x->lay.recv_block_off(me) + off, n,
                               moe_net::data_slot(me, static_cast<uint32_t>(1 + c)), true, op_id,
                               send.stream()),
          "push", g);
  }
  // The finish: the transport done with every push, then every peer's DONE (session 19: this
  // order passed on the GPU with every stream in one hardware queue, CUDA_DEVICE_MAX_CONNECTIONS=1).
  // MKERNEL_MOE_FINISH_AT_JOIN (the default, session 21): on the caller's stream at the join.
  if (finish_at_join()) {
    const comm::GroupDevice view = x->view;
    comm::SymmetricGroup* gp = &g;
    pending.at_join.push_back([view, st, op, op_id, gp](cudaStream_t s) {
      check(op, moe_net::launch_finish(view, st, op_id, s), "finish", *gp);
    });
  } else {
    check(op, moe_net::launch_finish(x->view, st, op_id, send.stream()), "finish", g);
  }
  at::cuda::CUDAEvent sent;
  sent.record(send);
  if (timed) x->sent_timed.record(send);

  // Receive: every other rank's head, then the caller's stream waits for them.
  for (int j = 1; j < W; ++j) {
    const int p = (me + j) % W;
    check(op,
          moe_net::launch_wait(x->view, st, p, moe_net::data_slot(p, 0), op_id, x->recv.stream()),
          "head arrival", g);
    check(op,
          cudaMemcpyAsync(hres + p * head_bytes, recv_area + x->lay.recv_head_off(p, W), head_bytes,
                          cudaMemcpyDefault, x->recv.stream()),
          "unstage head", g);
  }
  head_ready.record(x->recv);
  head_ready.block(main);

  // Then every piece of every other rank (arrival wait, unstage into out) and DONE, queued
  // here, before this returns (moe12). The send stream's finish spins until every peer's DONE,
  // and a peer's DONE used to be queued only by its gather_headed_finish, i.e. after its host
  // had derived the layout: any host call in between that waits for the device (a lazily
  // loaded kernel's first launch may synchronize the context, CUDA's "Lazy Loading" hazards;
  // cudaFree; a sync) then waited for this rank's finish, which waited for the peer's host,
  // stuck the same way: both ranks stopped at DONE (s13run2 / s14run1, matrix case 2, the
  // group's first headed call with shapes whose ATen kernels had not run yet: NOTES "MoE,
  // moe12"). Now nothing on the send or receive stream waits for this host again; the row
  // hooks run on a stream of their own in gather_headed_finish, after piece_unstaged[c].
  x->piece_unstaged.reserve(x->plan.pieces);
  for (uint64_t c = 0; c < x->plan.pieces; ++c) {
    const uint64_t off = x->plan.offset(c), n = x->plan.bytes(c);
    for (int j = 1; j < W && n > 0; ++j) {
      const int p = (me + j) % W;
      check(op,
            moe_net::launch_wait(x->view, st, p, moe_net::data_slot(p, static_cast<uint32_t>(1 + c)),
                                 op_id, x->recv.stream()),
            "arrival", g);
      check(op,
            cudaMemcpyAsync(res + p * block + off, recv_area + x->lay.recv_block_off(p) + off, n,
                            cudaMemcpyDefault, x->recv.stream()),
            "unstage", g);
    }
    x->piece_unstaged.emplace_back();
    x->piece_unstaged.back().record(x->recv);
  }
  check(op,
        moe_net::launch_push(x->view, st, 0, 0, 0, 0, moe_net::kDone + me, false, op_id,
                             x->recv.stream()),
        "done", g);
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
  return x;
}

const at::Tensor& headed_out(const HeadedGather& x) { return x.out; }
const at::Tensor& headed_head_out(const HeadedGather& x) { return x.head_out; }
const at::cuda::CUDAEvent* headed_sent_event(const HeadedGather& x) {
  return x.timed && x.finished ? &x.sent_timed : nullptr;
}
const at::cuda::CUDAEvent* headed_received_event(const HeadedGather& x) {
  return x.timed && x.finished ? &x.received_timed : nullptr;
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
  // MKERNEL_MOE_HOOKS_ON_CALLER (the default, session 21): on the caller's stream itself (already
  // after `after`), never on a pool stream that may share a hardware queue with the receive stream's
  // spinning waits.
  const bool on_caller = hooks_on_caller();
  std::optional<at::cuda::CUDAStream> hooks;
  for (uint64_t c = 0; c < x.plan.pieces && on_rows; ++c) {
    if (x.plan.bytes(c) == 0) continue;
    const uint64_t r0 = c == 0 ? 0 : x.plan.rows_landed(c - 1, x.row_bytes);
    const uint64_t r1 = x.plan.rows_landed(c, x.row_bytes);
    if (r1 <= r0) continue;
    if (!hooks) {
      hooks.emplace(on_caller ? at::cuda::getCurrentCUDAStream() : side_stream(x.src.device().index()));
      if (!on_caller) after.block(*hooks);
    }
    x.piece_unstaged[c].block(*hooks);
    for (int j = 1; j < W; ++j) {
      on_rows((me + j) % W, static_cast<int64_t>(r0), static_cast<int64_t>(r1), hooks->stream());
    }
  }
  if (hooks && !on_caller) {
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
