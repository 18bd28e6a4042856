// NetPath (net_path.h): a Go data path mapped into the GPU.
#ifdef MKERNEL_WITH_CUDA

#include "comm/net_path.h"

#include <c10/util/Exception.h>
#include <cuda.h>
#include <cuda_runtime.h>
#include <mkernel/fifo.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <thread>

#include "core_binding.h"
#include "session_layout.h"

namespace mkernel::comm {
namespace {

constexpr uint32_t kRecvBuffer = 1;  // buffer ids, the same on every rank
constexpr uint32_t kSendBuffer = 2;
constexpr uint64_t kMinBytes = 64 << 10;
constexpr uint64_t kGpuGranule = 2 << 20;  // GPU buffers: whole 2 MiB pages (DMA-BUF export)

uint64_t round_up_pow2(uint64_t need) {
  uint64_t c = kMinBytes;
  while (c < need) c <<= 1;
  return c;
}

void check_cuda(cudaError_t e, const char* op, const char* what) {
  TORCH_CHECK(e == cudaSuccess, op, ": ", what, " failed: ", cudaGetErrorString(e));
}

// Restores the caller's current device.
class DeviceScope {
 public:
  explicit DeviceScope(int device) {
    cudaGetDevice(&prev_);
    if (prev_ != device) cudaSetDevice(device);
  }
  ~DeviceScope() { cudaSetDevice(prev_); }

 private:
  int prev_ = 0;
};

// MKERNEL_NET_GDR=1: the loopback transport's GPU-direct emulation (gocore/transport/loopback,
// gpudirect.go; the Go side reads the same variable): GPU buffers, and the kernels store the
// bytes into the peers' receive buffers themselves (NetDevice::peer_recv). Opt-in.
bool gpu_direct_env() {
  const char* v = std::getenv("MKERNEL_NET_GDR");
  return v != nullptr && std::strcmp(v, "1") == 0;
}

// The transport the data path will open, as far as the environment says ("" = automatic).
std::string chosen_net(const std::string& net) {
  std::string name = net;
  if (name.empty()) {
    if (const char* p = std::getenv("MKERNEL_NET_PLUGIN"); p != nullptr && *p != '\0') return "plugin";
    if (const char* e = std::getenv("MKERNEL_NET"); e != nullptr) name = e;
  }
  return name;
}

// Whether to offer GPU memory for the buffers: only where an RDMA transport may be chosen, or
// loopback with the GPU-direct emulation (a tcp / plain loopback data path would allocate host
// staging anyway). MKERNEL_NET_GPU_MEMORY=0 turns it off (host staging everywhere), =1 forces the
// offer.
bool offer_gpu_memory(const std::string& net) {
  if (const char* v = std::getenv("MKERNEL_NET_GPU_MEMORY"); v != nullptr && *v != '\0') {
    return std::strcmp(v, "0") != 0;
  }
  const std::string name = chosen_net(net);
  if (name == "loopback") return gpu_direct_env();
  return name.empty() || name == "ibverbs" || name == "efa";
}

// What a rank publishes about its GPU receive buffer (GPU-direct emulation).
constexpr uint32_t kRecvBlobMagic = 0x4d4b4744u;  // "MKGD"
struct RecvBlob {
  uint32_t magic;
  int32_t pid;
  uint64_t bytes;
  cudaIpcMemHandle_t handle;
};

// A DMA-BUF fd for [ptr, ptr + bytes) of GPU memory, or -1 (no driver support: the transport
// then tries nvidia-peermem on the address). The driver entry point is looked up at run time:
// the extension does not link libcuda.
int export_dmabuf(void* ptr, uint64_t bytes) {
  using Fn = CUresult (*)(void*, CUdeviceptr, size_t, CUmemRangeHandleType, unsigned long long);
  static Fn fn = [] {
    void* f = nullptr;
    cudaDriverEntryPointQueryResult q{};
    if (cudaGetDriverEntryPointByVersion("cuMemGetHandleForAddressRange", &f, 12000, cudaEnableDefault, &q) !=
            cudaSuccess ||
        q != cudaDriverEntryPointSuccess) {
      return static_cast<Fn>(nullptr);
    }
    return reinterpret_cast<Fn>(f);
  }();
  if (fn == nullptr) return -1;
  int fd = -1;
  if (fn(&fd, reinterpret_cast<CUdeviceptr>(ptr), bytes, CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD, 0) != CUDA_SUCCESS) {
    return -1;
  }
  return fd;
}

bool env_set(const char* name) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0';
}

}  // namespace

