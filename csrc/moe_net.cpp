// The MoE's own inter-node exchange (see moe_net.h; protocol kernels/moe/moe_net_api.h).
#ifdef MKERNEL_WITH_CUDA

#include "moe_net.h"

#include <ATen/cuda/CUDAContext.h>
#include <ATen/cuda/CUDAEvent.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/library.h>

#include <algorithm>
#include <cstdlib>
#include <string>
#include <vector>

#include "comm/symmetric_group.h"
#include "kernels/comm/wait_diagnostic.h"
#include "kernels/moe/moe_net_api.h"

namespace mkernel {
namespace moe {
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
                          int64_t group, int64_t world_size, bool join) {
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
  const at::cuda::CUDAStream send = at::cuda::getStreamFromPool(false, src.device().index());
  const at::cuda::CUDAStream recv = at::cuda::getStreamFromPool(false, src.device().index());
  at::Tensor state = at::empty({2}, s.options().dtype(at::kLong));
  auto* st = reinterpret_cast<uint64_t*>(state.data_ptr());
  check(op, moe_net::launch_begin(view, st, op_id, main.stream()), "begin", g);
  // This rank's own block: a device copy on the caller's stream.
  check(op,
        cudaMemcpyAsync(res + me * block, in + (all_to_all ? me * block : 0), block,
                        cudaMemcpyDeviceToDevice, main.stream()),
        "own block", g);
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
