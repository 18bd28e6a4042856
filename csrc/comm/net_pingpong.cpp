// torch.ops.mkernel._net_pingpong(group, iters, data_bytes, rounds, bulk_rounds, net): the GPU-driven
// inter-node path's self-test and latency probe (kernels/comm/net_pingpong.cu) between rank r
// and rank r ^ 1 of `group`, which must be on different (emulated) nodes. Opens a NetPath of
// its own (collective; every rank counts as a node of its own here, so the pairs connect
// whatever the emulated split), runs the kernel on the current stream, waits for it, drains
// and closes the path. MKERNEL_OP_TIMEOUT (seconds, default 60) bounds every wait. regrow: run
// the kernel, grow the path (NetPath::ensure: a collective re-creation), run it again.
// stop_after >= 0 (fault test, on one rank): that rank's kernel stops after so many ping-pongs;
// its peer's kernel must time out (MKERNEL_OP_TIMEOUT) and this op raise naming the rank. Returns an int64 CPU tensor:
//   [0] 16-byte words that arrived wrong (0 = intact), [1] [2] %globaltimer at the start and end
//   of the data phase, [3] 1 when the buffers were GPU memory registered with the NIC (0: host
//   staging), [4] [5] the bulk phase's stamps (initiator), then per iteration i: [6 + 2i]
//   [7 + 2i] the stamps of net_pingpong_api.h.
// A failed wait raises with the kernel's WaitDiagnostic (what, peer, slot, expected / seen).
#ifdef MKERNEL_WITH_CUDA

#include <ATen/ATen.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>
#include <cuda_runtime.h>
#include <torch/library.h>

#include <cstdlib>
#include <cstring>
#include <sstream>

#include "comm/net_path.h"
#include "core_binding.h"
#include "env_knobs.h"
#include "kernels/comm/net_pingpong_api.h"
#include "kernels/comm/wait_diagnostic.h"

namespace mkernel::comm {
namespace {

constexpr const char* kOp = "mkernel._net_pingpong";

double timeout_seconds() {
  const char* v = env::get("MKERNEL_OP_TIMEOUT");
  if (v == nullptr || *v == '\0') return 60.0;
  char* end = nullptr;
  const double s = std::strtod(v, &end);
  TORCH_CHECK_VALUE(end != v && *end == '\0' && s > 0, "MKERNEL_OP_TIMEOUT must be a positive number of seconds, got \"",
                    v, "\"");
  return s;
}

const char* wait_kind(int32_t what) {
  switch (what) {
    case kWaitFifoCredit:
      return "FIFO credit (the proxy consumed nothing)";
    case kWaitFifoFailed:
      return "the proxy, which failed";
    case kWaitNetArrival:
      return "inter-node data";
    default:
      return "a flag";
  }
}

// Host-mapped WaitDiagnostic of the kernel (RAII).
class MappedDiagnostic {
 public:
  MappedDiagnostic() {
    TORCH_CHECK(cudaHostAlloc(reinterpret_cast<void**>(&host_), sizeof(WaitDiagnostic), cudaHostAllocMapped) ==
                    cudaSuccess,
                kOp, ": cudaHostAlloc of the wait diagnostic failed");
    std::memset(host_, 0, sizeof(WaitDiagnostic));
    TORCH_CHECK(cudaHostGetDevicePointer(reinterpret_cast<void**>(&dev_), host_, 0) == cudaSuccess, kOp,
                ": cudaHostGetDevicePointer failed");
  }
  ~MappedDiagnostic() { cudaFreeHost(host_); }
  WaitDiagnostic* device() const { return dev_; }
  std::string text() const {
    const volatile WaitDiagnostic& d = *host_;
    if (d.valid == 0) return "no wait recorded a failure";
    std::ostringstream os;
    os << "rank " << d.rank << " waited " << d.elapsed_ns / 1e6 << " ms for " << wait_kind(d.what) << " from peer "
       << d.peer << " (slot " << d.flag_index << ", want >= " << d.expected << ", saw " << d.seen << ", block "
       << d.block_x << " thread " << d.thread << ")";
    return os.str();
  }

