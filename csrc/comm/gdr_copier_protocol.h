// The GPU-direct emulation's copier process (the emulated NIC's DMA engine): the shared-memory
// block between a rank and its helper, and the helper's loop. Torch-free and CUDA-header-free on
// purpose: the helper is a small executable (csrc/tools/gdr_copier_main.cpp, built beside the
// extension) that reaches libcudart through dlopen, so it starts in a fraction of a second instead
// of importing torch (s12run1: four helpers importing torch at once were not ready after 5 s).
//
// Protocol (one block per rank process and CUDA device, a memfd the helper gets as fd 3):
//   - the rank spawns the helper at the first GPU-direct path's opening and shares it among all
//     its paths on that device (a group keeps its earlier, smaller paths open after a growth,
//     and a second group has its own): each path uses a channel of the block;
//   - the helper creates its CUDA context, then stores state kReady;
//   - map (per channel): the rank writes the IPC handles (the path's send area, the other nodes'
//     receive areas) and release-stores map_request = g; the helper finishes the channel's
//     copies, closes its old mappings, opens the new ones and release-stores map_done = g (or
//     state kFailed with the message). A request without a send handle only closes (the path
//     is going away);
//   - post (per channel): the rank writes a descriptor at ring[posted % kRing] and
//     release-stores posted + 1; the helper copies in order on the channel's stream and
//     release-stores `completed` once a copy's event completed: copy `token` is done when
//     completed > token. The helper submits what is posted in batches (up to
//     MKERNEL_NET_GDR_COPIER_BATCH copies, default 256, and 16 MiB) with one event per batch, so
//     `completed` may advance by a batch at once;
//   - submission (xnode7): the rank writes submit_asked before the spawn; the helper submits each
//     batch with cudaMemcpyBatchAsync (its copies, stream order, the PreferOverlapWithCompute hint:
//     the copy engines, not a copy kernel on the SMs that the fused ops' persistent grids hold),
//     or with a plain cudaMemcpyAsync (asked, or the fallback where the runtime has no batch API
//     or refuses it: noted once in submit_note); submit_path says which ran, the counters below
//     what the copies cost;
//   - the helper exits when the rank stores kStop, when the rank's end of the lifeline pipe
//     (fd 4) closes (the rank exited or was killed: no orphan keeps the GPU or MPS busy), or
//     after a CUDA error (state kFailed, cudaError_t in `error`, what failed in `message`).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

