// The GPU-direct emulation's copier as a process of its own: the emulated NIC's DMA engine
// (MKERNEL_NET_GDR=1 with MKERNEL_NET_GDR_COPIER=process; opt-in, not yet run on a GPU).
//
// Why a process: the in-process copier (net_path.cpp NetCopier) submits its copies to the rank's
// own CUDA context while the rank's kernels wait for them, and CUDA promises no forward progress
// between streams: s11run2 saw a copy submitted with eager module loading stay unfinished for 20 s
// while the MoE's exchange had copy-engine work queued behind spinning kernels on other streams
// (benchmarks/NOTES.md "Session 11, moe8"). A helper process is another CUDA client with its own
// work queues, like a NIC is another device: nothing the rank queues can hold its copies back.
//
// Protocol, over one shared-memory block (memfd, inherited by the helper):
//   - the rank fills the IPC handles (its send area, every other node's receive area), spawns
//     `<python> -c <load the extension .so> ... torch.ops.mkernel._gdr_copier_serve(fd)` and waits
//     for state kReady (bounded);
//   - post(): the rank writes a descriptor at ring[posted % kRing] and release-stores posted + 1;
//     the helper copies in order on its own stream and release-stores `completed` once each
//     copy's event completed: copy `token` is done when completed > token;
//   - the helper exits when the rank stores kStop, when the rank dies (PR_SET_PDEATHSIG), or on a
//     CUDA error (state kFailed, the message in the block).
#pragma once

#ifdef MKERNEL_WITH_CUDA

#include <cuda_runtime_api.h>
#include <sys/types.h>

#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

#include "kernels/comm/group_device.h"

namespace mkernel::comm {

struct CopierDesc {
  int32_t peer;
  uint32_t reserved;
  uint64_t local_off, remote_off, bytes;
};

struct CopierBlock {
  static constexpr uint32_t kMagic = 0x4d4b4350u;  // "MKCP"
  static constexpr uint32_t kVersion = 1;
  static constexpr uint32_t kRing = 256;  // > MK_DEVICE_COPIES_IN_FLIGHT: posting never wraps
  enum State : uint32_t { kInit = 0, kReady = 1, kFailed = 2, kStop = 3 };
  uint32_t magic;
  uint32_t version;
  int32_t device;
  int32_t world;
  std::atomic<uint32_t> state;
  int32_t error;            // the helper's cudaError_t when it failed
  char message[256];        // what failed, NUL-terminated
  std::atomic<uint64_t> posted;
  std::atomic<uint64_t> completed;
  cudaIpcMemHandle_t send;  // this rank's send area
  uint64_t send_bytes;
  uint8_t has_recv[kMaxRanks];
  cudaIpcMemHandle_t recv[kMaxRanks];  // other nodes' receive areas
  uint64_t recv_bytes;
  CopierDesc ring[kRing];
};
static_assert(std::atomic<uint64_t>::is_always_lock_free && std::atomic<uint32_t>::is_always_lock_free,
              "the copier block's atomics are shared between processes");

// The rank's side: owns the block and the helper process.
class CopierProcess {
 public:
  // Spawns the helper and waits until it opened every handle (timeout_ms; errors name `op`).
  // `recv[r]` is set for the ranks whose receive areas the copies write.
  CopierProcess(const char* op, int device, const cudaIpcMemHandle_t& send, uint64_t send_bytes,
                const std::vector<const cudaIpcMemHandle_t*>& recv, uint64_t recv_bytes, int64_t timeout_ms);
  ~CopierProcess();  // kStop, then reaps the helper (bounded; SIGKILL after)
  CopierProcess(const CopierProcess&) = delete;
  CopierProcess& operator=(const CopierProcess&) = delete;

  // One copy: returns 0 and its token, or a cudaError_t (the helper failed).
  int32_t post(int32_t peer, uint64_t local_off, uint64_t remote_off, uint64_t bytes, uint64_t* token);
  // Whether copy `token` completed; a cudaError_t when the helper failed or died.
  int32_t done(uint64_t token, int32_t* is_done);

 private:
  void start(const char* op, int device, const cudaIpcMemHandle_t& send, uint64_t send_bytes,
             const std::vector<const cudaIpcMemHandle_t*>& recv, uint64_t recv_bytes, int64_t timeout_ms);
  void release();  // stops and reaps the helper, unmaps the block (idempotent)
  int32_t failed();
  int fd_ = -1;
  CopierBlock* block_ = nullptr;
  pid_t pid_ = -1;
  bool reported_ = false;
};

}  // namespace mkernel::comm

#endif  // MKERNEL_WITH_CUDA
