// NetPath (net_path.h): a Go data path mapped into the GPU.
#ifdef MKERNEL_WITH_CUDA

#include "comm/net_path.h"

#include <c10/util/Exception.h>
#include <cuda.h>
#include <cuda_runtime.h>
#include <mkernel/fifo.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>

#include "comm/ce_copy.h"
#include "comm/device_alloc.h"
#include "comm/gdr_copier_launch.h"
#include "comm/gdr_copier_process.h"
#include "core_binding.h"
#include "env_knobs.h"
#include "session_layout.h"

namespace mkernel::comm {
namespace {

constexpr uint32_t kRecvBuffer = 1;  // buffer ids, the same on every rank
constexpr uint32_t kSendBuffer = 2;
constexpr uint64_t kMinBytes = 64 << 10;
constexpr uint64_t kGpuGranule = 2 << 20;  // GPU buffers: whole 2 MiB pages (DMA-BUF export)
// GPU-direct emulation: CTAs the collectives leave free (NetDevice::spare_ctas) in case the driver
// runs the copier's copies as SM kernels despite the copy-engine hint.
constexpr uint32_t kGdrSpareCtas = 2;

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
// gpudirect.go; the Go side reads the same variable, with the same spelling rules): the send and
// receive buffers are GPU memory registered with the transport, the kernels run the RDMA
// protocol on them (store into the send area, push, wait for the completion before reuse), and
// the transport, once an op is due at the peer after the emulated link's serialization and
// latency, moves its bytes with this extension's copy engine (NetCopier below) and only then
// releases the signal: what a ConnectX-7 GPUDirect RDMA write does, with the wire emulated.
// Unset: kGpuDirectByDefault (python/mkernel/_module_loading.py GDR_BY_DEFAULT says the same).
constexpr bool kGpuDirectByDefault = true;
bool gpu_direct_env() {
  const char* v = env::get("MKERNEL_NET_GDR");
  std::string s = v != nullptr ? v : "";
  s.erase(0, s.find_first_not_of(" \t\n"));
  s.erase(s.find_last_not_of(" \t\n") + 1);
  TORCH_CHECK_VALUE(s.empty() || s == "0" || s == "1", "MKERNEL_NET_GDR=\"", v, "\": want 0 or 1");
  return s.empty() ? kGpuDirectByDefault : s == "1";
}

// MKERNEL_NET_GDR_COPIER: where the GPU-direct emulation's copies are submitted. Unset or
// "thread": the proxy thread, into this rank's context (NetCopier; what s11run2 ran); "process":
// a helper process per rank and device, the emulated NIC (gdr_copier_process.h; s12run1 ran it).
// Spaces are ignored (python/mkernel/_module_loading.py `copier` reads it the same way).
constexpr bool kCopierProcessByDefault = true;
bool copier_process_env() {
  const char* v = env::get("MKERNEL_NET_GDR_COPIER");
  std::string s = v != nullptr ? v : "";
  s.erase(0, s.find_first_not_of(" \t\n"));
  s.erase(s.find_last_not_of(" \t\n") + 1);
  TORCH_CHECK_VALUE(s.empty() || s == "thread" || s == "process", "MKERNEL_NET_GDR_COPIER=\"", s,
                    "\": want thread or process");
  return s.empty() ? kCopierProcessByDefault : s == "process";
}

// How long a path's opening waits for its copier process to start (the first mapping included):
// MKERNEL_NET_GDR_COPIER_START_S, else the larger of 30 s and the op timeout. Not the op timeout
// alone: s12run1's killed-rank test ran with a 5 s op timeout and four helpers starting at once.
int64_t copier_start_ms(int64_t op_timeout_ms) {
  if (const char* v = env::get("MKERNEL_NET_GDR_COPIER_START_S"); v != nullptr && *v != '\0') {
    char* end = nullptr;
    const double sec = std::strtod(v, &end);
    TORCH_CHECK_VALUE(end != v && *end == '\0' && sec > 0, "MKERNEL_NET_GDR_COPIER_START_S=\"", v,
                      "\": want seconds > 0");
    return static_cast<int64_t>(sec * 1000.0);
  }
  return std::max<int64_t>(30000, op_timeout_ms);
}

// The transport the data path will open, as far as the environment says ("" = automatic).
std::string chosen_net(const std::string& net) {
  std::string name = net;
  if (name.empty()) {
    if (const char* p = env::get("MKERNEL_NET_PLUGIN"); p != nullptr && *p != '\0') return "plugin";
    if (const char* e = env::get("MKERNEL_NET"); e != nullptr) name = e;
  }
  return name;
}

// Whether to offer GPU memory for the buffers: only where an RDMA transport may be chosen, or
// loopback with the GPU-direct emulation (a tcp / plain loopback data path would allocate host
// staging anyway). MKERNEL_NET_GPU_MEMORY=0 turns it off (host staging everywhere), =1 forces the
// offer.
bool offer_gpu_memory(const std::string& net, bool gpu_direct) {
  if (const char* v = env::get("MKERNEL_NET_GPU_MEMORY"); v != nullptr && *v != '\0') {
    return std::strcmp(v, "0") != 0;
  }
  const std::string name = chosen_net(net);
  if (name == "loopback") return gpu_direct;
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

// CUDA's module loading mode: "eager", "lazy", or "unknown" where the driver cannot say. The
// driver entry point is looked up at run time, like export_dmabuf's.
std::string module_loading_mode() {
  using Fn = CUresult (*)(CUmoduleLoadingMode*);
  static Fn fn = [] {
    void* f = nullptr;
    cudaDriverEntryPointQueryResult q{};
    if (cudaGetDriverEntryPointByVersion("cuModuleGetLoadingMode", &f, 12000, cudaEnableDefault, &q) != cudaSuccess ||
        q != cudaDriverEntryPointSuccess) {
      (void)cudaGetLastError();
      return static_cast<Fn>(nullptr);
    }
    return reinterpret_cast<Fn>(f);
  }();
  CUmoduleLoadingMode mode{};
  if (fn == nullptr || fn(&mode) != CUDA_SUCCESS) return "unknown";
  return mode == CU_MODULE_EAGER_LOADING ? "eager" : mode == CU_MODULE_LAZY_LOADING ? "lazy" : "unknown";
}

bool env_set(const char* name) {
  const char* v = env::get(name);
  return v != nullptr && *v != '\0';
}

}  // namespace

bool gdr_copies_in_process() { return gpu_direct_env() && !copier_process_env(); }

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

// The GPU-direct emulation's "NIC DMA" (mk_datapath_config's device copier, ABI v3): the Go
// transport calls start() from its proxy thread when an op is due at the peer, and done() until
// the copy finished, before it releases the op's signal. One non-blocking stream (it must never
// wait for the legacy default stream, where a kernel spins on the very signal this copy
// precedes) at the device's greatest priority, and a ring of events, one per copy in flight (the
// transport keeps at most MK_DEVICE_COPIES_IN_FLIGHT). The proxy thread runs in relaxed capture
// mode: a CUDA-graph capture on another thread of the process must not forbid its copies.
//
// Unlike a NIC's DMA, these copies are CUDA work of the rank's own context, submitted while its
// kernels wait for them: a context synchronization on the GPU side in between (a kernel loaded for
// the first time under lazy module loading) is ordered before them and waits for the kernels that
// wait for them — a deadlock that ends at the op timeout (s11run1's graph suite). Hence eager module loading under the emulation
// (python/mkernel/_module_loading.py sets it at import; open() warns where it is lazy), and the
// collectives load all their kernels before their first launch.
struct NetCopier {
  static constexpr uint32_t kEvents = 2 * MK_DEVICE_COPIES_IN_FLIGHT;
  int device = 0;
  cudaStream_t stream = nullptr;
  std::vector<cudaEvent_t> events;
  uint64_t next = 0;                    // the next copy's token
  uint8_t* send = nullptr;              // this rank's GPU send area
  std::vector<uint8_t*> peer_recv;      // peers' receive areas (CUDA IPC), by rank
  // MKERNEL_NET_GDR_COPIER=process: the helper that does the copies (shared by the rank's paths on
  // this device) and this path's channel of it, closed and given back in ~NetCopier.
  std::shared_ptr<CopierProcess> proc;
  int channel = -1;
  int64_t unmap_ms = 0;
  uint32_t send_id = 0, recv_id = 0;
  // Diagnostics of a copy the GPU does not run (s11run1): each in-flight copy's submission time,
  // size and peer, by event slot; one line on stderr when one stays unfinished for kStuckAfter.
  static constexpr auto kStuckAfter = std::chrono::seconds(5);
  struct InFlight {
    std::chrono::steady_clock::time_point at{};
    uint64_t bytes = 0;
    int32_t peer = -1;
  };
  std::vector<InFlight> inflight = std::vector<InFlight>(kEvents);
  uint64_t completed = 0;
  bool reported = false;
  std::string loading = "unknown";  // CUDA's module loading mode, for that line

