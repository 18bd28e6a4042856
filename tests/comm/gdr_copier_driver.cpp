// The rank's side of the copier protocol on the CPU (test_gdr_copier_process.py): CopierProcess
// against mkernel-gdr-copier and the stand-in runtime. Prints one line per check; exit 0 = pass.
//   driver <exe> <mock cudart> copies   : two paths on one shared helper (channels), copies, a
//                                         re-map, a refused copy, a new helper after a failure
//   driver <exe> <mock cudart> ready_ms : map with a ready bound of ready_ms; prints the error
//   driver <exe> <mock cudart> orphan   : a child "rank" starts a helper, prints its pid, is killed
//   driver <exe> <mock cudart> burst    : BURST_N copies of BURST_BYTES (into BURST_SLOTS slots, reused
//                                         in turn) posted back to back (as the
//                                         transport posts a fused kernel's per-tile commands); prints
//                                         "BURST <n> <bytes> <ms>" and the SUBMIT line
#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "comm/gdr_copier_process.h"

using namespace mkernel::comm;

namespace {

struct Area {  // a "GPU buffer": a file under /dev/shm, its handle holds the path
  std::string path;
  size_t bytes = 0;
  unsigned char* p = nullptr;
  CopierIpcHandle handle{};
  Area(const std::string& name, size_t n) : path("/dev/shm/" + name), bytes(n) {
    const int fd = open(path.c_str(), O_RDWR | O_CREAT | O_TRUNC, 0600);
    if (fd < 0 || ftruncate(fd, n) != 0) throw std::runtime_error("area " + path);
    p = static_cast<unsigned char*>(mmap(nullptr, n, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0));
    close(fd);
    std::snprintf(handle.reserved, sizeof handle.reserved, "%s", path.c_str());
  }
  ~Area() {
    munmap(p, bytes);
    unlink(path.c_str());
  }
};

void wait_done(CopierProcess& c, int ch, uint64_t token) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  int32_t d = 0;
  while (true) {
    if (c.done(ch, token, &d) != 0) throw std::runtime_error("done() failed");
    if (d) return;
    if (std::chrono::steady_clock::now() > deadline) throw std::runtime_error("copy not done");
  }
}

// One "path" on channel `ch` of the shared helper: map, 300 copies to two peers, check, unmap.
void path_round(CopierProcess& c, int ch, const std::string& tag, size_t n, int salt) {
  Area send("mkcp-send-" + tag, n), r1("mkcp-r1-" + tag, n), r3("mkcp-r3-" + tag, n);
  for (size_t i = 0; i < n; ++i) send.p[i] = static_cast<unsigned char>(i * 7 + salt);
  std::vector<const CopierIpcHandle*> recv(4, nullptr);
  recv[1] = &r1.handle;
  recv[3] = &r3.handle;
  c.map(ch, send.handle, n, recv, n, 10000, 10000);
  uint64_t last = 0;
  for (int k = 0; k < 300; ++k) {  // more than the ring of the previous protocol held
    const uint64_t off = (static_cast<uint64_t>(k) * 4096) % (n - 4096);
    if (c.post(ch, k % 2 ? 3 : 1, off, off, 4096, &last) != 0) throw std::runtime_error("post");
  }
  wait_done(c, ch, last);
  if (std::memcmp(r1.p, send.p, 4096) != 0 || std::memcmp(r3.p + 4096, send.p + 4096, 4096) != 0) {
    throw std::runtime_error("bytes differ on channel " + std::to_string(ch));
  }
  const std::string why = c.unmap(ch, 5000);
  if (!why.empty()) throw std::runtime_error("unmap: " + why);
}

