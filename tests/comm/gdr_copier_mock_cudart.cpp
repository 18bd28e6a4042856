// A stand-in for libcudart with the calls mkernel-gdr-copier makes, for the CPU test of the
// copier protocol (test_gdr_copier_process.py): "device memory" is host shared memory, an IPC
// handle holds the path of a file under /dev/shm, copies are memcpy, events are always done.
// MOCK_SETDEVICE_MS delays context creation; MOCK_SETDEVICE_FAIL fails it (error 100).
// cudaRuntimeGetVersion says MOCK_RUNTIME_VERSION (default 13000); cudaMemcpyBatchAsync (CUDA 13's
// signature) copies one pointer-to-pointer copy with stream-ordered source access and the
// PreferOverlapWithCompute flag and refuses anything else (cudaErrorInvalidValue), or everything
// with MOCK_BATCH_REFUSE (cudaErrorNotSupported); a batch may hold several such copies (one
// attribute entry for all). A GPU-time model for the copier's pacing test: one in-order queue on
// which every submission call (a cudaMemcpyAsync, or a batch call whatever its count) costs
// MOCK_OP_US and every copy in it MOCK_COPY_US more, every event record MOCK_EVENT_US; an event
// completes once the queue has passed its record (all 0 by default: every event is done at once).
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <thread>

namespace {
std::mutex mu;
std::map<void*, size_t> maps;
int token = 0;

using Clock = std::chrono::steady_clock;
int64_t env_us(const char* name) {
  const char* v = std::getenv(name);
  return v != nullptr ? std::atoll(v) : 0;
}
const int64_t op_us = env_us("MOCK_OP_US");
const int64_t copy_us = env_us("MOCK_COPY_US");
const int64_t event_us = env_us("MOCK_EVENT_US");
Clock::time_point gpu_free{};  // when the modeled queue has run everything submitted so far

// One submission of `count` copies on the modeled queue.
void charge(size_t count) {
  if (op_us == 0 && copy_us == 0) return;
  const auto now = Clock::now();
  gpu_free = std::max(gpu_free, now) + std::chrono::microseconds(op_us + copy_us * static_cast<int64_t>(count));
}
struct Event {
  Clock::time_point at{};  // done from then on
};
}  // namespace

extern "C" {
struct Handle {
  char reserved[64];
};
int cudaSetDevice(int) {
  if (const char* ms = std::getenv("MOCK_SETDEVICE_MS")) std::this_thread::sleep_for(std::chrono::milliseconds(std::atoi(ms)));
  return std::getenv("MOCK_SETDEVICE_FAIL") != nullptr ? 100 : 0;
}
int cudaIpcOpenMemHandle(void** p, Handle h, unsigned int) {
  char path[65] = {};
  std::memcpy(path, h.reserved, 64);
  const int fd = open(path, O_RDWR);
  if (fd < 0) return 201;
  struct stat st {};
  fstat(fd, &st);
  void* q = mmap(nullptr, st.st_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  if (q == MAP_FAILED) return 2;
  std::lock_guard<std::mutex> g(mu);
  maps[q] = st.st_size;
  *p = q;
  return 0;
}
int cudaIpcCloseMemHandle(void* p) {
  std::lock_guard<std::mutex> g(mu);
  auto it = maps.find(p);
  if (it == maps.end()) return 1;
  munmap(p, it->second);
  maps.erase(it);
  return 0;
}
int cudaStreamCreateWithFlags(void** s, unsigned int) { *s = &token; return 0; }
int cudaStreamSynchronize(void*) { return 0; }
int cudaStreamDestroy(void*) { return 0; }
int cudaMemcpyAsync(void* d, const void* s, size_t n, int, void*) {
  std::memcpy(d, s, n);
  charge(1);
  return 0;
}
int cudaRuntimeGetVersion(int* v) {
  const char* e = std::getenv("MOCK_RUNTIME_VERSION");
  *v = e != nullptr ? std::atoi(e) : 13000;
  return 0;
}
struct Attr {
  int32_t order;
  int32_t src_type, src_id, dst_type, dst_id;
  uint32_t flags;
};
int cudaMemcpyBatchAsync(void* const* d, const void* const* s, const size_t* n, size_t count, Attr* a, size_t* idx,
                         size_t na, void*) {
  if (std::getenv("MOCK_BATCH_REFUSE") != nullptr) return 801;
  if (count < 1 || na != 1 || idx[0] != 0 || a[0].order != 1 || a[0].flags != 1) return 1;
  for (size_t i = 0; i < count; ++i) std::memcpy(d[i], s[i], n[i]);
  charge(count);
  return 0;
}
int cudaEventCreateWithFlags(void** e, unsigned int) { *e = new Event; return 0; }
int cudaEventRecord(void* e, void*) {
  if (event_us > 0) gpu_free = std::max(gpu_free, Clock::now()) + std::chrono::microseconds(event_us);
  static_cast<Event*>(e)->at = gpu_free;
  return 0;
}
int cudaEventQuery(void* e) { return Clock::now() >= static_cast<Event*>(e)->at ? 0 : 600; }
int cudaEventDestroy(void* e) {
  delete static_cast<Event*>(e);
  return 0;
}
int cudaGetLastError() { return 0; }
const char* cudaGetErrorString(int e) {
  return e == 100 ? "no CUDA-capable device is detected (mock)" : e == 801 ? "operation not supported (mock)" : "mock error";
}
}