  // The calling thread in relaxed capture mode on the path's device, restored after.
  struct ThreadScope {
    explicit ThreadScope(int device) {
      cudaThreadExchangeStreamCaptureMode(&mode);
      cudaGetDevice(&prev);
      if (prev != device) cudaSetDevice(device);
    }
    ~ThreadScope() {
      int cur = 0;
      cudaGetDevice(&cur);
      if (cur != prev) cudaSetDevice(prev);
      cudaThreadExchangeStreamCaptureMode(&mode);
    }
    cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
    int prev = 0;
  };

  void open(const char* op, int dev) {
    device = dev;
    submit_asked = copier_submit_env(op);
    int least = 0, greatest = 0;
    check_cuda(cudaDeviceGetStreamPriorityRange(&least, &greatest), op, "cudaDeviceGetStreamPriorityRange");
    check_cuda(cudaStreamCreateWithPriority(&stream, cudaStreamNonBlocking, greatest), op,
               "cudaStreamCreateWithPriority (GPU-direct copies)");
    events.assign(kEvents, nullptr);
    for (auto& e : events) check_cuda(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), op, "cudaEventCreate (GPU-direct copies)");
  }
  ~NetCopier() {
    if (proc && channel >= 0) {  // the helper finishes its copies and closes the areas before they are freed
      const std::string why = proc->unmap(channel, unmap_ms);
      if (!why.empty()) std::fprintf(stderr, "mkernel: closing the GPU-direct copier's mapping: %s\n", why.c_str());
      proc->release(channel);
    }
    proc.reset();
    if (stream != nullptr) (void)cudaStreamSynchronize(stream);
    for (cudaEvent_t e : events) {
      if (e != nullptr) (void)cudaEventDestroy(e);
    }
    if (stream != nullptr) (void)cudaStreamDestroy(stream);
  }

