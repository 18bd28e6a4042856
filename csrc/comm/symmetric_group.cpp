// Host side of the GPU communication substrate (see symmetric_group.h).
//
// Memory of one SymmetricGroup (one per group handle and CUDA device):
//   - generations: a generation is this rank's [flags | data] allocation (cudaMalloc, flags
//     zeroed before its IPC handle is published) and its mappings of the same-node peers'
//     allocations of the same generation. ensure() makes a new, larger generation on every
//     rank; the old ones stay mapped until the group is released, so a CUDA graph captured
//     before a growth still finds its buffers when replayed (all ranks replay the same graph,
//     so they keep using the same, older, generation together). Flags of a new generation
//     start at 0 and the op counter is never reset: every flag stays below the next call
//     number, in every generation.
//   - counters: the op counter (epoch) and the CTA exit ticket (device memory, zeroed).
//   - the process's host-mapped WaitDiagnostic (comm/wait_record.h).
#ifdef MKERNEL_WITH_CUDA

#include "comm/symmetric_group.h"

#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/util/Exception.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <mutex>
#include <utility>
#include <vector>

#include "comm/device_alloc.h"
#include "comm/wait_record.h"
#include "core_binding.h"
#include "session_layout.h"

// The inter-node path (comm/net_path.h) where the tree has it.
#if __has_include("comm/net_path.h")
#include "comm/net_path.h"
#define MKERNEL_HAS_NET_PATH 1
#else
#define MKERNEL_HAS_NET_PATH 0
#endif

