// CopierProcess (gdr_copier_process.h): the GPU-direct emulation's copier in a helper process,
// and the helper's loop (torch.ops.mkernel._gdr_copier_serve). Opt-in, not yet run on a GPU.
#ifdef MKERNEL_WITH_CUDA

#include "comm/gdr_copier_process.h"

#include <c10/util/Exception.h>
#include <cuda_runtime.h>
#include <dlfcn.h>
#include <signal.h>
#include <spawn.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <torch/library.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <new>
#include <thread>

extern char** environ;

namespace mkernel::comm {
namespace {

// The helper's loop (in the helper process). Returns when the rank stops it or dies, or after a
// CUDA error (recorded in the block first).
void copier_serve(int64_t fd) {
  (void)prctl(PR_SET_PDEATHSIG, SIGKILL);  // the rank's death ends the helper
  (void)prctl(PR_SET_TIMERSLACK, 1000UL);   // its idle naps: ~5 us, not the default 50 us slack
  void* p = mmap(nullptr, sizeof(CopierBlock), PROT_READ | PROT_WRITE, MAP_SHARED, static_cast<int>(fd), 0);
  TORCH_CHECK(p != MAP_FAILED, "mkernel._gdr_copier_serve: mmap of fd ", fd, " failed: ", std::strerror(errno));
  auto* b = static_cast<CopierBlock*>(p);
  TORCH_CHECK(b->magic == CopierBlock::kMagic && b->version == CopierBlock::kVersion,
              "mkernel._gdr_copier_serve: fd ", fd, " is not a GPU-direct copier block of this version");
  const pid_t rank = getppid();
  auto fail = [b](cudaError_t e, const char* what) {
    b->error = static_cast<int32_t>(e);
    std::snprintf(b->message, sizeof b->message, "%s: %s", what, cudaGetErrorString(e));
    b->state.store(CopierBlock::kFailed, std::memory_order_release);
  };
  cudaError_t e = cudaSetDevice(b->device);
  if (e != cudaSuccess) return fail(e, "cudaSetDevice");
  void* send = nullptr;
  if ((e = cudaIpcOpenMemHandle(&send, b->send, cudaIpcMemLazyEnablePeerAccess)) != cudaSuccess) {
    return fail(e, "cudaIpcOpenMemHandle (the rank's send area)");
  }
  std::vector<uint8_t*> recv(kMaxRanks, nullptr);
  for (int r = 0; r < b->world && r < kMaxRanks; ++r) {
    if (!b->has_recv[r]) continue;
    void* q = nullptr;
    if ((e = cudaIpcOpenMemHandle(&q, b->recv[r], cudaIpcMemLazyEnablePeerAccess)) != cudaSuccess) {
      return fail(e, "cudaIpcOpenMemHandle (a peer's receive area)");
    }
    recv[r] = static_cast<uint8_t*>(q);
  }
  cudaStream_t stream = nullptr;
  if ((e = cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking)) != cudaSuccess) {
    return fail(e, "cudaStreamCreateWithFlags");
  }
  std::vector<cudaEvent_t> events(CopierBlock::kRing, nullptr);
  for (auto& ev : events) {
    if ((e = cudaEventCreateWithFlags(&ev, cudaEventDisableTiming)) != cudaSuccess) return fail(e, "cudaEventCreate");
  }
  uint32_t expected = CopierBlock::kInit;  // not if the rank already gave up (kStop)
  if (!b->state.compare_exchange_strong(expected, CopierBlock::kReady, std::memory_order_acq_rel)) return;

