// CopierProcess (gdr_copier_process.h): the rank's side of the GPU-direct copier helper.
// Torch-free and CUDA-free (see the header).
#include "comm/gdr_copier_process.h"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <map>
#include <new>
#include <stdexcept>
#include <thread>

extern char** environ;

namespace mkernel::comm {
namespace {

std::string errno_text(int e) { return std::string(std::strerror(e)); }

std::string exit_text(int status) {
  if (WIFEXITED(status)) return "exit status " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status)) return "killed by signal " + std::to_string(WTERMSIG(status));
  return "status " + std::to_string(status);
}

// A descriptor >= 10 with FD_CLOEXEC (so that dup2 onto the child's 3 / 4 never meets its source).
int high_cloexec(int fd) {
  const int h = fcntl(fd, F_DUPFD_CLOEXEC, 10);
  if (h < 0) throw std::runtime_error("GPU-direct copier: fcntl(F_DUPFD_CLOEXEC) failed: " + errno_text(errno));
  close(fd);
  return h;
}

}  // namespace

CopierProcess::CopierProcess(const CopierLaunch& launch, int device) : launch_(launch) {
  try {
    start(device);
  } catch (...) {
    stop();  // no helper outlives a failed start
    throw;
  }
}

CopierProcess::~CopierProcess() { stop(); }

std::shared_ptr<CopierProcess> CopierProcess::shared(int device, const std::function<CopierLaunch()>& launch) {
  static std::mutex mu;
  static std::map<int, std::weak_ptr<CopierProcess>> helpers;  // by device
  std::lock_guard<std::mutex> g(mu);
  if (auto p = helpers[device].lock(); p && p->usable()) return p;
  auto p = std::make_shared<CopierProcess>(launch(), device);
  helpers[device] = p;
  return p;
}

int CopierProcess::acquire() {
  std::lock_guard<std::mutex> g(mu_);
  for (int c = 0; c < CopierBlock::kChannels; ++c) {
    if (!in_use_[c]) {
      in_use_[c] = true;
      return c;
    }
  }
  throw std::runtime_error("the GPU-direct copier serves at most " + std::to_string(CopierBlock::kChannels) +
                           " inter-node paths per rank and device at once (groups x growths): close groups "
                           "that are no longer used, or reserve the largest size first (Context.reserve)");
}

void CopierProcess::release(int channel) {
  std::lock_guard<std::mutex> g(mu_);
  if (channel >= 0 && channel < CopierBlock::kChannels) in_use_[channel] = false;
}

void CopierProcess::start(int device) {
  int fd = memfd_create("mkernel-gdr-copier", MFD_CLOEXEC);
  if (fd < 0) throw std::runtime_error("GPU-direct copier: memfd_create failed: " + errno_text(errno));
  fd_ = high_cloexec(fd);
  if (ftruncate(fd_, sizeof(CopierBlock)) != 0) {
    throw std::runtime_error("GPU-direct copier: ftruncate failed: " + errno_text(errno));
  }
  void* p = mmap(nullptr, sizeof(CopierBlock), PROT_READ | PROT_WRITE, MAP_SHARED, fd_, 0);
  if (p == MAP_FAILED) throw std::runtime_error("GPU-direct copier: mmap failed: " + errno_text(errno));
  block_ = new (p) CopierBlock();
  block_->magic = CopierBlock::kMagic;
  block_->version = CopierBlock::kVersion;
  block_->device = device;
  block_->rank_pid = static_cast<int32_t>(getpid());
  block_->submit_asked = launch_.submit;

  int pipefd[2] = {-1, -1};
  if (pipe2(pipefd, O_CLOEXEC) != 0) throw std::runtime_error("GPU-direct copier: pipe2 failed: " + errno_text(errno));
  const int life_read = high_cloexec(pipefd[0]);
  lifeline_ = high_cloexec(pipefd[1]);

  std::vector<std::string> args = launch_.argv;
  for (auto& a : args) {
    if (a == "{block}") a = std::to_string(kCopierBlockFd);
    if (a == "{lifeline}") a = std::to_string(kCopierLifelineFd);
  }
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  // The helper loads no kernel of its own; under lazy loading a fallback helper that imports
  // torch does not load torch's kernels either.
  std::vector<std::string> env;
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
    if (std::strncmp(*e, "CUDA_MODULE_LOADING=", 20) != 0) env.emplace_back(*e);
  }
  env.emplace_back("CUDA_MODULE_LOADING=LAZY");
  std::vector<char*> envp;
  for (auto& s : env) envp.push_back(s.data());
  envp.push_back(nullptr);

  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, fd_, kCopierBlockFd);  // dup2 clears FD_CLOEXEC on the copy
  posix_spawn_file_actions_adddup2(&fa, life_read, kCopierLifelineFd);