std::string default_net(bool one_host) {
  if (!one_host || env_set("MKERNEL_NET") || env_set("MKERNEL_NET_PLUGIN")) return "";
  return "loopback";
}

// Owns the data path handle (destroyed with the Impl, also when opening fails half-way).
struct NetDatapathHandle {
  ~NetDatapathHandle() {
    if (h != 0) core_api().datapath_destroy(h);
  }
  mk_datapath_t h = 0;
};

// A peer's receive buffer opened through CUDA IPC (GPU-direct emulation), closed with its owner.
struct NetIpcMapping {
  NetIpcMapping() = default;
  NetIpcMapping(const NetIpcMapping&) = delete;
  NetIpcMapping& operator=(const NetIpcMapping&) = delete;
  ~NetIpcMapping() {
    if (ptr != nullptr && cudaIpcCloseMemHandle(ptr) != cudaSuccess) cudaGetLastError();
  }
  void* ptr = nullptr;
};

// Everything one opening of the path owns, released in the reverse order of acquisition.
struct NetPath::Impl {
  NetPathConfig cfg;
  NetDatapathHandle dp;
  std::vector<void*> registered;     // cudaHostRegister'ed host ranges
  void* gpu_send = nullptr;          // GPU buffers (RDMA) or nullptr
  void* gpu_recv = nullptr;
  std::vector<int> dmabuf_fds;
  unsigned long long* head = nullptr;  // device memory: the ticket counter, then stage_count
  mk_fifo_ctrl* fifo = nullptr;        // host mapping
  bool gpu_memory = false;
  std::string transport = "?";
  // GPU-direct emulation: the peers' receive buffers and their device table (NetDevice::peer_recv).
  std::vector<std::unique_ptr<NetIpcMapping>> peer_recv;
  void* peer_table = nullptr;
  void* mirror = nullptr;  // NetDevice::arrival_mirror, then arrival_claim

  ~Impl() {
    // No kernel may still use the path: the caller synchronized; be safe at teardown anyway
    // (after a trapped kernel this returns the sticky error, which is fine here).
    DeviceScope scope(cfg.device);
    (void)cudaDeviceSynchronize();
    for (void* p : registered) (void)cudaHostUnregister(p);
    registered.clear();
    if (dp.h != 0) {
      core_api().datapath_destroy(dp.h);  // the transport deregisters the GPU buffers
      dp.h = 0;
    }
    for (int fd : dmabuf_fds) close(fd);
    peer_recv.clear();
    if (peer_table != nullptr) (void)cudaFree(peer_table);
    if (mirror != nullptr) (void)cudaFree(mirror);
    if (gpu_send != nullptr) (void)cudaFree(gpu_send);
    if (gpu_recv != nullptr) (void)cudaFree(gpu_recv);
    if (head != nullptr) (void)cudaFree(head);
  }

  // Maps host memory into the device: returns the device pointer.
  template <typename T>
  T* map(const char* op, void* host, size_t bytes, const char* what) {
    const cudaError_t e = cudaHostRegister(host, bytes, cudaHostRegisterMapped | cudaHostRegisterPortable);
    TORCH_CHECK(e == cudaSuccess, op, ": cudaHostRegister of the inter-node ", what, " (", bytes,
                " bytes of host shared memory) failed: ", cudaGetErrorString(e));
    registered.push_back(host);
    void* dev = nullptr;
    check_cuda(cudaHostGetDevicePointer(&dev, host, 0), op, "cudaHostGetDevicePointer");
    return static_cast<T*>(dev);
  }