  // One copy on the stream, by a copy engine: a same-device copy may otherwise run as an SM
  // kernel, which could wait forever behind a collective kernel that fills this client's SMs
  // while it waits for the signal this copy precedes. cudaMemcpyBatchAsync's
  // PreferOverlapWithCompute asks for the copy engines (a hint; where the batch API refuses, a
  // plain cudaMemcpyAsync, noted once in `note` and on stderr). MKERNEL_NET_GDR_COPIER_SUBMIT=plain
  // asks for the plain copy (as the copier process: gdr_copier_serve.cpp Server::submit).
  cudaError_t copy(uint8_t* dst, const uint8_t* src, uint64_t bytes) {
#if CUDART_VERSION >= 12080
    if (!batch_refused && submit_asked != kCopierSubmitPlain) {
      const cudaError_t e = ce_copy_async(dst, src, static_cast<size_t>(bytes), stream);
      if (e != cudaErrorNotSupported && e != cudaErrorInvalidValue) {
        if (e == cudaSuccess) submit_path.store(kCopierSubmitCe, std::memory_order_relaxed);
        return e;
      }
      (void)cudaGetLastError();
      batch_refused = true;
      set_note((std::string("cudaMemcpyBatchAsync refused the copy: ") + cudaGetErrorString(e)).c_str());
    }
#else
    if (submit_asked != kCopierSubmitPlain) set_note("built with CUDA < 12.8: no cudaMemcpyBatchAsync");
#endif
    const cudaError_t e = cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, stream);
    if (e == cudaSuccess) {
      submit_path.store(submit_asked == kCopierSubmitPlain ? kCopierSubmitPlain : kCopierSubmitPlainFallback,
                        std::memory_order_relaxed);
    }
    return e;
  }
  bool batch_refused = false;
  uint32_t submit_asked = kCopierSubmitCe;  // copier_submit_env at open()
  std::atomic<uint32_t> submit_path{kCopierSubmitNone};  // read by submit_info on another thread
  char note[192] = {};                 // why the plain copy ran although ce was asked (once)
  std::atomic<bool> noted{false};      // note is written
  void set_note(const char* why) {
    if (noted.load(std::memory_order_relaxed)) return;
    std::snprintf(note, sizeof note, "%s", why);
    noted.store(true, std::memory_order_release);
    std::fprintf(stderr, "mkernel: GPU-direct copies (in-process copier) submitted as plain cudaMemcpyAsync: %s\n",
                 why);
    std::fflush(stderr);
  }
  CopierStats stats;                           // this path's copies (in-process copier only)
  std::chrono::steady_clock::time_point last_done{};