  uint64_t issued = 0, finished = 0, idle = 0;
  while (b->state.load(std::memory_order_acquire) == CopierBlock::kReady) {
    bool progress = false;
    const uint64_t posted = b->posted.load(std::memory_order_acquire);
    while (issued < posted && issued - finished < CopierBlock::kRing) {
      const CopierDesc d = b->ring[issued % CopierBlock::kRing];
      if (d.peer < 0 || d.peer >= kMaxRanks || recv[d.peer] == nullptr || d.local_off + d.bytes > b->send_bytes ||
          d.remote_off + d.bytes > b->recv_bytes) {
        return fail(cudaErrorInvalidValue, "a copy outside the mapped areas");
      }
      e = cudaMemcpyAsync(recv[d.peer] + d.remote_off, static_cast<uint8_t*>(send) + d.local_off, d.bytes,
                          cudaMemcpyDeviceToDevice, stream);
      if (e == cudaSuccess) e = cudaEventRecord(events[issued % CopierBlock::kRing], stream);
      if (e != cudaSuccess) return fail(e, "cudaMemcpyAsync");
      ++issued;
      progress = true;
    }
    while (finished < issued) {
      e = cudaEventQuery(events[finished % CopierBlock::kRing]);
      if (e == cudaErrorNotReady) {
        (void)cudaGetLastError();
        break;
      }
      if (e != cudaSuccess) return fail(e, "a copy");
      b->completed.store(++finished, std::memory_order_release);
      progress = true;
    }
    if (progress) {
      idle = 0;
      continue;
    }
    // Idle: spin ~100 us (a link op's latency), then nap 5 us between polls; check the rank.
    if (++idle > 2000) std::this_thread::sleep_for(std::chrono::microseconds(5));
    if ((idle & 1023) == 0 && getppid() != rank) break;
  }
  (void)cudaStreamSynchronize(stream);
  for (cudaEvent_t ev : events) (void)cudaEventDestroy(ev);
  (void)cudaStreamDestroy(stream);
  for (uint8_t* q : recv) {
    if (q != nullptr) (void)cudaIpcCloseMemHandle(q);
  }
  (void)cudaIpcCloseMemHandle(send);
  munmap(p, sizeof(CopierBlock));
}

// The shared object this code lives in (the helper loads it to reach _gdr_copier_serve).
std::string extension_path() {
  Dl_info info{};
  if (dladdr(reinterpret_cast<void*>(&copier_serve), &info) == 0 || info.dli_fname == nullptr) return "";
  return info.dli_fname;
}

}  // namespace

CopierProcess::CopierProcess(const char* op, int device, const cudaIpcMemHandle_t& send, uint64_t send_bytes,
                             const std::vector<const cudaIpcMemHandle_t*>& recv, uint64_t recv_bytes,
                             int64_t timeout_ms) {
  try {
    start(op, device, send, send_bytes, recv, recv_bytes, timeout_ms);
  } catch (...) {
    release();  // no helper outlives a failed opening
    throw;
  }
}

void CopierProcess::start(const char* op, int device, const cudaIpcMemHandle_t& send, uint64_t send_bytes,
                          const std::vector<const cudaIpcMemHandle_t*>& recv, uint64_t recv_bytes,
                          int64_t timeout_ms) {
  TORCH_CHECK(recv.size() <= static_cast<size_t>(kMaxRanks), op, ": GPU-direct copier: ", recv.size(), " ranks");
  fd_ = memfd_create("mkernel-gdr-copier", 0);  // no MFD_CLOEXEC: the helper inherits it
  TORCH_CHECK(fd_ >= 0, op, ": memfd_create (GPU-direct copier) failed: ", std::strerror(errno));
  TORCH_CHECK(ftruncate(fd_, sizeof(CopierBlock)) == 0, op, ": ftruncate (GPU-direct copier) failed: ",
              std::strerror(errno));
  void* p = mmap(nullptr, sizeof(CopierBlock), PROT_READ | PROT_WRITE, MAP_SHARED, fd_, 0);
  TORCH_CHECK(p != MAP_FAILED, op, ": mmap (GPU-direct copier) failed: ", std::strerror(errno));
  block_ = new (p) CopierBlock();
  block_->magic = CopierBlock::kMagic;
  block_->version = CopierBlock::kVersion;
  block_->device = device;
  block_->world = static_cast<int32_t>(recv.size());
  block_->send = send;
  block_->send_bytes = send_bytes;
  block_->recv_bytes = recv_bytes;
  for (size_t r = 0; r < recv.size(); ++r) {
    if (recv[r] == nullptr) continue;
    block_->has_recv[r] = 1;
    block_->recv[r] = *recv[r];
  }

  // The interpreter (python/mkernel/_module_loading.py exports it under MKERNEL_NET_GDR=1) loads
  // torch and this extension only, under lazy module loading (it launches no kernel).
  const char* py = std::getenv("MKERNEL_PYTHON");
  TORCH_CHECK(py != nullptr && *py != '\0', op, ": MKERNEL_NET_GDR_COPIER=process needs the interpreter in "
              "MKERNEL_PYTHON (import mkernel sets it under MKERNEL_NET_GDR=1)");
  const std::string so = extension_path();
  TORCH_CHECK(!so.empty(), op, ": GPU-direct copier: cannot find the extension's shared object (dladdr)");
  const std::string code =
      "import sys, torch; torch.ops.load_library(sys.argv[1]); torch.ops.mkernel._gdr_copier_serve(int(sys.argv[2]))";
  // The helper gets the block as fd 3 and, where glibc can, no other descriptor of the rank (its
  // sockets must close when the rank dies or closes them, not when the helper does).
  constexpr int kChildFd = 3;
  const std::string fd_arg = std::to_string(kChildFd);
  std::vector<std::string> env;
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
    if (std::strncmp(*e, "CUDA_MODULE_LOADING=", 20) != 0) env.emplace_back(*e);
  }
  env.emplace_back("CUDA_MODULE_LOADING=LAZY");
  std::vector<char*> envp;
  for (auto& s : env) envp.push_back(s.data());
  envp.push_back(nullptr);
  std::string a0 = py, a1 = "-c", a2 = code, a3 = so, a4 = fd_arg;
  char* argv[] = {a0.data(), a1.data(), a2.data(), a3.data(), a4.data(), nullptr};
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  if (fd_ == kChildFd) {  // dup2 onto itself would keep FD_CLOEXEC semantics as they are: fine
    posix_spawn_file_actions_adddup2(&fa, fd_, 100);
    posix_spawn_file_actions_adddup2(&fa, 100, kChildFd);
  } else {
    posix_spawn_file_actions_adddup2(&fa, fd_, kChildFd);
  }