  // GPU-direct emulation (COLLECTIVE over the session): publishes this rank's GPU receive buffer
  // through CUDA IPC, maps every rank of another node's, and fills view.peer_recv.
  void map_peer_recv(const char* op, mk_session_t s, NetDevice& view) {
    const int world = static_cast<int>(cfg.node.size());
    TORCH_CHECK(cfg.rank >= 0 && cfg.rank < world, op, ": NetPath needs this rank (", cfg.rank,
                ") for the GPU-direct emulation");
    RecvBlob mine{};
    mine.magic = kRecvBlobMagic;
    mine.pid = static_cast<int32_t>(getpid());
    mine.bytes = cfg.recv_bytes;
    check_cuda(cudaIpcGetMemHandle(&mine.handle, gpu_recv), op, "cudaIpcGetMemHandle (inter-node receive buffer)");
    const std::vector<std::string> blobs = session_allgather_blobs(
        op, s, std::string(reinterpret_cast<const char*>(&mine), sizeof mine),
        static_cast<double>(cfg.timeout_ms) / 1000.0, "the GPU-direct receive buffers");
    std::vector<uint8_t*> table(kMaxRanks, nullptr);
    peer_recv.resize(world);
    for (int r = 0; r < world; ++r) {
      if (r == cfg.rank || cfg.node[r] == cfg.node[cfg.rank]) continue;
      RecvBlob b{};
      TORCH_CHECK(blobs[r].size() == sizeof b, op, ": rank ", r, " sent a malformed GPU-direct record (",
                  blobs[r].size(), " bytes)");
      std::memcpy(&b, blobs[r].data(), sizeof b);
      TORCH_CHECK(b.magic == kRecvBlobMagic, op, ": rank ", r, " sent a malformed GPU-direct record");
      TORCH_CHECK(b.bytes == cfg.recv_bytes, op, ": rank ", r, " sized its inter-node receive buffer to ", b.bytes,
                  " bytes, this rank (", cfg.rank, ") to ", cfg.recv_bytes);
      auto m = std::make_unique<NetIpcMapping>();
      const cudaError_t err = cudaIpcOpenMemHandle(&m->ptr, b.handle, cudaIpcMemLazyEnablePeerAccess);
      if (err != cudaSuccess) {
        cudaGetLastError();
        TORCH_CHECK(false, op, ": MKERNEL_NET_GDR=1: cannot map rank ", r, "'s inter-node receive buffer (pid ",
                    b.pid, ") into rank ", cfg.rank, " through CUDA IPC: ", cudaGetErrorString(err),
                    " (the GPU-direct emulation needs every rank on GPUs of one host with peer access, or MPS)");
      }
      table[r] = static_cast<uint8_t*>(m->ptr);
      peer_recv[r] = std::move(m);
    }
    const size_t bytes = table.size() * sizeof(uint8_t*);
    check_cuda(cudaMalloc(&peer_table, bytes), op, "cudaMalloc (GPU-direct peer table)");
    check_cuda(cudaMemcpy(peer_table, table.data(), bytes, cudaMemcpyHostToDevice), op,
               "cudaMemcpy (GPU-direct peer table)");
    view.peer_recv = static_cast<uint8_t* const*>(peer_table);
  }
};

// The transport's name from the data path's stats JSON ("?" when absent).
static std::string transport_of(mk_datapath_t dp) {
  const mk_api_v1& api = core_api();
  const auto stats =
      read_core_string([&](char* buf, size_t* len) { return api.datapath_stats_json(dp, buf, len); });
  if (stats) {
    const std::string pat = "\"transport\":\"";
    const size_t at = stats->find(pat);
    if (at != std::string::npos) {
      const size_t from = at + pat.size();
      return stats->substr(from, stats->find('"', from) - from);
    }
  }
  return "?";
}