  // The submission and cost as JSON (CopierProcess::submit_info for the copier process).
  std::string submit_info() const {
    if (proc) return proc->submit_info();
    return std::string("{\"where\":\"thread\",\"asked\":\"") + copier_submit_name(submit_asked) + "\",\"ran\":\"" +
           copier_submit_name(submit_path.load(std::memory_order_relaxed)) + "\",\"note\":\"" +
           copier_json_text(noted.load(std::memory_order_acquire) ? note : "") + "\"," +
           copier_stats_json(stats) + "}";
  }

  static int32_t start(void* ctx, int32_t peer, uint32_t local_buf, uint64_t local_off, uint32_t remote_buf,
                       uint64_t remote_off, uint64_t bytes, uint64_t* token) {
    auto* c = static_cast<NetCopier*>(ctx);
    if (local_buf != c->send_id || remote_buf != c->recv_id || peer < 0 ||
        static_cast<size_t>(peer) >= c->peer_recv.size() || c->peer_recv[peer] == nullptr) {
      return static_cast<int32_t>(cudaErrorInvalidValue);  // not a path the kernels use
    }
    if (c->proc) {  // no CUDA call here: the helper process submits it
      uint64_t t = 0;
      const int32_t rc = c->proc->post(c->channel, peer, local_off, remote_off, bytes, &t);
      if (rc != 0) return rc;
      c->inflight[t % kEvents] = InFlight{std::chrono::steady_clock::now(), bytes, peer};
      c->next = t + 1;
      *token = t;
      return 0;
    }
    ThreadScope scope(c->device);
    const auto t0 = std::chrono::steady_clock::now();
    cudaError_t e = c->copy(c->peer_recv[peer] + remote_off, c->send + local_off, bytes);
    if (e == cudaSuccess) e = cudaEventRecord(c->events[c->next % kEvents], c->stream);
    if (e != cudaSuccess) return static_cast<int32_t>(e);
    // one submission per copy here (the copier process batches: gdr_copier_serve.cpp issue)
    c->stats.add_submit(static_cast<uint64_t>(
        std::chrono::nanoseconds(std::chrono::steady_clock::now() - t0).count()));
    c->inflight[c->next % kEvents] = InFlight{std::chrono::steady_clock::now(), bytes, peer};
    *token = c->next++;
    return 0;
  }

  static int32_t done(void* ctx, uint64_t token, int32_t* is_done) {
    auto* c = static_cast<NetCopier*>(ctx);
    if (c->proc) {
      const int32_t rc = c->proc->done(c->channel, token, is_done);
      if (rc != 0) return rc;
      if (*is_done) {
        ++c->completed;
      } else {
        c->report_if_stuck(token);
      }
      return 0;
    }
    ThreadScope scope(c->device);
    const cudaError_t e = cudaEventQuery(c->events[token % kEvents]);
    if (e == cudaErrorNotReady) {
      (void)cudaGetLastError();  // not an error; keep this thread's last error clean
      *is_done = 0;
      c->report_if_stuck(token);
      return 0;
    }
    if (e == cudaSuccess) {
      ++c->completed;
      const InFlight& f = c->inflight[token % kEvents];
      const auto now = std::chrono::steady_clock::now();
      const auto from = std::max(f.at, c->last_done);
      c->last_done = now;
      c->stats.add(f.bytes, static_cast<uint64_t>(std::chrono::nanoseconds(now - f.at).count()),
                   static_cast<uint64_t>(std::chrono::nanoseconds(now - from).count()));
    }
    *is_done = e == cudaSuccess ? 1 : 0;
    return e == cudaSuccess ? 0 : static_cast<int32_t>(e);
  }