#if defined(__GLIBC__) && (__GLIBC__ > 2 || (__GLIBC__ == 2 && __GLIBC_MINOR__ >= 34))
  posix_spawn_file_actions_addclosefrom_np(&fa, kCopierLifelineFd + 1);  // nothing else of the rank
#endif
  const int rc = posix_spawn(&pid_, launch_.path.c_str(), &fa, nullptr, argv.data(), envp.data());
  posix_spawn_file_actions_destroy(&fa);
  close(life_read);  // the helper holds the only read end
  if (rc != 0) {
    pid_ = -1;
    throw std::runtime_error("spawning the GPU-direct copier (" + launch_.what + ": " + launch_.path +
                             ") failed: " + errno_text(rc));
  }
}

std::string CopierProcess::stage() const {
  if (block_ == nullptr) return "no helper";
  const uint32_t st = block_->state.load(std::memory_order_acquire);
  const uint32_t sg = block_->stage.load(std::memory_order_acquire);
  const int c = block_->mapping_channel.load(std::memory_order_relaxed);
  const CopierChannel& ch = block_->channels[c >= 0 && c < CopierBlock::kChannels ? c : 0];
  const uint64_t want = ch.map_request.load(std::memory_order_acquire);
  const uint64_t done = ch.map_done.load(std::memory_order_acquire);
  std::string s;
  switch (sg) {
    case CopierBlock::kSpawned:
      s = "no sign of life from it yet (process start, dynamic loading" +
          std::string(launch_.what.find("python") != std::string::npos ? ", importing torch" : "") + ")";
      break;
    case CopierBlock::kRuntimeLoaded:
      s = "it loaded the CUDA runtime and is creating its CUDA context on device " + std::to_string(block_->device) +
          " (under MPS: a new client of the MPS server)";
      break;
    case CopierBlock::kContextUp:
      s = "its CUDA context is up";
      break;
    case CopierBlock::kMapping:
      s = "it is opening the CUDA IPC handles of channel " + std::to_string(c) + "'s mapping " +
          std::to_string(want) + " (" + std::to_string(ch.opened.load(std::memory_order_acquire)) + " opened)";
      break;
    default:
      s = "stage " + std::to_string(sg);
  }
  s += "; state " + std::string(st == CopierBlock::kReady    ? "ready"
                                : st == CopierBlock::kFailed ? "failed"
                                : st == CopierBlock::kStop   ? "stopped"
                                                             : "starting");
  if (sg == CopierBlock::kMapping) {
    s += ", mapping " + std::to_string(done) + " in place of " + std::to_string(want) + " asked";
  }
  return s;
}

std::string CopierProcess::failure() const {
  if (block_ == nullptr || block_->state.load(std::memory_order_acquire) != CopierBlock::kFailed) return "";
  return std::string(block_->message, strnlen(block_->message, sizeof block_->message));
}

std::string copier_stats_json(const CopierStats& st) {
  const uint64_t n = st.copies.load(std::memory_order_relaxed);
  const double d = n > 0 ? static_cast<double>(n) : 1.0;
  const uint64_t subs = st.submits.load(std::memory_order_relaxed);
  char buf[600];
  std::snprintf(buf, sizeof buf,
                "\"copies\":%llu,\"mib\":%.3f,\"latency_ms_total\":%.4f,\"service_ms_total\":%.4f,"
                "\"latency_us_mean\":%.2f,\"latency_us_max\":%.1f,\"service_us_mean\":%.2f,\"service_us_max\":%.1f,"
                "\"submits\":%llu,\"submit_ms_total\":%.4f,\"submit_us_mean\":%.2f,\"submit_us_max\":%.1f",
                static_cast<unsigned long long>(n), st.bytes.load(std::memory_order_relaxed) / 1048576.0,
                st.latency_ns.load(std::memory_order_relaxed) / 1e6,
                st.service_ns.load(std::memory_order_relaxed) / 1e6,
                st.latency_ns.load(std::memory_order_relaxed) / d / 1e3,
                st.latency_max_ns.load(std::memory_order_relaxed) / 1e3,
                st.service_ns.load(std::memory_order_relaxed) / d / 1e3,
                st.service_max_ns.load(std::memory_order_relaxed) / 1e3, static_cast<unsigned long long>(subs),
                st.submit_ns.load(std::memory_order_relaxed) / 1e6,
                st.submit_ns.load(std::memory_order_relaxed) / (subs > 0 ? static_cast<double>(subs) : 1.0) / 1e3,
                st.submit_max_ns.load(std::memory_order_relaxed) / 1e3);
  return buf;
}