// Opens one path: the data path (collective), then the device mappings.
std::unique_ptr<NetPath::Impl> NetPath::open(const char* op, mk_session_t s, const NetPathConfig& cfg,
                                             NetDevice& view) {
  const mk_api_v1& api = core_api();
  auto impl = std::make_unique<NetPath::Impl>();
  impl->cfg = cfg;
  DeviceScope scope(cfg.device);
  const bool offer = offer_gpu_memory(cfg.net);
  const uint64_t send_bytes = offer ? (cfg.send_bytes + kGpuGranule - 1) / kGpuGranule * kGpuGranule
                                    : round_up_pow2(cfg.send_bytes);
  const uint64_t recv_bytes = offer ? (cfg.recv_bytes + kGpuGranule - 1) / kGpuGranule * kGpuGranule
                                    : round_up_pow2(cfg.recv_bytes);
  impl->cfg.send_bytes = std::max<uint64_t>(send_bytes, kMinBytes);
  impl->cfg.recv_bytes = std::max<uint64_t>(recv_bytes, kMinBytes);

  const uint32_t ids[2] = {kRecvBuffer, kSendBuffer};
  const uint64_t sizes[2] = {impl->cfg.recv_bytes, impl->cfg.send_bytes};
  mk_device_buffer dev[2] = {};
  std::vector<int32_t> node(cfg.node.begin(), cfg.node.end());
  mk_datapath_config dc = MK_DATAPATH_CONFIG_INITIALIZER;
  if (offer) {
    check_cuda(cudaMalloc(&impl->gpu_recv, sizes[0]), op, "cudaMalloc (inter-node receive buffer)");
    check_cuda(cudaMalloc(&impl->gpu_send, sizes[1]), op, "cudaMalloc (inter-node send buffer)");
    void* ptrs[2] = {impl->gpu_recv, impl->gpu_send};
    const bool nic = chosen_net(cfg.net) != "loopback";  // loopback never reads a DMA-BUF
    for (int i = 0; i < 2; ++i) {
      const int fd = nic ? export_dmabuf(ptrs[i], sizes[i]) : -1;
      if (fd >= 0) impl->dmabuf_fds.push_back(fd);
      dev[i] = mk_device_buffer{ids[i], cfg.device, reinterpret_cast<uint64_t>(ptrs[i]), sizes[i], fd, 0, 0};
    }
    dc.num_device_buffers = 2;
    dc.device_buffers = dev;
  } else {
    dc.num_buffers = 2;
    dc.buffer_ids = ids;
    dc.buffer_bytes = sizes;
  }
  dc.flag_slots = cfg.arrival_slots;
  dc.fifo_slots = cfg.fifo_slots;
  dc.node = node.data();
  dc.net = cfg.net.empty() ? nullptr : cfg.net.c_str();
  dc.timeout_ms = cfg.timeout_ms;
  dc.fifo_clock = MK_FIFO_CLOCK_GLOBALTIMER;
  const std::string what = std::string("datapath_create (") + op + ": GPU inter-node path)";
  check_core(api.datapath_create(s, &dc, &impl->dp.h), what.c_str());

  // Where did the buffers land? (Every rank got the same kind: one transport for all.)
  mk_buffer_info info[2] = {};
  for (int i = 0; i < 2; ++i) {
    info[i].size = sizeof(mk_buffer_info);
    check_core(api.datapath_buffer_info(impl->dp.h, ids[i], &info[i]), "datapath_buffer_info");
  }
  impl->gpu_memory = info[0].kind == MK_BUFFER_DEVICE;
  impl->transport = transport_of(impl->dp.h);
  if (!impl->gpu_memory && offer) {
    // Host staging was allocated instead: the offered GPU memory is not needed.
    for (int fd : impl->dmabuf_fds) close(fd);
    impl->dmabuf_fds.clear();
    (void)cudaFree(impl->gpu_recv);
    (void)cudaFree(impl->gpu_send);
    impl->gpu_recv = impl->gpu_send = nullptr;
  }
  if (impl->gpu_memory) {
    view.recv_area = static_cast<uint8_t*>(info[0].ptr);
    view.send_area = static_cast<uint8_t*>(info[1].ptr);
  } else {
    view.recv_area = impl->map<uint8_t>(op, info[0].ptr, info[0].bytes, "receive buffer");
    view.send_area = impl->map<uint8_t>(op, info[1].ptr, info[1].bytes, "send buffer");
  }
  view.recv_bytes = info[0].bytes;
  view.send_bytes = info[1].bytes;
  view.recv_buf_id = kRecvBuffer;
  view.send_buf_id = kSendBuffer;
  if (impl->gpu_memory && impl->transport == "loopback") impl->map_peer_recv(op, s, view);

  void* flags = nullptr;
  size_t flag_bytes = 0;
  check_core(api.datapath_buffer(impl->dp.h, 0, &flags, &flag_bytes), "datapath_buffer (arrival flags)");
  view.arrival = impl->map<uint64_t>(op, flags, flag_bytes, "arrival flags");
  view.arrival_slots = static_cast<uint32_t>(flag_bytes / MK_FIFO_FLAG_BYTES);
  {
    const size_t bytes = 2 * static_cast<size_t>(view.arrival_slots) * sizeof(uint64_t);
    check_cuda(cudaMalloc(&impl->mirror, bytes), op, "cudaMalloc (arrival flag mirror)");
    check_cuda(cudaMemset(impl->mirror, 0, bytes), op, "cudaMemset (arrival flag mirror)");
    view.arrival_mirror = static_cast<uint64_t*>(impl->mirror);
    view.arrival_claim = view.arrival_mirror + view.arrival_slots;
  }

  void* fifo = nullptr;
  check_core(api.datapath_fifo(impl->dp.h, &fifo), "datapath_fifo");
  impl->fifo = static_cast<mk_fifo_ctrl*>(fifo);
  view.fifo = impl->map<void>(op, fifo, mk_fifo_block_bytes(impl->fifo), "command FIFO");
  view.fifo_capacity = impl->fifo->capacity;
  view.fifo_format = impl->fifo->format;

  // The ticket counter, then the staging counters (NetDevice::stage_count), all zero.
  constexpr size_t kCounterBytes = sizeof(unsigned long long) + kNetStageCounters * sizeof(uint32_t);
  check_cuda(cudaMalloc(&impl->head, kCounterBytes), op, "cudaMalloc (FIFO ticket and staging counters)");
  check_cuda(cudaMemset(impl->head, 0, kCounterBytes), op, "cudaMemset (FIFO ticket and staging counters)");
  view.stage_count = reinterpret_cast<uint32_t*>(impl->head + 1);
  check_cuda(cudaDeviceSynchronize(), op, "cudaDeviceSynchronize (after mapping the inter-node path)");
  view.fifo_head = impl->head;
  return impl;
}