  // One stderr line when copy `token` stays unfinished for kStuckAfter (once per path; the proxy's
  // watchdog names the op at the timeout).
  void report_if_stuck(uint64_t token) {
    const InFlight& f = inflight[token % kEvents];
    const auto age = std::chrono::steady_clock::now() - f.at;
    if (reported || age <= kStuckAfter) return;
    reported = true;
    std::fprintf(stderr,
                 "mkernel: GPU-direct copy %llu (%llu bytes to rank %d) submitted %.1f s ago is "
                 "not done on the GPU (copies submitted %llu, done %llu; CUDA module loading: %s; "
                 "copier: %s): ordered behind work that waits for it, or starved of SMs? Same-GPU "
                 "copies may run as SM kernels, and under MPS the ranks' persistent grids waiting "
                 "for them can hold every SM (session 32: the fused ring across emulated nodes; "
                 "a smaller MKERNEL_RING_GRID / MKERNEL_FUSED_SMS, or MKERNEL_NET_GDR=0) "
                 "(csrc/comm/net_path.cpp NetCopier)\n",
                 static_cast<unsigned long long>(token), static_cast<unsigned long long>(f.bytes),
                 f.peer, std::chrono::duration<double>(age).count(),
                 static_cast<unsigned long long>(next), static_cast<unsigned long long>(completed),
                 loading.c_str(), proc ? "process" : "thread");
    std::fflush(stderr);
  }
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
  // GPU-direct emulation: the peers' receive buffers (CUDA IPC), which the copier writes.
  std::vector<std::unique_ptr<NetIpcMapping>> peer_recv;
  std::unique_ptr<NetCopier> copier;  // GPU-direct emulation: its copy engine (after dp in ~Impl)
  bool gpu_direct = false;
  std::string module_loading = "unknown";  // CUDA's, when the path opened
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
    copier.reset();  // no copy is started after datapath_destroy; finish the last ones
    for (int fd : dmabuf_fds) close(fd);
    peer_recv.clear();
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
  // through CUDA IPC, maps every rank of another node's, and gives them to the copier.
  void map_peer_recv(const char* op, mk_session_t s, bool in_process) {
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
    std::vector<uint8_t*> table(world, nullptr);
    std::vector<RecvBlob> theirs(world);
    std::vector<CopierIpcHandle> their_handles(world);
    std::vector<const CopierIpcHandle*> handles(world, nullptr);
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
      if (!in_process) {  // the helper maps it; mark the rank as a destination
        theirs[r] = b;
        std::memcpy(&their_handles[r], &theirs[r].handle, sizeof(CopierIpcHandle));
        handles[r] = &their_handles[r];
        table[r] = static_cast<uint8_t*>(gpu_recv);  // any non-null: start() checks destinations by it
        continue;
      }
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
    copier->send = static_cast<uint8_t*>(gpu_send);
    copier->peer_recv = std::move(table);  // before datapath_create starts the proxy thread
    if (!in_process) {
      cudaIpcMemHandle_t send_handle{};
      check_cuda(cudaIpcGetMemHandle(&send_handle, gpu_send), op, "cudaIpcGetMemHandle (inter-node send buffer)");
      CopierIpcHandle send{};
      std::memcpy(&send, &send_handle, sizeof send);
      const int64_t wait_ms = copier_start_ms(cfg.timeout_ms);
      copier->unmap_ms = wait_ms;
      try {
        copier->proc->map(copier->channel, send, cfg.send_bytes, handles, cfg.recv_bytes, wait_ms, wait_ms);
      } catch (const std::exception& e) {
        TORCH_CHECK(false, op, ": rank ", cfg.rank, ": ", e.what());
      }
    }
    gpu_direct = true;
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
  // GPU-direct emulation: what MKERNEL_NET_GDR (or its default) says, unless the caller opts out.
  const bool want_gdr = cfg.gpu_direct && gpu_direct_env();
  const bool offer = offer_gpu_memory(cfg.net, want_gdr);
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
    check_cuda(malloc_after_torch_cache(&impl->gpu_recv, sizes[0]), op,
               "cudaMalloc (inter-node receive buffer)");
    check_cuda(malloc_after_torch_cache(&impl->gpu_send, sizes[1]), op,
               "cudaMalloc (inter-node send buffer)");
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
  // GPU-direct emulation: the copy engine the transport moves the bytes with (ABI v3 tail).
  const bool gdr = offer && chosen_net(cfg.net) == "loopback" && want_gdr;
  impl->module_loading = module_loading_mode();
  if (gdr) {
    TORCH_CHECK(api.version >= 3, op,
                ": MKERNEL_NET_GDR=1 needs the mkernel core's device copier (C ABI v3), but the loaded core serves "
                "ABI v", api.version, ": rebuild build/core (make core) together with the extension");
    if (impl->module_loading == "lazy" && !copier_process_env()) {  // the helper's copies are another client's
      TORCH_WARN_ONCE(op, ": MKERNEL_NET_GDR=1 under lazy CUDA module loading: a kernel loaded for the first time "
                      "while an inter-node kernel waits may synchronize the context ahead of the device copier's "
                      "copies, a stall until MKERNEL_OP_TIMEOUT. `import mkernel` sets CUDA_MODULE_LOADING=EAGER "
                      "under MKERNEL_NET_GDR=1, but CUDA was initialized before that import (or "
                      "CUDA_MODULE_LOADING was set otherwise): import mkernel first, or export "
                      "CUDA_MODULE_LOADING=EAGER. The collectives load their kernels before their first launch; "
                      "other ops' first calls may stall.");
    }
    impl->copier = std::make_unique<NetCopier>();
    impl->copier->loading = impl->module_loading;
    impl->copier->open(op, cfg.device);
    impl->copier->send_id = kSendBuffer;
    impl->copier->recv_id = kRecvBuffer;
    dc.device_copy_start = &NetCopier::start;
    dc.device_copy_done = &NetCopier::done;
    dc.device_copy_ctx = impl->copier.get();
    const bool in_process = !copier_process_env();
    if (!in_process) {
      // One helper for the rank's paths on this device, each on a channel; the first path starts
      // it here, before the session exchange below, so its CUDA context comes up while the ranks meet.
      try {
        impl->copier->proc = CopierProcess::shared(cfg.device, [op] { return copier_launch(op); });
        impl->copier->channel = impl->copier->proc->acquire();
      } catch (const std::exception& e) {
        TORCH_CHECK(false, op, ": ", e.what());
      }
    }
    impl->map_peer_recv(op, s, in_process);  // collective; complete before the proxy thread exists
  }
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
  // What was asked must be what the core delivered: a GPU-direct request that came back as host
  // staging (a core without the emulation, another transport) is an error, never a silent fallback.
  TORCH_CHECK(!gdr || (impl->gpu_memory && impl->transport == "loopback"), op,
              ": MKERNEL_NET_GDR=1 asked the loopback transport for GPU-direct buffers, but the core's data path "
              "gave ", impl->gpu_memory ? "GPU" : "host staging", " buffers on transport \"", impl->transport,
              "\": the loaded core (", core_api().get_version(), ") lacks the GPU-direct emulation; rebuild build/core "
              "(make core) together with the extension, or unset MKERNEL_NET_GDR");
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
  view.spare_ctas = gdr ? kGdrSpareCtas : 0;
  view.gpu_direct = gdr ? 1u : 0u;

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
bool NetPath::gpu_direct() const { return impl_->gpu_direct; }
std::string NetPath::module_loading() const { return impl_->module_loading; }
std::string NetPath::transport() const { return impl_->transport; }
std::string NetPath::copier() const {
  if (!impl_ || !impl_->gpu_direct) return "";
  return impl_->copier && impl_->copier->proc ? impl_->copier->proc->what() : "thread";
}

std::string NetPath::copier_submit() const {
  if (!impl_ || !impl_->copier) return "{}";
  return impl_->copier->submit_info();
}

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