#if defined(__GLIBC__) && (__GLIBC__ > 2 || (__GLIBC__ == 2 && __GLIBC_MINOR__ >= 34))
  posix_spawn_file_actions_addclosefrom_np(&fa, kChildFd + 1);
#endif
  const int rc = posix_spawn(&pid_, py, &fa, nullptr, argv, envp.data());
  posix_spawn_file_actions_destroy(&fa);
  TORCH_CHECK(rc == 0, op, ": spawning the GPU-direct copier (", py, ") failed: ", std::strerror(rc));

  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  for (;;) {
    const uint32_t st = block_->state.load(std::memory_order_acquire);
    if (st == CopierBlock::kReady) return;
    if (st == CopierBlock::kFailed) {
      const std::string msg(block_->message);
      TORCH_CHECK(false, op, ": the GPU-direct copier process (pid ", pid_, ") failed: ", msg);
    }
    int status = 0;
    if (waitpid(pid_, &status, WNOHANG) == pid_) {
      pid_ = -1;
      TORCH_CHECK(false, op, ": the GPU-direct copier process exited before it was ready (status ", status,
                  "): its stderr says why");
    }
    TORCH_CHECK(std::chrono::steady_clock::now() < deadline, op, ": the GPU-direct copier process (pid ", pid_,
                ") was not ready after ", timeout_ms, " ms");
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
}

CopierProcess::~CopierProcess() { release(); }

void CopierProcess::release() {
  if (block_ != nullptr) block_->state.store(CopierBlock::kStop, std::memory_order_release);
  if (pid_ > 0) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    int status = 0;
    while (waitpid(pid_, &status, WNOHANG) == 0) {
      if (std::chrono::steady_clock::now() > deadline) {
        (void)kill(pid_, SIGKILL);
        (void)waitpid(pid_, &status, 0);
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  }
  pid_ = -1;
  if (block_ != nullptr) munmap(block_, sizeof(CopierBlock));
  block_ = nullptr;
  if (fd_ >= 0) close(fd_);
  fd_ = -1;
}

int32_t CopierProcess::failed() {
  if (!reported_) {
    reported_ = true;
    std::fprintf(stderr, "mkernel: the GPU-direct copier process (pid %d) failed: %s\n", static_cast<int>(pid_),
                 block_->message);
    std::fflush(stderr);
  }
  return block_->error != 0 ? block_->error : static_cast<int32_t>(cudaErrorUnknown);
}

int32_t CopierProcess::post(int32_t peer, uint64_t local_off, uint64_t remote_off, uint64_t bytes,
                            uint64_t* token) {
  if (block_->state.load(std::memory_order_acquire) != CopierBlock::kReady) return failed();
  const uint64_t n = block_->posted.load(std::memory_order_relaxed);
  if (n - block_->completed.load(std::memory_order_acquire) >= CopierBlock::kRing) {
    return static_cast<int32_t>(cudaErrorLaunchOutOfResources);  // the transport keeps far fewer in flight
  }
  block_->ring[n % CopierBlock::kRing] = CopierDesc{peer, 0, local_off, remote_off, bytes};
  block_->posted.store(n + 1, std::memory_order_release);
  *token = n;
  return 0;
}

int32_t CopierProcess::done(uint64_t token, int32_t* is_done) {
  *is_done = block_->completed.load(std::memory_order_acquire) > token ? 1 : 0;
  if (*is_done) return 0;
  if (block_->state.load(std::memory_order_acquire) != CopierBlock::kReady) return failed();
  return 0;
}

TORCH_LIBRARY_FRAGMENT(mkernel, m) { m.def("_gdr_copier_serve(int fd) -> ()", &copier_serve); }

}  // namespace mkernel::comm

#endif  // MKERNEL_WITH_CUDA
