// A stand-in for libcudart with the calls mkernel-gdr-copier makes, for the CPU test of the
// copier protocol (test_gdr_copier_process.py): "device memory" is host shared memory, an IPC
// handle holds the path of a file under /dev/shm, copies are memcpy, events are always done.
// MOCK_SETDEVICE_MS delays context creation; MOCK_SETDEVICE_FAIL fails it (error 100).
// cudaRuntimeGetVersion says MOCK_RUNTIME_VERSION (default 13000); cudaMemcpyBatchAsync (CUDA 13's
// signature) copies one pointer-to-pointer copy with stream-ordered source access and the
// PreferOverlapWithCompute flag and refuses anything else (cudaErrorInvalidValue), or everything
// with MOCK_BATCH_REFUSE (cudaErrorNotSupported).
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

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
  if (count != 1 || na != 1 || idx[0] != 0 || a[0].order != 1 || a[0].flags != 1) return 1;
  std::memcpy(d[0], s[0], n[0]);
  return 0;
}
int cudaEventCreateWithFlags(void** e, unsigned int) { *e = &token; return 0; }
int cudaEventRecord(void*, void*) { return 0; }
int cudaEventQuery(void*) { return 0; }
int cudaEventDestroy(void*) { return 0; }
int cudaGetLastError() { return 0; }
const char* cudaGetErrorString(int e) {
  return e == 100 ? "no CUDA-capable device is detected (mock)" : e == 801 ? "operation not supported (mock)" : "mock error";
}
}
