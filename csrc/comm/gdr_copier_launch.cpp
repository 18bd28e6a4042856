// Which GPU-direct copier helper a rank starts (copier_launch), and the fallback helper's entry
// (torch.ops.mkernel._gdr_copier_serve): the CUDA side of gdr_copier_process.h.
#ifdef MKERNEL_WITH_CUDA

#include "comm/gdr_copier_launch.h"

#include <c10/util/Exception.h>
#include <cuda_runtime.h>
#include <dlfcn.h>
#include <torch/library.h>
#include <unistd.h>

#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <string>

#include "comm/gdr_copier_process.h"
#include "env_knobs.h"
#include "kernels/comm/group_device.h"

namespace mkernel::comm {

static_assert(sizeof(CopierIpcHandle) == sizeof(cudaIpcMemHandle_t), "cudaIpcMemHandle_t's size changed");
static_assert(kCopierMaxRanks == kMaxRanks, "the copier block's rank table must match the group's");
static_assert(kCopierCudaSuccess == cudaSuccess && kCopierCudaInvalidValue == cudaErrorInvalidValue &&
                  kCopierCudaNotReady == cudaErrorNotReady && kCopierCudaUnknown == cudaErrorUnknown,
              "cudaError_t values");
static_assert(kCopierMemcpyDeviceToDevice == cudaMemcpyDeviceToDevice &&
                  kCopierStreamNonBlocking == cudaStreamNonBlocking &&
                  kCopierEventDisableTiming == cudaEventDisableTiming &&
                  kCopierIpcLazyEnablePeerAccess == cudaIpcMemLazyEnablePeerAccess,
              "CUDA flag values");
static_assert(kCopierCudaNotSupported == cudaErrorNotSupported, "cudaError_t values");
#if CUDART_VERSION >= 12080
static_assert(sizeof(CopierMemcpyAttributes) == sizeof(cudaMemcpyAttributes) &&
                  offsetof(CopierMemcpyAttributes, src_access_order) ==
                      offsetof(cudaMemcpyAttributes, srcAccessOrder) &&
                  offsetof(CopierMemcpyAttributes, src_loc_hint) == offsetof(cudaMemcpyAttributes, srcLocHint) &&
                  offsetof(CopierMemcpyAttributes, dst_loc_hint) == offsetof(cudaMemcpyAttributes, dstLocHint) &&
                  offsetof(CopierMemcpyAttributes, flags) == offsetof(cudaMemcpyAttributes, flags) &&
                  sizeof(CopierMemLocation) == sizeof(cudaMemLocation),
              "cudaMemcpyAttributes' layout changed");
static_assert(kCopierSrcAccessOrderStream == cudaMemcpySrcAccessOrderStream &&
                  kCopierMemcpyFlagPreferOverlapWithCompute == cudaMemcpyFlagPreferOverlapWithCompute,
              "cudaMemcpyAttributes values");
#endif

namespace {

// The shared object that holds `addr` ("" when unknown).
std::string object_of(const void* addr) {
  Dl_info info{};
  if (dladdr(addr, &info) == 0 || info.dli_fname == nullptr) return "";
  return info.dli_fname;
}

std::string dir_of(const std::string& path) {
  const size_t slash = path.rfind('/');
  return slash == std::string::npos ? "." : path.substr(0, slash);
}

bool executable(const std::string& path) { return !path.empty() && access(path.c_str(), X_OK) == 0; }

// The helper's loop with the CUDA runtime this extension links.
CopierCuda linked_runtime() {
  CopierCuda cu{};
  cu.set_device = [](int d) { return static_cast<int>(cudaSetDevice(d)); };
  cu.ipc_open = [](void** p, CopierIpcHandle h, unsigned int f) {
    cudaIpcMemHandle_t handle;
    static_assert(sizeof handle == sizeof h);
    std::memcpy(&handle, &h, sizeof h);
    return static_cast<int>(cudaIpcOpenMemHandle(p, handle, f));
  };
  cu.ipc_close = [](void* p) { return static_cast<int>(cudaIpcCloseMemHandle(p)); };
  cu.stream_create = [](void** s, unsigned int f) {
    return static_cast<int>(cudaStreamCreateWithFlags(reinterpret_cast<cudaStream_t*>(s), f));
  };
  cu.stream_synchronize = [](void* s) { return static_cast<int>(cudaStreamSynchronize(static_cast<cudaStream_t>(s))); };
  cu.stream_destroy = [](void* s) { return static_cast<int>(cudaStreamDestroy(static_cast<cudaStream_t>(s))); };
  cu.memcpy_async = [](void* d, const void* s, size_t n, int k, void* st) {
    return static_cast<int>(cudaMemcpyAsync(d, s, n, static_cast<cudaMemcpyKind>(k), static_cast<cudaStream_t>(st)));
  };
  cu.event_create = [](void** e, unsigned int f) {
    return static_cast<int>(cudaEventCreateWithFlags(reinterpret_cast<cudaEvent_t*>(e), f));
  };
  cu.event_record = [](void* e, void* s) {
    return static_cast<int>(cudaEventRecord(static_cast<cudaEvent_t>(e), static_cast<cudaStream_t>(s)));
  };
  cu.event_query = [](void* e) { return static_cast<int>(cudaEventQuery(static_cast<cudaEvent_t>(e))); };
  cu.event_destroy = [](void* e) { return static_cast<int>(cudaEventDestroy(static_cast<cudaEvent_t>(e))); };
  cu.get_last_error = [] { return static_cast<int>(cudaGetLastError()); };
  cu.get_error_string = [](int e) { return cudaGetErrorString(static_cast<cudaError_t>(e)); };
#if CUDART_VERSION >= 13000
  cu.memcpy_batch_async = [](void* const* d, const void* const* s, const size_t* n, size_t count,
                             CopierMemcpyAttributes* a, size_t* idx, size_t na, void* st) {
    return static_cast<int>(cudaMemcpyBatchAsync(d, s, n, count, reinterpret_cast<cudaMemcpyAttributes*>(a), idx, na,
                                                 static_cast<cudaStream_t>(st)));
  };
#elif CUDART_VERSION >= 12080
  cu.memcpy_batch_async_v12 = [](void** d, void** s, size_t* n, size_t count, CopierMemcpyAttributes* a, size_t* idx,
                                 size_t na, size_t* fail, void* st) {
    return static_cast<int>(cudaMemcpyBatchAsync(d, s, n, count, reinterpret_cast<cudaMemcpyAttributes*>(a), idx, na,
                                                 fail, static_cast<cudaStream_t>(st)));
  };
#endif
  return cu;
}

// The fallback helper (a Python interpreter importing torch and this extension).
void serve_op(int64_t fd, int64_t lifeline) {
  const int rc = copier_serve(static_cast<int>(fd), static_cast<int>(lifeline), linked_runtime());
  TORCH_CHECK(rc != 2, "mkernel._gdr_copier_serve: fd ", fd, " is not a GPU-direct copier block of this version");
}

}  // namespace

uint32_t copier_submit_env(const char* op) {
  const char* v = env::get("MKERNEL_NET_GDR_COPIER_SUBMIT");
  std::string s = v != nullptr ? v : "";
  s.erase(0, s.find_first_not_of(" \t\n"));
  s.erase(s.find_last_not_of(" \t\n") + 1);
  TORCH_CHECK_VALUE(s.empty() || s == "ce" || s == "plain", op, ": MKERNEL_NET_GDR_COPIER_SUBMIT=\"", s,
                    "\": want ce (the copy engines: cudaMemcpyBatchAsync, PreferOverlapWithCompute) or plain "
                    "(cudaMemcpyAsync)");
  // Unset: plain until a device run has checked the copy-engine submission in the copier process
  // (xnode7's jobs ask for ce explicitly; the lead flips the default by their rule).
  return s == "ce" ? kCopierSubmitCe : kCopierSubmitPlain;
}

CopierLaunch copier_launch(const char* op) {
  const uint32_t submit = copier_submit_env(op);
  const std::string so = object_of(reinterpret_cast<const void*>(&serve_op));
  // The CUDA runtime this extension uses (the one torch loaded): the executable opens the same.
  const std::string cudart = object_of(reinterpret_cast<const void*>(&cudaMemcpyAsync));
  std::string exe;
  if (const char* e = env::get("MKERNEL_NET_GDR_COPIER_EXE"); e != nullptr && *e != '\0') {
    exe = e;
    TORCH_CHECK(executable(exe), op, ": MKERNEL_NET_GDR_COPIER_EXE=", exe, " is not an executable file");
  } else if (!so.empty()) {
    exe = dir_of(so) + "/mkernel-gdr-copier";
  }
  const bool runtime_shared = cudart.find("libcudart") != std::string::npos;
  if (executable(exe) && runtime_shared) {
    return CopierLaunch{exe, {exe, cudart, "{block}", "{lifeline}"}, "mkernel-gdr-copier", submit};
  }
  const char* py = env::get("MKERNEL_PYTHON");
  TORCH_CHECK(py != nullptr && *py != '\0' && !so.empty(), op, ": the GPU-direct copier executable ",
              exe.empty() ? std::string("mkernel-gdr-copier") : exe,
              runtime_shared ? " is missing (setup.py builds it beside the extension)"
                             : " needs a shared CUDA runtime, but this extension's is in " + cudart,
              ", and the Python fallback needs the interpreter in MKERNEL_PYTHON (import mkernel sets it under "
              "MKERNEL_NET_GDR=1)");
  TORCH_WARN_ONCE(op, ": the GPU-direct copier executable ", exe, " is ",
                  runtime_shared ? "missing" : "unusable (static CUDA runtime)",
                  "; starting the slower Python helper (imports torch) instead");
  const std::string code =
      "import sys, torch; torch.ops.load_library(sys.argv[1]); "
      "torch.ops.mkernel._gdr_copier_serve(int(sys.argv[2]), int(sys.argv[3]))";
  return CopierLaunch{py, {py, "-c", code, so, "{block}", "{lifeline}"}, "python helper", submit};
}

TORCH_LIBRARY_FRAGMENT(mkernel, m) { m.def("_gdr_copier_serve(int fd, int lifeline) -> ()", &serve_op); }

}  // namespace mkernel::comm

#endif  // MKERNEL_WITH_CUDA
