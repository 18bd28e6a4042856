// A stand-in for libcudart with the calls mkernel-gdr-copier makes, for the CPU test of the
// copier protocol (test_gdr_copier_process.py): "device memory" is host shared memory, an IPC
// handle holds the path of a file under /dev/shm, copies are memcpy, events are always done.
// MOCK_SETDEVICE_MS delays context creation; MOCK_SETDEVICE_FAIL fails it (error 100).
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
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
int cudaEventCreateWithFlags(void** e, unsigned int) { *e = &token; return 0; }
int cudaEventRecord(void*, void*) { return 0; }
int cudaEventQuery(void*) { return 0; }
int cudaEventDestroy(void*) { return 0; }
int cudaGetLastError() { return 0; }
const char* cudaGetErrorString(int e) { return e == 100 ? "no CUDA-capable device is detected (mock)" : "mock error"; }
}
