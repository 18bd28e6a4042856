// mkernel-gdr-copier: the GPU-direct emulation's copier helper as a small executable (no torch, no
// Python): the rank spawns it with the CUDA runtime its own extension uses, the shared block at
// fd 3 and the lifeline pipe at fd 4 (csrc/comm/gdr_copier_protocol.h). Built by setup.py beside
// the extension's shared object; it includes no CUDA header (the runtime is reached by dlopen).
//
//   mkernel-gdr-copier <path of libcudart.so> [block fd] [lifeline fd]
#include <dlfcn.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "comm/gdr_copier_protocol.h"

namespace {

template <typename Fn>
bool resolve(void* lib, const char* name, Fn* out) {
  void* f = dlsym(lib, name);
  if (f == nullptr) {
    std::fprintf(stderr, "mkernel-gdr-copier: %s not found in the CUDA runtime: %s\n", name, dlerror());
    return false;
  }
  *out = reinterpret_cast<Fn>(f);
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace mkernel::comm;
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s <libcudart.so path> [block fd] [lifeline fd]\n", argv[0]);
    return 2;
  }
  const int block_fd = argc > 2 ? std::atoi(argv[2]) : kCopierBlockFd;
  const int lifeline_fd = argc > 3 ? std::atoi(argv[3]) : kCopierLifelineFd;
  void* lib = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) {
    std::fprintf(stderr, "mkernel-gdr-copier: cannot load the CUDA runtime %s: %s\n", argv[1], dlerror());
    return 3;
  }
  CopierCuda cu{};
  const bool ok = resolve(lib, "cudaSetDevice", &cu.set_device) &&
                  resolve(lib, "cudaIpcOpenMemHandle", &cu.ipc_open) &&
                  resolve(lib, "cudaIpcCloseMemHandle", &cu.ipc_close) &&
                  resolve(lib, "cudaStreamCreateWithFlags", &cu.stream_create) &&
                  resolve(lib, "cudaStreamSynchronize", &cu.stream_synchronize) &&
                  resolve(lib, "cudaStreamDestroy", &cu.stream_destroy) &&
                  resolve(lib, "cudaMemcpyAsync", &cu.memcpy_async) &&
                  resolve(lib, "cudaEventCreateWithFlags", &cu.event_create) &&
                  resolve(lib, "cudaEventRecord", &cu.event_record) &&
                  resolve(lib, "cudaEventQuery", &cu.event_query) &&
                  resolve(lib, "cudaEventDestroy", &cu.event_destroy) &&
                  resolve(lib, "cudaGetLastError", &cu.get_last_error) &&
                  resolve(lib, "cudaGetErrorString", &cu.get_error_string);
  if (!ok) return 3;
  // The copy-engine submission (optional: absent before CUDA 12.8, and its signature changed in
  // 13.0: the runtime's own version picks which one the symbol has).
  int (*runtime_version)(int*) = nullptr;
  int version = 0;
  if (void* f = dlsym(lib, "cudaRuntimeGetVersion"); f != nullptr) {
    runtime_version = reinterpret_cast<int (*)(int*)>(f);
    if (runtime_version(&version) != kCopierCudaSuccess) version = 0;
  }
  if (void* f = dlsym(lib, "cudaMemcpyBatchAsync"); f != nullptr) {
    if (version >= 13000) {
      cu.memcpy_batch_async = reinterpret_cast<decltype(cu.memcpy_batch_async)>(f);
    } else if (version >= 12080) {
      cu.memcpy_batch_async_v12 = reinterpret_cast<decltype(cu.memcpy_batch_async_v12)>(f);
    }
  }
  return copier_serve(block_fd, lifeline_fd, cu);
}