int copies(const CopierLaunch& l) {
  const std::string tag = std::to_string(getpid());
  auto launch = [&l] { return l; };
  auto c = CopierProcess::shared(0, launch);
  const int a = c->acquire();
  path_round(*c, a, tag + "a0", 1 << 20, 0);
  // a group's growth: a second path while the first stays open, on the same helper
  auto c2 = CopierProcess::shared(0, launch);
  if (c2.get() != c.get()) return std::puts("FAIL a second helper was started"), 1;
  const int b = c2->acquire();
  if (b == a) return std::puts("FAIL the channel was handed out twice"), 1;
  std::thread other([&] { path_round(*c2, b, tag + "b", 2 << 20, 1); });  // two proxies at once
  path_round(*c, a, tag + "a1", 2 << 20, 2);  // and the first path re-mapped
  other.join();
  c2->release(b);
  std::printf("paths ok (helper pid %d, channels %d %d)\n", static_cast<int>(c->pid()), a, b);
  std::printf("SUBMIT %s\n", c->submit_info().c_str());
  // a copy outside the mapped areas: the helper fails with a message
  Area send("mkcp-send2-" + tag, 1 << 20), r1("mkcp-r1b-" + tag, 1 << 20);
  std::vector<const CopierIpcHandle*> recv(4, nullptr);
  recv[1] = &r1.handle;
  c->map(a, send.handle, 1 << 20, recv, 1 << 20, 10000, 10000);
  uint64_t t = 0;
  c->post(a, 1, 0, (1 << 20) - 16, 4096, &t);
  int32_t d = 0, rc = 0;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while ((rc = c->done(a, t, &d)) == 0 && !d && std::chrono::steady_clock::now() < deadline) {
  }
  if (rc == 0) return std::puts("FAIL the out-of-bounds copy was accepted"), 1;
  std::printf("refused: %s\n", c->failure().c_str());
  if (c->usable()) return std::puts("FAIL a failed helper counts as usable"), 1;
  auto c3 = CopierProcess::shared(0, launch);  // the next path gets a new helper
  if (c3.get() == c.get() || !c3->usable()) return std::puts("FAIL no new helper after a failure"), 1;
  std::puts("COPIES OK");
  return 0;
}

// BURST_N (default 512) copies of BURST_BYTES (default 64 KiB) to one peer, each posted as soon as
// the ring has room, then the wait for the last: the time the helper takes for a fused kernel's
// burst of per-tile commands (the transport posts them as fast as the link makes them due).
int burst(const CopierLaunch& l) {
  const char* ne = std::getenv("BURST_N");
  const char* be = std::getenv("BURST_BYTES");
  const uint64_t n = ne != nullptr ? std::strtoull(ne, nullptr, 10) : 512;
  const uint64_t bytes = be != nullptr ? std::strtoull(be, nullptr, 10) : 64 << 10;
  const char* se = std::getenv("BURST_SLOTS");  // copy k goes to slot k % slots (default 64)
  const uint64_t slots = std::max<uint64_t>(1, se != nullptr ? std::strtoull(se, nullptr, 10) : 64);
  const size_t area = static_cast<size_t>(std::min<uint64_t>(n, slots) * bytes);
  const std::string tag = std::to_string(getpid());
  CopierProcess c(l, 0);
  Area send("mkcp-bs-" + tag, area), r1("mkcp-br-" + tag, area);
  std::vector<const CopierIpcHandle*> recv(2, nullptr);
  recv[1] = &r1.handle;
  const int ch = c.acquire();
  c.map(ch, send.handle, area, recv, area, 10000, 10000);
  const auto t0 = std::chrono::steady_clock::now();
  const auto deadline = t0 + std::chrono::seconds(20);
  uint64_t last = 0;
  for (uint64_t k = 0; k < n; ++k) {
    const uint64_t off = (k % slots) * bytes;
    int32_t rc = 0;
    while ((rc = c.post(ch, 1, off, off, bytes, &last)) == 2) {  // the ring is full: wait for room
      if (std::chrono::steady_clock::now() > deadline) throw std::runtime_error("burst: the ring stayed full");
    }
    if (rc != 0) throw std::runtime_error("burst: post failed: " + c.failure());
  }
  wait_done(c, ch, last);
  const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  std::printf("BURST %llu %llu %.3f\n", static_cast<unsigned long long>(n),
              static_cast<unsigned long long>(bytes), ms);
  std::printf("SUBMIT %s\n", c.submit_info().c_str());
  const std::string why = c.unmap(ch, 5000);
  if (!why.empty()) throw std::runtime_error("unmap: " + why);
  c.release(ch);
  return 0;
}