std::string copier_json_text(const char* s) {
  std::string out;
  for (const char* p = s; *p != '\0'; ++p) {
    if (*p == '"' || *p == '\\') out += '\\';
    if (static_cast<unsigned char>(*p) >= 0x20) out += *p;
  }
  return out;
}

std::string CopierProcess::submit_info() const {
  if (block_ == nullptr) return "{}";
  const std::string note(block_->submit_note, strnlen(block_->submit_note, sizeof block_->submit_note));
  return std::string("{\"where\":\"process\",\"asked\":\"") + copier_submit_name(block_->submit_asked) +
         "\",\"ran\":\"" + copier_submit_name(block_->submit_path.load(std::memory_order_acquire)) +
         "\",\"note\":\"" + copier_json_text(note.c_str()) + "\"," + copier_stats_json(block_->stats) + "}";
}

bool CopierProcess::reap(int* status) {
  if (exited_) {
    *status = exit_status_;
    return true;
  }
  if (pid_ <= 0) return false;
  const pid_t r = waitpid(pid_, status, WNOHANG);
  if (r == pid_ || (r < 0 && errno == ECHILD)) {  // ECHILD: reaped elsewhere (SIGCHLD ignored)
    if (r < 0) *status = 0;
    exit_status_ = *status;
    exited_ = true;
    return true;
  }
  return false;
}