namespace mkernel::comm {

// cudaIpcMemHandle_t's bytes (CUDA_IPC_HANDLE_SIZE; the same layout, checked where CUDA is seen).
struct CopierIpcHandle {
  char reserved[64];
};

constexpr int kCopierMaxRanks = 32;  // == kMaxRanks (group_device.h), checked in gdr_copier_process.cpp

// cudaMemcpyAttributes' layout (driver_types.h, CUDA >= 12.8; checked in gdr_copier_launch.cpp).
struct CopierMemLocation {
  int32_t type;
  int32_t id;
};
struct CopierMemcpyAttributes {
  int32_t src_access_order;
  CopierMemLocation src_loc_hint;
  CopierMemLocation dst_loc_hint;
  uint32_t flags;
};

// How the helper submits a copy (CopierBlock::submit_asked / submit_path).
enum CopierSubmit : uint32_t {
  kCopierSubmitNone = 0,           // no copy submitted yet
  kCopierSubmitCe = 1,             // cudaMemcpyBatchAsync + PreferOverlapWithCompute (the copy engines)
  kCopierSubmitPlain = 2,          // cudaMemcpyAsync, as asked (MKERNEL_NET_GDR_COPIER_SUBMIT=plain)
  kCopierSubmitPlainFallback = 3,  // cudaMemcpyAsync: the batch API is absent or refused (submit_note)
};
inline const char* copier_submit_name(uint32_t s) {
  switch (s) {
    case kCopierSubmitNone: return "none";
    case kCopierSubmitCe: return "batch_ce";
    case kCopierSubmitPlain: return "memcpy";
    case kCopierSubmitPlainFallback: return "memcpy_fallback";
    default: return "?";
  }
}

// What the copies cost, summed over every copy the helper (or the in-process copier) retired:
// latency = submission to completion seen (queueing behind the stream's earlier copies included);
// service = completion seen minus the later of its submission and the previous copy's completion
// on the same stream (about the copy's own time while copies queue back to back). Polling
// granularity: the helper's loop (spins, then 5 us naps). submits / submit_ns: the helper's
// submissions (one batch of posted copies and one event each, MKERNEL_NET_GDR_COPIER_BATCH) and
// the host time spent in their CUDA calls, so that a slow copy's time splits into the submitting
// call's (host, driver) and the GPU's. Written by one thread, read anywhere.
struct CopierStats {
  std::atomic<uint64_t> copies{0};
  std::atomic<uint64_t> bytes{0};
  std::atomic<uint64_t> latency_ns{0};
  std::atomic<uint64_t> latency_max_ns{0};
  std::atomic<uint64_t> service_ns{0};
  std::atomic<uint64_t> service_max_ns{0};
  std::atomic<uint64_t> submits{0};
  std::atomic<uint64_t> submit_ns{0};
  std::atomic<uint64_t> submit_max_ns{0};
  void add_submit(uint64_t ns) {
    submits.store(submits.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
    submit_ns.store(submit_ns.load(std::memory_order_relaxed) + ns, std::memory_order_relaxed);
    if (ns > submit_max_ns.load(std::memory_order_relaxed)) submit_max_ns.store(ns, std::memory_order_relaxed);
  }
  void add(uint64_t b, uint64_t lat, uint64_t svc) {
    copies.store(copies.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
    bytes.store(bytes.load(std::memory_order_relaxed) + b, std::memory_order_relaxed);
    latency_ns.store(latency_ns.load(std::memory_order_relaxed) + lat, std::memory_order_relaxed);
    service_ns.store(service_ns.load(std::memory_order_relaxed) + svc, std::memory_order_relaxed);
    if (lat > latency_max_ns.load(std::memory_order_relaxed)) latency_max_ns.store(lat, std::memory_order_relaxed);
    if (svc > service_max_ns.load(std::memory_order_relaxed)) service_max_ns.store(svc, std::memory_order_relaxed);
  }
};

struct CopierDesc {
  int32_t peer;
  uint32_t map;  // the mapping generation the copy was posted under (map_request then)
  uint64_t local_off, remote_off, bytes;
};

// One path's copies: its mapping and its ring.
struct CopierChannel {
  static constexpr uint32_t kRing = 1024;  // 2 x MK_DEVICE_COPIES_IN_FLIGHT (512) per data path
  // The mapping the rank asks for (valid when map_request is published) and the one in place.
  std::atomic<uint64_t> map_request;
  std::atomic<uint64_t> map_done;
  std::atomic<uint32_t> opened;  // IPC handles opened for the current map request
  uint32_t has_send;
  int32_t world;
  uint32_t reserved;
  CopierIpcHandle send;
  uint64_t send_bytes;
  uint8_t has_recv[kCopierMaxRanks];
  CopierIpcHandle recv[kCopierMaxRanks];
  uint64_t recv_bytes;
  std::atomic<uint64_t> posted;
  std::atomic<uint64_t> completed;
  CopierDesc ring[kRing];
};

struct CopierBlock {
  static constexpr uint32_t kMagic = 0x4d4b4350u;  // "MKCP"
  static constexpr uint32_t kVersion = 4;  // 3: submission mode and stats (xnode7); 4: batches, submit time
  // GPU-direct paths open at once per rank and device: a group keeps every path it grew out of
  // (power-of-two sizes from 1 MiB: about ten), and a job may hold a few groups.
  static constexpr int kChannels = 64;
  enum State : uint32_t { kInit = 0, kReady = 1, kFailed = 2, kStop = 3 };
  // How far the helper got (for the rank's error when it is not ready in time).
  enum Stage : uint32_t {
    kSpawned = 0,        // nothing from the helper yet (exec, dynamic loading, the interpreter)
    kRuntimeLoaded = 1,  // libcudart loaded; creating the CUDA context
    kContextUp = 2,      // context created (then state kReady)
    kMapping = 3,        // opening IPC handles of a map request (the channel's `opened` counts)
  };
  uint32_t magic;
  uint32_t version;
  int32_t device;
  int32_t rank_pid;
  std::atomic<uint32_t> state;
  std::atomic<uint32_t> stage;
  std::atomic<int32_t> mapping_channel;  // the channel of the last map request the helper took
  int32_t error;                         // the helper's cudaError_t when it failed
  char message[256];                     // what failed, NUL-terminated
  uint32_t submit_asked;                 // CopierSubmit the rank asks for (kCopierSubmitCe / Plain)
  std::atomic<uint32_t> submit_path;     // CopierSubmit of the last copy submitted
  int32_t submit_error;                  // the batch call's cudaError_t where it fell back (0: none)
  char submit_note[192];                 // why it fell back, NUL-terminated (written before submit_path)
  CopierStats stats;                     // every channel's copies
  CopierChannel channels[kChannels];
};
static_assert(std::atomic<uint64_t>::is_always_lock_free && std::atomic<uint32_t>::is_always_lock_free,
              "the copier block's atomics are shared between processes");

// The CUDA runtime calls the helper makes, as plain function pointers (errors are cudaError_t
// values, streams and events opaque pointers): filled by dlsym in the executable and from the
// linked runtime in the extension's fallback helper (_gdr_copier_serve).
struct CopierCuda {
  int (*set_device)(int device);
  int (*ipc_open)(void** ptr, CopierIpcHandle handle, unsigned int flags);
  int (*ipc_close)(void* ptr);
  int (*stream_create)(void** stream, unsigned int flags);
  int (*stream_synchronize)(void* stream);
  int (*stream_destroy)(void* stream);
  int (*memcpy_async)(void* dst, const void* src, size_t bytes, int kind, void* stream);
  int (*event_create)(void** event, unsigned int flags);
  int (*event_record)(void* event, void* stream);
  int (*event_query)(void* event);
  int (*event_destroy)(void* event);
  int (*get_last_error)();
  const char* (*get_error_string)(int error);
  // Optional (nullptr where the runtime lacks it: then the plain copy, noted once): the copy-engine
  // submission. CUDA >= 13.0's cudaMemcpyBatchAsync, or 12.8 / 12.9's (with failIdx) in _v12.
  int (*memcpy_batch_async)(void* const* dsts, const void* const* srcs, const size_t* sizes, size_t count,
                            CopierMemcpyAttributes* attrs, size_t* attrs_idxs, size_t num_attrs, void* stream);
  int (*memcpy_batch_async_v12)(void** dsts, void** srcs, size_t* sizes, size_t count, CopierMemcpyAttributes* attrs,
                                size_t* attrs_idxs, size_t num_attrs, size_t* fail_idx, void* stream);
};

// cudaError_t / flag values the loop uses (driver_types.h; checked in gdr_copier_process.cpp).
constexpr int kCopierCudaSuccess = 0;
constexpr int kCopierCudaInvalidValue = 1;
constexpr int kCopierCudaNotReady = 600;
constexpr int kCopierCudaUnknown = 999;
constexpr int kCopierMemcpyDeviceToDevice = 3;
constexpr unsigned int kCopierStreamNonBlocking = 0x01;
constexpr unsigned int kCopierEventDisableTiming = 0x02;
constexpr unsigned int kCopierIpcLazyEnablePeerAccess = 0x01;
constexpr int kCopierCudaNotSupported = 801;
constexpr int32_t kCopierSrcAccessOrderStream = 1;
constexpr uint32_t kCopierMemcpyFlagPreferOverlapWithCompute = 0x1;

// Child file descriptors of the helper.
constexpr int kCopierBlockFd = 3;
constexpr int kCopierLifelineFd = 4;

// The helper's side: maps the block at `block_fd`, watches `lifeline_fd` (EOF: the rank is gone,
// exit at once), serves copies until stopped. Returns 0 after a stop, 1 after a failure recorded
// in the block, 2 when the block could not be mapped (message on stderr).
int copier_serve(int block_fd, int lifeline_fd, const CopierCuda& cuda);

}  // namespace mkernel::comm