int ready(const CopierLaunch& l, int64_t ms) {
  CopierProcess c(l, 0);
  Area send("mkcp-rs-" + std::to_string(getpid()), 1 << 16);
  std::vector<const CopierIpcHandle*> recv(2, nullptr);
  const auto t0 = std::chrono::steady_clock::now();
  const int ch = c.acquire();
  try {
    c.map(ch, send.handle, 1 << 16, recv, 1 << 16, ms, ms);
  } catch (const std::exception& e) {
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::printf("ERROR after %.2f s: %s\n", s, e.what());
    // the path's teardown after a failed opening: nothing to close, no wait for a helper that
    // never served
    const auto t1 = std::chrono::steady_clock::now();
    const std::string why = c.unmap(ch, 30000);
    std::printf("UNMAP after failure: %.3f s %s\n",
                std::chrono::duration<double>(std::chrono::steady_clock::now() - t1).count(), why.c_str());
    return 0;
  }
  std::puts("READY");
  return 0;
}

int orphan(const CopierLaunch& l) {
  int fds[2];
  if (pipe(fds) != 0) return 1;
  const pid_t rank = fork();
  if (rank == 0) {  // the "rank": starts a helper, reports its pid, then is SIGKILLed
    close(fds[0]);
    CopierProcess c(l, 0);
    Area send("mkcp-os-" + std::to_string(getpid()), 1 << 16);
    std::vector<const CopierIpcHandle*> recv(2, nullptr);
    c.map(c.acquire(), send.handle, 1 << 16, recv, 1 << 16, 10000, 10000);
    const int pid = c.pid();
    if (write(fds[1], &pid, sizeof pid) != sizeof pid) _exit(1);
    pause();
    _exit(0);
  }
  close(fds[1]);
  int helper = -1;
  if (read(fds[0], &helper, sizeof helper) != sizeof helper) return std::puts("FAIL no helper pid"), 1;
  kill(rank, SIGKILL);
  waitpid(rank, nullptr, 0);
  const auto t0 = std::chrono::steady_clock::now();
  auto alive = [helper] {  // a zombie (exited, not yet reaped by its new parent) counts as gone
    FILE* f = std::fopen(("/proc/" + std::to_string(helper) + "/stat").c_str(), "r");
    if (f == nullptr) return false;
    int pid = 0;
    char comm[256] = {}, state = 0;
    const int n = std::fscanf(f, "%d %255s %c", &pid, comm, &state);
    std::fclose(f);
    return n == 3 && state != 'Z' && state != 'X';
  };
  while (alive()) {  // the helper is re-parented; it must exit by itself
    if (std::chrono::steady_clock::now() - t0 > std::chrono::seconds(3)) return std::puts("FAIL orphan alive"), 1;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  std::printf("ORPHAN GONE after %.3f s\n",
              std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 4) return 2;
  // DRIVER_SUBMIT=plain: the rank asks for plain cudaMemcpyAsync (MKERNEL_NET_GDR_COPIER_SUBMIT=plain).
  const char* sub = std::getenv("DRIVER_SUBMIT");
  const CopierLaunch l{argv[1], {argv[1], argv[2], "{block}", "{lifeline}"}, "mkernel-gdr-copier",
                       sub != nullptr && std::string(sub) == "plain" ? kCopierSubmitPlain : kCopierSubmitCe};
  try {
    const std::string mode = argv[3];
    if (mode == "copies") return copies(l);
    if (mode == "orphan") return orphan(l);
    if (mode == "burst") return burst(l);
    return ready(l, std::atoll(argv[3]));
  } catch (const std::exception& e) {
    std::printf("FAIL exception: %s\n", e.what());
    return 1;
  }
}