namespace mkernel::comm {
namespace {

constexpr uint64_t kFlagBytes = static_cast<uint64_t>(kFlagWords) * sizeof(uint64_t);
constexpr uint64_t kMinDataBytes = 1ull << 20;
constexpr uint32_t kBlobMagic = 0x4d4b5347u;  // "MKSG"

void check_cuda(cudaError_t err, const char* op, const char* what) {
  if (err == cudaSuccess) return;
  cudaGetLastError();  // clear a non-sticky error
  const std::string wait = last_wait_failure();
  TORCH_CHECK(false, op, ": ", what, " failed: ", cudaGetErrorString(err),
              wait.empty() ? std::string() : "; an earlier kernel failed: " + wait);
}

// Inter-node areas after a growth: the next power of two (from 1 MiB).
uint64_t net_growth(uint64_t v) {
  uint64_t c = 1ull << 20;
  while (c < v) c <<= 1;
  return c;
}

uint64_t next_pow2(uint64_t v) {
  uint64_t c = kMinDataBytes;
  while (c < v) c <<= 1;
  return c;
}

// cudaMalloc'd memory, freed with its owner (errors ignored: at release the context may be
// dead after a trapped kernel).
struct DeviceMemory {
  DeviceMemory() = default;
  DeviceMemory(const DeviceMemory&) = delete;
  DeviceMemory& operator=(const DeviceMemory&) = delete;
  ~DeviceMemory() {
    if (ptr != nullptr && cudaFree(ptr) != cudaSuccess) cudaGetLastError();
  }
  void* ptr = nullptr;
};

// A peer allocation opened through CUDA IPC, closed with its owner.
struct PeerMapping {
  PeerMapping() = default;
  PeerMapping(const PeerMapping&) = delete;
  PeerMapping& operator=(const PeerMapping&) = delete;
  ~PeerMapping() {
    if (ptr != nullptr && cudaIpcCloseMemHandle(ptr) != cudaSuccess) cudaGetLastError();
  }
  void* ptr = nullptr;
};

// What a rank publishes about one generation.
struct Blob {
  uint32_t magic;
  int32_t device;
  int32_t pid;
  int32_t pad;
  uint64_t data_bytes;
  cudaIpcMemHandle_t handle;
};

struct Generation {
  uint64_t data_bytes = 0;
  DeviceMemory own;
  std::vector<std::unique_ptr<PeerMapping>> peers;  // by rank; null: own rank or another node
  std::vector<uint8_t*> base;                       // every rank's allocation or nullptr
};

}  // namespace

struct SymmetricGroup::Impl {
  int64_t handle = 0;
  int device = 0;
  double timeout_s = 60.0;
  std::vector<int> node;
  bool one_host = false;  // every rank on this host: its nodes are emulated
  DeviceMemory counters;  // [epoch u64][exit ticket u32]
  std::unique_ptr<Generation> current;
  std::vector<std::unique_ptr<Generation>> retired;
#if MKERNEL_HAS_NET_PATH
  // Groups spanning several nodes: the current inter-node path, and the ones it replaced when a
  // call needed larger areas (kept open until the group is released, like the retired
  // generations: a CUDA graph captured before the growth pushes into the path it captured).
  // Declared last: destroyed first.
  std::vector<std::unique_ptr<NetPath>> retired_net;
  std::unique_ptr<NetPath> net;
#endif
};

namespace {

// The registry: (group handle, device index) -> group. Leaked on purpose, like the host
// backend's: nothing may call into Go or CUDA from static destructors at process exit
// (mkernel.shutdown() releases the groups before that).
struct Registry {
  std::mutex mu;
  std::map<std::pair<int64_t, int>, std::unique_ptr<SymmetricGroup>> groups;
};
Registry& registry() {
  static Registry* r = new Registry();
  return *r;
}

// A collective: allocates this rank's generation of `data_bytes`, zeroes its flags, publishes
// its IPC handle and opens the same-node peers'.
std::unique_ptr<Generation> make_generation(const char* op, const SymmetricGroup::Impl& impl,
                                            int rank, int world, uint64_t data_bytes) {
  auto gen = std::make_unique<Generation>();
  gen->data_bytes = data_bytes;
  check_cuda(
      malloc_after_torch_cache(&gen->own.ptr, kFlagBytes + data_bytes), op,
      ("cudaMalloc of the group's symmetric memory (" + std::to_string(data_bytes) + " data bytes)")
          .c_str());
  check_cuda(cudaMemset(gen->own.ptr, 0, kFlagBytes), op, "zeroing the flags");
  // Peers write into the flags as soon as they hold the handle: zeroed before it is published.
  check_cuda(cudaDeviceSynchronize(), op, "cudaDeviceSynchronize");
  Blob mine{};
  mine.magic = kBlobMagic;
  mine.device = impl.device;
  mine.pid = static_cast<int32_t>(getpid());
  mine.data_bytes = data_bytes;
  check_cuda(cudaIpcGetMemHandle(&mine.handle, gen->own.ptr), op, "cudaIpcGetMemHandle");
  const std::vector<std::string> blobs = session_allgather_blobs(
      op, static_cast<mk_session_t>(impl.handle),
      std::string(reinterpret_cast<const char*>(&mine), sizeof mine), impl.timeout_s,
      "the symmetric memory handles");
  gen->peers.resize(world);
  gen->base.assign(world, nullptr);
  for (int r = 0; r < world; ++r) {
    Blob b{};
    TORCH_CHECK(blobs[r].size() == sizeof b, op, ": rank ", r,
                " sent a malformed symmetric-memory record (", blobs[r].size(), " bytes)");
    std::memcpy(&b, blobs[r].data(), sizeof b);
    TORCH_CHECK(b.magic == kBlobMagic, op, ": rank ", r,
                " sent a malformed symmetric-memory record");
    TORCH_CHECK(b.data_bytes == data_bytes, op, ": rank ", r, " sized its symmetric memory to ",
                b.data_bytes, " bytes, this rank (", rank, ") to ", data_bytes,
                ": the ranks called the group's ops with different sizes");
    if (r == rank) {
      gen->base[r] = static_cast<uint8_t*>(gen->own.ptr);
      continue;
    }
    if (impl.node[r] != impl.node[rank]) continue;
    auto m = std::make_unique<PeerMapping>();
    const cudaError_t err =
        cudaIpcOpenMemHandle(&m->ptr, b.handle, cudaIpcMemLazyEnablePeerAccess);
    if (err != cudaSuccess) {
      cudaGetLastError();
      TORCH_CHECK(false, op, ": cannot map rank ", r, "'s symmetric memory (pid ", b.pid,
                  ", device ", b.device, ") into rank ", rank, " (device ", impl.device,
                  ") through CUDA IPC: ", cudaGetErrorString(err),
                  " (same-node ranks need peer access between their GPUs, or MPS when they "
                  "share one, and a shared PID namespace)");
    }
    gen->base[r] = static_cast<uint8_t*>(m->ptr);
    gen->peers[r] = std::move(m);
  }
  return gen;
}

}  // namespace

SymmetricGroup* SymmetricGroup::find(int64_t group, int device) {
  Registry& reg = registry();
  std::lock_guard<std::mutex> guard(reg.mu);
  auto it = reg.groups.find({group, device});
  return it == reg.groups.end() ? nullptr : it->second.get();
}

std::string SymmetricGroup::layout_text() const {
  std::string out = "nodes ";
  for (size_t r = 0; r < impl_->node.size(); ++r) {
    out += (r > 0 ? "," : "") + std::to_string(impl_->node[r]);
  }
  return out;
}

SymmetricGroup& SymmetricGroup::get(const char* op, int64_t group, int64_t world_size,
                                    const at::Device& device) {
  TORCH_CHECK(device.is_cuda(), op, ": symmetric memory lives on a CUDA device, got ", device);
  const int index = device.index() >= 0 ? device.index() : c10::cuda::current_device();
  Registry& reg = registry();
  std::lock_guard<std::mutex> guard(reg.mu);
  auto it = reg.groups.find({group, index});
  if (it != reg.groups.end()) {
    TORCH_CHECK_VALUE(it->second->world() == world_size, op, ": world_size is ", world_size,
                      " but group ", group, " has ", it->second->world(), " ranks");
    return *it->second;
  }
  const c10::cuda::CUDAGuard device_guard(index);
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  check_cuda(cudaStreamIsCapturing(at::cuda::getCurrentCUDAStream(), &capture), op,
             "cudaStreamIsCapturing");
  TORCH_CHECK(capture == cudaStreamCaptureStatusNone, op, ": group ", group,
              " has no symmetric memory on cuda:", index,
              " yet, and it cannot be created during CUDA-graph capture: call ctx.reserve(nbytes) "
              "(Context.reserve) on every rank before capturing, or run the op once eagerly");
  const SessionLayout layout = session_layout(op, group, world_size);
  TORCH_CHECK_VALUE(layout.world <= kMaxRanks, op, ": group ", group, " has ", layout.world,
                    " ranks; the GPU substrate holds at most ", kMaxRanks);
  std::unique_ptr<SymmetricGroup> g(new SymmetricGroup());
  g->impl_ = std::make_unique<Impl>();
  Impl& impl = *g->impl_;
  impl.handle = group;
  impl.device = index;
  impl.timeout_s = layout.timeout_s;
  impl.node = layout.node;
  impl.one_host = layout.hosts == 1;
  g->nodes_ = layout.nodes;
  check_cuda(cudaMalloc(&impl.counters.ptr, 64), op, "cudaMalloc of the op counter");
  check_cuda(cudaMemset(impl.counters.ptr, 0, 64), op, "zeroing the op counter");
  impl.current = make_generation(op, impl, layout.rank, layout.world, kMinDataBytes);

  GroupDevice& v = g->view_;
  v.rank = layout.rank;
  v.world = layout.world;
  int local = 0;
  for (int r = 0; r < layout.world; ++r) {
    v.node_of[r] = layout.node[r];
    local += layout.node[r] == layout.node[layout.rank] ? 1 : 0;
  }
  v.local_ranks = local;
  v.epoch = static_cast<uint64_t*>(impl.counters.ptr);
  v.exit_ticket = reinterpret_cast<uint32_t*>(static_cast<uint8_t*>(impl.counters.ptr) + 8);
  v.diag = process_wait_diagnostic();
  v.timeout_ns = static_cast<uint64_t>(layout.timeout_s * 1e9);
  v.group_id = static_cast<int32_t>(group);
  g->publish();
  SymmetricGroup& ref = *g;
  reg.groups.emplace(std::make_pair(group, index), std::move(g));
  return ref;
}

void SymmetricGroup::publish() {
  const Generation& gen = *impl_->current;
  for (int r = 0; r < view_.world; ++r) {
    uint8_t* base = gen.base[r];
    view_.flags[r] = base != nullptr ? reinterpret_cast<uint64_t*>(base) : nullptr;
    view_.data[r] = base != nullptr ? base + kFlagBytes : nullptr;
  }
  view_.data_bytes = gen.data_bytes;
}

void SymmetricGroup::ensure(const char* op, uint64_t data_bytes) {
  if (data_bytes <= view_.data_bytes) return;
  const uint64_t grown = next_pow2(data_bytes);
  const c10::cuda::CUDAGuard device_guard(impl_->device);
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  check_cuda(cudaStreamIsCapturing(at::cuda::getCurrentCUDAStream(), &capture), op,
             "cudaStreamIsCapturing");
  TORCH_CHECK(capture == cudaStreamCaptureStatusNone, op, ": this call needs ", data_bytes,
              " bytes of symmetric memory per rank but group ", impl_->handle, " holds ",
              view_.data_bytes, ", and it cannot grow during CUDA-graph capture: call "
              "ctx.reserve(", grown, ") (Context.reserve(nbytes)) on every rank before capturing");
  // A collective (every rank makes the same call with the same sizes): the handle exchange is
  // the barrier. Kernels still running on the old generation keep it (it stays mapped).
  std::unique_ptr<Generation> next =
      make_generation(op, *impl_, view_.rank, view_.world, grown);
  impl_->retired.push_back(std::move(impl_->current));
  impl_->current = std::move(next);
  publish();
}

void SymmetricGroup::ensure_net(const char* op, uint64_t send_bytes, uint64_t recv_bytes) {
  if (single_node()) return;
#if MKERNEL_HAS_NET_PATH
  if (impl_->net && send_bytes <= view_.net.send_bytes && recv_bytes <= view_.net.recv_bytes) {
    return;
  }
  const c10::cuda::CUDAGuard device_guard(impl_->device);
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  check_cuda(cudaStreamIsCapturing(at::cuda::getCurrentCUDAStream(), &capture), op,
             "cudaStreamIsCapturing");
  TORCH_CHECK(capture == cudaStreamCaptureStatusNone, op, ": this call needs inter-node areas of ",
              send_bytes, " (send) and ", recv_bytes, " (receive) bytes per rank, more than group ",
              impl_->handle, " holds, and they cannot grow during CUDA-graph capture: call "
              "ctx.reserve(nbytes) (Context.reserve) with the largest call's size on every rank "
              "before capturing");
  // A new path, larger than asked (powers of two: a few growths at most), opened collectively
  // (every rank grows at the same call: the sizes derive from shapes all ranks share). The old
  // one stays open: in-flight commands of earlier calls and graphs captured on it finish on it.
  // Parity of the receive halves stays sound across paths: a peer writes a half of a path only
  // after this rank finished the call before the previous one, whichever path that used.
  NetPathConfig cfg;
  cfg.device = impl_->device;
  cfg.rank = view_.rank;
  cfg.node = impl_->node;
  cfg.send_bytes = std::max(send_bytes, view_.net.send_bytes);
  cfg.recv_bytes = std::max(recv_bytes, view_.net.recv_bytes);
  if (impl_->net) {
    cfg.send_bytes = net_growth(cfg.send_bytes);
    cfg.recv_bytes = net_growth(cfg.recv_bytes);
  }
  cfg.arrival_slots = 4096;
  cfg.fifo_slots = 1024;
  cfg.timeout_ms = static_cast<int64_t>(impl_->timeout_s * 1000);
  cfg.net = default_net(impl_->one_host);
  auto next = std::make_unique<NetPath>(op, static_cast<mk_session_t>(impl_->handle), cfg);
  if (impl_->net) impl_->retired_net.push_back(std::move(impl_->net));
  impl_->net = std::move(next);
  view_.net = impl_->net->view();
#else
  (void)send_bytes;
  (void)recv_bytes;
  TORCH_CHECK_NOT_IMPLEMENTED(
      false, op, ": group ", impl_->handle, " spans ", nodes_,
      " nodes, and this build has no GPU inter-node path (csrc/comm/net_path: FIFO -> Go proxy "
      "-> transport); run every rank of the group on one node (one MKERNEL_EMULATED_NODE)");
#endif
}

bool SymmetricGroup::net_copies_on_this_gpu() const {
#if MKERNEL_HAS_NET_PATH
  return impl_->net != nullptr && impl_->net->gpu_direct();
#else
  return false;
#endif
}

std::string SymmetricGroup::net_info() const {
#if MKERNEL_HAS_NET_PATH
  if (!impl_->net) return "{}";
  const NetPath& n = *impl_->net;
  return std::string("{\"transport\":\"") + n.transport() + "\",\"gpu_memory\":" +
         (n.gpu_memory() ? "true" : "false") + ",\"gpu_direct\":" + (n.gpu_direct() ? "true" : "false") +
         ",\"module_loading\":\"" + n.module_loading() + "\",\"copier\":\"" + n.copier() + "\"" +
         ",\"copier_submit\":" + n.copier_submit() +
         ",\"send_bytes\":" + std::to_string(view_.net.send_bytes) +
         ",\"recv_bytes\":" + std::to_string(view_.net.recv_bytes) +
         ",\"paths_opened\":" + std::to_string(impl_->retired_net.size() + 1) + ",\"stats\":" + n.stats() + "}";
#else
  return "{}";
#endif
}

std::string SymmetricGroup::diagnostic() const { return last_wait_failure(); }

SymmetricGroup::~SymmetricGroup() = default;

void release_symmetric_group(int64_t group) {
  std::vector<std::unique_ptr<SymmetricGroup>> mine;
  {
    Registry& reg = registry();
    std::lock_guard<std::mutex> guard(reg.mu);
    for (auto it = reg.groups.begin(); it != reg.groups.end();) {
      if (it->first.first == group) {
        mine.push_back(std::move(it->second));
        it = reg.groups.erase(it);
      } else {
        ++it;
      }
    }
  }
  if (mine.empty() || !core_bound()) return;
  double timeout_s = 10.0;
  for (auto& g : mine) {
    const c10::cuda::CUDAGuard device_guard(g->impl_->device);
    // This rank's kernels of the group are done with the peers' memory ...
    if (cudaDeviceSynchronize() != cudaSuccess) cudaGetLastError();
    timeout_s = std::min(timeout_s, g->impl_->timeout_s);
  }
  // ... and every rank's: nobody reads or signals into memory freed below. Bounded; a failure
  // only means a peer is gone.
  (void)core_api().session_barrier(static_cast<mk_session_t>(group),
                                   static_cast<int64_t>(timeout_s * 1000));
  for (auto& g : mine) {
    const c10::cuda::CUDAGuard device_guard(g->impl_->device);
    g.reset();
  }
}

uint64_t call_signature(int32_t op, std::initializer_list<int64_t> dims) {
  // FNV-1a over the op id and the dims, then a final mix; never 0.
  uint64_t h = 1469598103934665603ull;
  auto mix = [&h](uint64_t v) {
    for (int i = 0; i < 8; ++i) {
      h ^= (v >> (8 * i)) & 0xff;
      h *= 1099511628211ull;
    }
  };
  mix(static_cast<uint32_t>(op));
  mix(dims.size());
  for (int64_t d : dims) mix(static_cast<uint64_t>(d));
  h ^= h >> 33;
  return h == 0 ? 1 : h;
}

}  // namespace mkernel::comm

#endif  // MKERNEL_WITH_CUDA