 private:
  WaitDiagnostic* host_ = nullptr;
  WaitDiagnostic* dev_ = nullptr;
};

at::Tensor net_pingpong(int64_t group, int64_t iters, int64_t data_bytes, int64_t rounds, int64_t bulk_rounds,
                       c10::string_view net, bool regrow, int64_t stop_after) {
  TORCH_CHECK(core_bound(), kOp, ": the mkernel core is not loaded: import mkernel and call mkernel.init()");
  TORCH_CHECK_VALUE(iters >= 0 && rounds >= 0 && bulk_rounds >= 0 && data_bytes >= 0 && data_bytes % 16 == 0,
                    kOp, ": iters, rounds, bulk_rounds >= 0 and data_bytes a multiple of 16 >= 0, got ", iters,
                    ", ", rounds, ", ", bulk_rounds, ", ", data_bytes);
  const mk_api_v1& api = core_api();
  const mk_session_t s = static_cast<mk_session_t>(group);
  int32_t rank = -1, world = 0;
  check_core(api.session_rank(s, &rank, &world), "session_rank");
  TORCH_CHECK_VALUE(world % 2 == 0, kOp, ": needs an even number of ranks (pairs r, r ^ 1), group ", group, " has ",
                    world);
  const double timeout_s = timeout_seconds();
  const int64_t timeout_ms = static_cast<int64_t>(timeout_s * 1000);
  const int peer = rank ^ 1;
  NetPathConfig cfg;
  cudaGetDevice(&cfg.device);
  for (int r = 0; r < world; ++r) cfg.node.push_back(r);
  cfg.send_bytes = cfg.recv_bytes = std::max<int64_t>(data_bytes, 4096);
  cfg.arrival_slots = 4096;
  cfg.timeout_ms = timeout_ms;
  cfg.net = std::string(net);
  cfg.gpu_direct = false;  // the probe's kernels run the staged protocol (and it sets no rank)
  NetPath path(kOp, s, cfg);

  const at::Device device(at::kCUDA, static_cast<c10::DeviceIndex>(cfg.device));
  const auto i64 = at::TensorOptions().dtype(at::kLong).device(device);
  at::Tensor times = at::zeros({std::max<int64_t>(1, 2 * iters)}, i64);
  at::Tensor misc = at::zeros({5}, i64);  // mismatches, data start, data end, bulk start, bulk end
  MappedDiagnostic diag;

  NetPingPongParams p;
  p.g.rank = rank;
  p.g.world = world;
  p.g.diag = diag.device();
  p.g.timeout_ns = static_cast<uint64_t>(timeout_s * 1e9);
  p.g.group_id = static_cast<int32_t>(group);
  p.g.net = path.view();
  p.peer = peer;
  p.initiator = rank < peer;
  p.iters = static_cast<int>(iters);
  p.seq_base = 0;  // a fresh path: its flags start at 0
  p.times = reinterpret_cast<uint64_t*>(times.data_ptr<int64_t>());
  p.data_bytes = static_cast<uint64_t>(data_bytes);
  p.chunk_bytes = 1 << 20;
  p.rounds = data_bytes > 0 ? static_cast<int>(rounds) : 0;
  p.mismatches = reinterpret_cast<unsigned long long*>(misc.data_ptr<int64_t>());
  p.data_ns = reinterpret_cast<uint64_t*>(misc.data_ptr<int64_t>() + 1);
  p.bulk_rounds = data_bytes > 0 ? static_cast<int>(bulk_rounds) : 0;
  p.bulk_ns = reinterpret_cast<uint64_t*>(misc.data_ptr<int64_t>() + 3);
  p.stop_after = static_cast<int>(std::max<int64_t>(-1, stop_after));

  const cudaStream_t stream = at::cuda::getCurrentCUDAStream(cfg.device).stream();
  auto run = [&] {
    cudaError_t e = launch_net_pingpong(p, stream);
    if (e == cudaSuccess) e = cudaStreamSynchronize(stream);
    TORCH_CHECK(e == cudaSuccess, kOp, ": rank ", rank, ": the kernel failed (", cudaGetErrorString(e),
                "): ", diag.text(), "; data path: ", path.failure().empty() ? "healthy" : path.failure(),
                "; proxy: ", path.stats());
    const std::string d = path.drain(timeout_ms);
    TORCH_CHECK(d.empty(), kOp, ": rank ", rank, ": ", d);
    // The peer's last commands to us finished too before either side changes or closes its path.
    check_core(api.session_barrier(s, timeout_ms), "session_barrier (after the ping-pong kernel)");
  };
  run();
  if (regrow) {
    // Growth re-creates the path (collective): a new FIFO, ticket counter and flags (from 0).
    const uint64_t bigger = 2 * path.view().recv_bytes;
    path.ensure(kOp, bigger, bigger);
    TORCH_CHECK(path.view().send_bytes >= bigger && path.view().recv_bytes >= bigger, kOp,
                ": ensure did not grow the path");
    p.g.net = path.view();
    run();  // mismatches accumulate over both runs; the stamps are the second run's
  }

  at::Tensor out = at::empty({6 + 2 * iters}, at::TensorOptions().dtype(at::kLong));
  const at::Tensor m = misc.cpu();
  out.slice(0, 0, 3).copy_(m.slice(0, 0, 3));
  out[3] = path.gpu_memory() ? 1 : 0;
  out.slice(0, 4, 6).copy_(m.slice(0, 3, 5));
  if (iters > 0) out.slice(0, 6).copy_(times.slice(0, 0, 2 * iters).cpu());
  return out;
}

}  // namespace

TORCH_LIBRARY_FRAGMENT(mkernel, m) {
  m.def(
      "_net_pingpong(int group, int iters, int data_bytes, int rounds, int bulk_rounds=0, "
      "str net=\"loopback\", bool regrow=False, int stop_after=-1) -> Tensor");
}

TORCH_LIBRARY_IMPL(mkernel, CompositeExplicitAutograd, m) { m.impl("_net_pingpong", &net_pingpong); }

}  // namespace mkernel::comm

#endif  // MKERNEL_WITH_CUDA
