// The GPU-direct emulation's copier as a process of its own: the emulated NIC's DMA engine
// (MKERNEL_NET_GDR=1 with MKERNEL_NET_GDR_COPIER=process).
//
// Why a process: the in-process copier (net_path.cpp NetCopier) submits its copies to the rank's
// own CUDA context while the rank's kernels wait for them, and CUDA promises no forward progress
// between streams: s11run2 saw a copy submitted with eager module loading stay unfinished for 20 s
// while the MoE's exchange had copy-engine work queued behind spinning kernels on other streams
// (benchmarks/NOTES.md "Session 11, moe8"). A helper process is another CUDA client with its own
// work queues, like a NIC is another device: nothing the rank queues can hold its copies back.
// s12run1 ran it (MoE across 2 emulated nodes passed for the first time); there the helper was
// Python importing torch, spawned again at every growth of the path, and four of them starting at
// once were not ready within the op timeout (5 s). Now (session 12, moe9):
//   - the helper is the executable mkernel-gdr-copier (csrc/tools/gdr_copier_main.cpp; no torch,
//     the CUDA runtime by dlopen); the torch-importing helper remains the fallback where the
//     executable is missing (CopierLaunch says which one ran);
//   - one helper serves every GPU-direct path of the rank on a device, each path on a channel of
//     its own (a group keeps its earlier paths after a growth, and each growth used to start a
//     helper that then stayed, polling); it is started at the first path's opening before the
//     session exchange, so its CUDA context comes up while the ranks meet;
//   - readiness is bounded by its own timeout (MKERNEL_NET_GDR_COPIER_START_S, default the larger
//     of 30 s and the op timeout) and the error names the stage it reached;
//   - it ends with the rank: a lifeline pipe whose EOF the helper watches on a thread of its own.
//
// This file and gdr_copier_process.cpp are torch-free and CUDA-free (errors are
// std::runtime_error; the extension's glue adds the op's name), so the protocol is tested on a
// CPU machine with a stand-in runtime (tests/comm/test_gdr_copier_process.py).
#pragma once

#include <sys/types.h>

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "comm/gdr_copier_protocol.h"

namespace mkernel::comm {

// The stats' JSON members (no braces: "copies":..,"mib":..,latency / service us), and a string
// made safe inside JSON quotes.
std::string copier_stats_json(const CopierStats& stats);
std::string copier_json_text(const char* s);

// How to start the helper: `argv[0]` is run as `path`; "{block}" and "{lifeline}" in argv are
// replaced by the child's descriptor numbers. `what` names it in errors.
struct CopierLaunch {
  std::string path;
  std::vector<std::string> argv;
  std::string what;
  uint32_t submit = kCopierSubmitCe;  // CopierSubmit the helper is asked for (block's submit_asked)
};

// The rank's side: owns the block, the lifeline and the helper process; shared by the rank's
// GPU-direct paths on one device (shared()), each on a channel (acquire / release).
class CopierProcess {
 public:
  // Spawns the helper and returns at once (it creates its CUDA context meanwhile). Throws
  // std::runtime_error when the process cannot be started.
  CopierProcess(const CopierLaunch& launch, int device);
  ~CopierProcess();  // kStop, then reaps the helper (bounded; the lifeline closes, SIGKILL last)
  CopierProcess(const CopierProcess&) = delete;
  CopierProcess& operator=(const CopierProcess&) = delete;

  // The helper of this process on `device` while some path holds it and it works; else a new
  // one started with `launch()`.
  static std::shared_ptr<CopierProcess> shared(int device, const std::function<CopierLaunch()>& launch);

  // A free channel for one path (throws when all kChannels are taken); release() after its unmap.
  int acquire();
  void release(int channel);

  // Gives the helper the areas of `channel`'s copies (`recv[r]` set for the ranks whose receive
  // areas the copies write) and waits until it opened them: `ready_ms` bounds the helper's start,
  // `map_ms` the mapping. Throws std::runtime_error naming the stage it reached.
  void map(int channel, const CopierIpcHandle& send, uint64_t send_bytes,
           const std::vector<const CopierIpcHandle*>& recv, uint64_t recv_bytes, int64_t ready_ms, int64_t map_ms);
  // Closes `channel`'s mapping (its areas are about to be freed): "" or why not (bounded).
  std::string unmap(int channel, int64_t timeout_ms);

  // One copy: returns 0 and its token, or a cudaError_t value (the helper failed or died).
  int32_t post(int channel, int32_t peer, uint64_t local_off, uint64_t remote_off, uint64_t bytes, uint64_t* token);
  // Whether copy `token` of `channel` completed; a cudaError_t value when the helper failed or died.
  int32_t done(int channel, uint64_t token, int32_t* is_done);

  // False once the helper failed or exited.
  bool usable();
  pid_t pid() const { return pid_; }
  const std::string& what() const { return launch_.what; }
  // The helper's progress in words (errors).
  std::string stage() const;
  // The helper's recorded failure ("" if none).
  std::string failure() const;
  // The copies' submission and cost as a JSON object: asked / ran ("batch_ce", "memcpy",
  // "memcpy_fallback", "none" before the first copy), the fallback's note, and the stats (copies,
  // MiB, mean / max latency and service in us), summed over every path of the helper.
  std::string submit_info() const;

 private:
  void start(int device);
  void stop();  // stops and reaps the helper, unmaps the block (idempotent)
  // Waits until `ok()` holds: throws on failure, exit or timeout (naming `waiting_for`).
  template <typename Pred>
  void wait_until(Pred ok, int64_t timeout_ms, const std::string& waiting_for);
  bool reap(int* status);  // true when the helper has exited (reaped now or before)
  int32_t failed();

  CopierLaunch launch_;
  int fd_ = -1;
  int lifeline_ = -1;  // write end; the helper's read end sees EOF when it closes
  CopierBlock* block_ = nullptr;
  pid_t pid_ = -1;
  // Written by whichever thread reaps the helper (a proxy's done() or the rank's calls).
  std::atomic<int> exit_status_{0};
  std::atomic<bool> exited_{false};
  std::atomic<bool> reported_{false};
  std::mutex mu_;  // channel allocation
  bool in_use_[CopierBlock::kChannels] = {};
  uint64_t map_gen_[CopierBlock::kChannels] = {};  // per channel: the last generation asked
  std::atomic<uint32_t> polls_{0};
};

}  // namespace mkernel::comm