template <typename Pred>
void CopierProcess::wait_until(Pred ok, int64_t timeout_ms, const std::string& waiting_for) {
  const auto t0 = std::chrono::steady_clock::now();
  const auto deadline = t0 + std::chrono::milliseconds(timeout_ms);
  for (;;) {
    if (ok()) return;
    const std::string why = failure();
    if (!why.empty()) {
      throw std::runtime_error("the GPU-direct copier process (" + launch_.what + ", pid " + std::to_string(pid_) +
                               ") failed while " + waiting_for + ": " + why);
    }
    int status = 0;
    if (reap(&status)) {
      throw std::runtime_error("the GPU-direct copier process (" + launch_.what + ", pid " + std::to_string(pid_) +
                               ") exited (" + exit_text(status) + ") while " + waiting_for +
                               "; its stderr (this rank's) says why");
    }
    if (std::chrono::steady_clock::now() >= deadline) {
      throw std::runtime_error("the GPU-direct copier process (" + launch_.what + ", pid " + std::to_string(pid_) +
                               ") did not finish " + waiting_for + " within " + std::to_string(timeout_ms) +
                               " ms: " + stage() +
                               " (MKERNEL_NET_GDR_COPIER_START_S bounds its start; a loaded host or MPS server "
                               "slows it)");
    }
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
}

void CopierProcess::map(int c, const CopierIpcHandle& send, uint64_t send_bytes,
                        const std::vector<const CopierIpcHandle*>& recv, uint64_t recv_bytes, int64_t ready_ms,
                        int64_t map_ms) {
  if (recv.size() > static_cast<size_t>(kCopierMaxRanks)) {
    throw std::runtime_error("GPU-direct copier: " + std::to_string(recv.size()) + " ranks");
  }
  wait_until([this] { return block_->state.load(std::memory_order_acquire) == CopierBlock::kReady; }, ready_ms,
             "starting (its CUDA context)");
  // The helper reads these only after it sees the new request (release below, acquire there),
  // and only between the channel's copies; none of the previous mapping is in flight (unmap came
  // first, or the channel is new).
  CopierChannel& ch = block_->channels[c];
  ch.has_send = 1;
  ch.world = static_cast<int32_t>(recv.size());
  ch.send = send;
  ch.send_bytes = send_bytes;
  ch.recv_bytes = recv_bytes;
  for (int r = 0; r < kCopierMaxRanks; ++r) {
    const bool has = static_cast<size_t>(r) < recv.size() && recv[r] != nullptr;
    ch.has_recv[r] = has ? 1 : 0;
    if (has) ch.recv[r] = *recv[r];
  }
  const uint64_t g = ++map_gen_[c];
  ch.map_request.store(g, std::memory_order_release);
  wait_until([&ch, g] { return ch.map_done.load(std::memory_order_acquire) == g; }, map_ms,
             "opening the inter-node buffers (channel " + std::to_string(c) + ", mapping " + std::to_string(g) + ")");
}

std::string CopierProcess::unmap(int c, int64_t timeout_ms) {
  // Nothing to close where nothing was asked, or the helper never served (it opened nothing)
  // or stopped serving (failed or gone: its mappings went with it).
  if (block_ == nullptr || map_gen_[c] == 0 || !usable() ||
      block_->state.load(std::memory_order_acquire) != CopierBlock::kReady) {
    return "";
  }
  CopierChannel& ch = block_->channels[c];
  if (ch.has_send == 0 && ch.map_done.load(std::memory_order_acquire) == map_gen_[c]) return "";
  ch.has_send = 0;
  for (int r = 0; r < kCopierMaxRanks; ++r) ch.has_recv[r] = 0;
  const uint64_t g = ++map_gen_[c];
  ch.map_request.store(g, std::memory_order_release);
  try {
    wait_until([&ch, g] { return ch.map_done.load(std::memory_order_acquire) == g; }, timeout_ms,
               "closing the inter-node buffers of channel " + std::to_string(c));
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

bool CopierProcess::usable() {
  if (block_ == nullptr) return false;
  if (block_->state.load(std::memory_order_acquire) == CopierBlock::kFailed) return false;
  int status = 0;
  return !reap(&status);
}

void CopierProcess::stop() {
  if (block_ != nullptr) {
    uint32_t st = block_->state.load(std::memory_order_acquire);
    while ((st == CopierBlock::kInit || st == CopierBlock::kReady) &&
           !block_->state.compare_exchange_weak(st, CopierBlock::kStop, std::memory_order_acq_rel)) {
    }
  }
  int status = 0;
  if (pid_ > 0 && !exited_) {
    // A stopped helper synchronizes its stream and closes its mappings; then the lifeline's EOF
    // ends it wherever it is; SIGKILL last.
    auto wait_exit = [&](std::chrono::milliseconds limit) {
      const auto deadline = std::chrono::steady_clock::now() + limit;
      while (!reap(&status)) {
        if (std::chrono::steady_clock::now() > deadline) return false;
        std::this_thread::sleep_for(std::chrono::microseconds(500));
      }
      return true;
    };
    if (!wait_exit(std::chrono::milliseconds(2000))) {
      if (lifeline_ >= 0) close(lifeline_);
      lifeline_ = -1;
      if (!wait_exit(std::chrono::milliseconds(1000))) {
        (void)kill(pid_, SIGKILL);
        (void)waitpid(pid_, &status, 0);
        exited_ = true;
      }
    }
  }
  if (lifeline_ >= 0) close(lifeline_);
  lifeline_ = -1;
  if (block_ != nullptr) munmap(block_, sizeof(CopierBlock));
  block_ = nullptr;
  if (fd_ >= 0) close(fd_);
  fd_ = -1;
}

int32_t CopierProcess::failed() {
  if (!reported_.exchange(true)) {
    std::string why = failure();
    int status = 0;
    if (why.empty() && reap(&status)) why = "it exited (" + exit_text(status) + ")";
    std::fprintf(stderr, "mkernel: the GPU-direct copier process (%s, pid %d) failed: %s\n", launch_.what.c_str(),
                 static_cast<int>(pid_), why.c_str());
    std::fflush(stderr);
  }
  return block_ != nullptr && block_->error != 0 ? block_->error : kCopierCudaUnknown;
}

int32_t CopierProcess::post(int c, int32_t peer, uint64_t local_off, uint64_t remote_off, uint64_t bytes,
                            uint64_t* token) {
  if (block_ == nullptr || block_->state.load(std::memory_order_acquire) != CopierBlock::kReady) return failed();
  CopierChannel& ch = block_->channels[c];
  const uint64_t n = ch.posted.load(std::memory_order_relaxed);
  if (n - ch.completed.load(std::memory_order_acquire) >= CopierChannel::kRing) {
    return 2;  // cudaErrorMemoryAllocation: the transport keeps at most half the ring in flight
  }
  ch.ring[n % CopierChannel::kRing] = CopierDesc{peer, static_cast<uint32_t>(map_gen_[c]), local_off, remote_off, bytes};
  ch.posted.store(n + 1, std::memory_order_release);
  *token = n;
  return 0;
}

int32_t CopierProcess::done(int c, uint64_t token, int32_t* is_done) {
  *is_done = block_ != nullptr && block_->channels[c].completed.load(std::memory_order_acquire) > token ? 1 : 0;
  if (*is_done) return 0;
  if (block_ == nullptr || block_->state.load(std::memory_order_acquire) != CopierBlock::kReady) return failed();
  // A helper that died without a word (killed): noticed within ~1000 polls, not at the op timeout.
  int status = 0;
  if ((polls_.fetch_add(1, std::memory_order_relaxed) & 1023) == 1023 && reap(&status)) return failed();
  return 0;
}

}  // namespace mkernel::comm