NetPath::NetPath(const char* op, mk_session_t s, const NetPathConfig& cfg) : session_(s) {
  TORCH_CHECK(core_bound(), op, ": the mkernel core is not loaded: import mkernel and call mkernel.init()");
  TORCH_CHECK_VALUE(!cfg.node.empty(), op, ": NetPath needs every rank's node");
  impl_ = open(op, s, cfg, view_);
}

NetPath::~NetPath() = default;

const NetPathConfig& NetPath::config() const { return impl_->cfg; }
bool NetPath::gpu_memory() const { return impl_->gpu_memory; }
bool NetPath::gpu_direct() const { return impl_->peer_table != nullptr; }
std::string NetPath::transport() const { return impl_->transport; }

std::string NetPath::failure() const {
  if (!impl_) return "the path was closed by a failed re-creation";
  const mk_status st = core_api().datapath_check(impl_->dp.h);
  if (st == MK_OK) {
    if (mk_fifo_error(impl_->fifo) == MK_FIFO_ERR_NONE) return "";
    return "the command FIFO was failed (error " + std::to_string(mk_fifo_error(impl_->fifo)) + ", peer " +
           std::to_string(static_cast<int32_t>(impl_->fifo->error_peer)) + ", ticket " +
           std::to_string(impl_->fifo->error_ticket) + ")";
  }
  return core_failure_message(st, "datapath_check (GPU inter-node path)");
}

std::string NetPath::stats() const {
  if (!impl_) return "{}";
  const mk_api_v1& api = core_api();
  return read_core_string([&](char* buf, size_t* len) { return api.datapath_stats_json(impl_->dp.h, buf, len); })
      .value_or("{}");
}

std::string NetPath::drain(int64_t timeout_ms) const {
  if (!impl_) return "";
  unsigned long long pushed = 0;
  {
    DeviceScope scope(impl_->cfg.device);
    const cudaError_t e = cudaMemcpy(&pushed, impl_->head, sizeof(pushed), cudaMemcpyDeviceToHost);
    if (e != cudaSuccess) return std::string("reading the FIFO's ticket counter: ") + cudaGetErrorString(e);
  }
  if (pushed == 0) return "";
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  for (;;) {
    const int rc = mk_fifo_wait_done(impl_->fifo, pushed - 1, 20000);
    if (rc == MK_FIFO_OK) return "";
    if (rc == MK_FIFO_FAILED) return failure();
    if (std::chrono::steady_clock::now() > deadline) {
      return "commands up to ticket " + std::to_string(pushed - 1) + " unfinished after " +
             std::to_string(timeout_ms) + " ms: " + stats();
    }
    std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
}

void NetPath::ensure(const char* op, uint64_t send_bytes, uint64_t recv_bytes) {
  TORCH_CHECK(impl_, op, ": the inter-node path is unusable after a failed re-creation");
  if (send_bytes <= view_.send_bytes && recv_bytes <= view_.recv_bytes) return;
  NetPathConfig cfg = impl_->cfg;
  cfg.send_bytes = round_up_pow2(std::max(send_bytes, view_.send_bytes));
  cfg.recv_bytes = round_up_pow2(std::max(recv_bytes, view_.recv_bytes));
  {
    DeviceScope scope(cfg.device);
    check_cuda(cudaDeviceSynchronize(), op, "cudaDeviceSynchronize (before growing the inter-node path)");
  }
  const std::string d = drain(cfg.timeout_ms);
  TORCH_CHECK(d.empty(), op, ": cannot grow the inter-node path: ", d);
  // Nobody may still send into the old buffers when they go away.
  check_core(core_api().session_barrier(session_, cfg.timeout_ms), "session_barrier (growing the inter-node path)");
  impl_.reset();
  view_ = NetDevice{};
  impl_ = open(op, session_, cfg, view_);
}

}  // namespace mkernel::comm

#endif  // MKERNEL_WITH_CUDA
