// The copy-engine routes of ag_gemm and gemm_rs: the side streams' copies and flag writes
// (fused_copy_engine.h).
#ifdef MKERNEL_WITH_CUDA

#include "fused_copy_engine.h"

#include <c10/cuda/CUDAException.h>
#include <c10/util/Exception.h>
#include <cuda.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdio>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "comm/ce_copy.h"
#include "fused_ag_route.h"
#include "fused_common.h"

namespace mkernel::fused_glue {
namespace {

using BatchMemOpFn = CUresult (*)(CUstream, unsigned int, CUstreamBatchMemOpParams*, unsigned int);

// The driver's cuStreamBatchMemOp (through the runtime: the extension does not link libcuda), or
// null with *why set.
BatchMemOpFn batch_mem_op(std::string* why) {
  void* fn = nullptr;
  cudaDriverEntryPointQueryResult found{};
  const cudaError_t e =
      cudaGetDriverEntryPointByVersion("cuStreamBatchMemOp", &fn, 12000, cudaEnableDefault, &found);
  if (e != cudaSuccess || found != cudaDriverEntryPointSuccess || fn == nullptr) {
    (void)cudaGetLastError();
    *why = "the driver gives no cuStreamBatchMemOp";
    return nullptr;
  }
  return reinterpret_cast<BatchMemOpFn>(fn);
}

// The side streams and events of one device, created on first use (RAII: released at exit).
struct DeviceStreams {
  std::array<cudaStream_t, kCopyEngineStreams> streams{};
  std::array<cudaEvent_t, kCopyEngineStreams> joins{};
  cudaEvent_t fork = nullptr;
  // gemm_rs's route: one per destination rank, recorded after that block's GEMM.
  std::array<cudaEvent_t, comm::kMaxRanks> ready{};
  int used = 0;  // side streams the last fork on this device used (its join waits for them)

  DeviceStreams() {
    for (int i = 0; i < kCopyEngineStreams; ++i) {
      C10_CUDA_CHECK(cudaStreamCreateWithFlags(&streams[i], cudaStreamNonBlocking));
      C10_CUDA_CHECK(cudaEventCreateWithFlags(&joins[i], cudaEventDisableTiming));
    }
    C10_CUDA_CHECK(cudaEventCreateWithFlags(&fork, cudaEventDisableTiming));
    for (cudaEvent_t& e : ready) {
      C10_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    }
  }
  ~DeviceStreams() {
    // At exit the context may already be gone: errors are ignored.
    for (cudaEvent_t e : joins) {
      if (e != nullptr) (void)cudaEventDestroy(e);
    }
    for (cudaEvent_t e : ready) {
      if (e != nullptr) (void)cudaEventDestroy(e);
    }
    if (fork != nullptr) (void)cudaEventDestroy(fork);
    for (cudaStream_t s : streams) {
      if (s != nullptr) (void)cudaStreamDestroy(s);
    }
  }
  DeviceStreams(const DeviceStreams&) = delete;
  DeviceStreams& operator=(const DeviceStreams&) = delete;
};

std::mutex mu;

DeviceStreams& device_streams(const char* op) {
  static std::array<std::unique_ptr<DeviceStreams>, 64> per_device;
  int device = 0;
  C10_CUDA_CHECK(cudaGetDevice(&device));
  TORCH_CHECK(device >= 0 && device < static_cast<int>(per_device.size()), op, ": device index ",
              device, " out of range for the copy-engine route");
  std::lock_guard<std::mutex> lock(mu);
  if (!per_device[device]) per_device[device] = std::make_unique<DeviceStreams>();
  return *per_device[device];
}

// Whether the batch copy with the copy-engine hint is accepted on this device: one 256-byte copy
// inside a scratch buffer on a private stream (the runtime may refuse the batch API or the hint).
std::string probe_batch_copy() {
  void* buf = nullptr;
  if (cudaMalloc(&buf, 512) != cudaSuccess) {
    (void)cudaGetLastError();
    return "could not allocate the probe's 512 bytes";
  }
  cudaStream_t s = nullptr;
  std::string why;
  if (cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) != cudaSuccess) {
    why = "could not create the probe's stream";
  } else {
    const cudaError_t e = comm::ce_copy_async(static_cast<uint8_t*>(buf) + 256, buf, 256, s);
    const cudaError_t done = e == cudaSuccess ? cudaStreamSynchronize(s) : e;
    if (done != cudaSuccess) {
      why = std::string("cudaMemcpyBatchAsync with PreferOverlapWithCompute refused: ") +
            cudaGetErrorString(done);
    }
    (void)cudaStreamDestroy(s);
  }
  (void)cudaGetLastError();
  (void)cudaFree(buf);
  return why;
}

BatchMemOpFn writes_fn = nullptr;
std::atomic<bool> probed{false};

// Stream writes of 1 into flags[first, last) (a peer's, through its mapping) on `s`: the low
// word of each 64-bit flag (the launch gate zeroed the whole flag), each write after the stream's
// earlier copies and a memory fence (CU_STREAM_WRITE_VALUE_DEFAULT). At most 16 per batch (a
// piece of ag_gemm's route has at most 8 chunks).
void write_ones(const char* op, cudaStream_t s, uint64_t* flags, int32_t first, int32_t last,
                int peer) {
  std::array<CUstreamBatchMemOpParams, 16> writes{};
  TORCH_CHECK(last - first <= static_cast<int32_t>(writes.size()), op,
              ": too many flag writes in one batch");
  for (int32_t c = first; c < last; ++c) {
    CUstreamBatchMemOpParams& w = writes[c - first];
    w.writeValue.operation = CU_STREAM_MEM_OP_WRITE_VALUE_32;
    w.writeValue.address = reinterpret_cast<CUdeviceptr>(flags + c);
    w.writeValue.value = 1;
    w.writeValue.flags = CU_STREAM_WRITE_VALUE_DEFAULT;
  }
  const CUresult r = writes_fn(reinterpret_cast<CUstream>(s),
                               static_cast<unsigned int>(last - first), writes.data(), 0);
  TORCH_CHECK(r == CUDA_SUCCESS, op, ": the copy-engine route's flag writes to rank ", peer,
              " failed (CUresult ", static_cast<int>(r), ")");
}

}  // namespace

bool copy_engine_probed() { return probed.load(std::memory_order_acquire); }

bool copy_engine_offered(const char* op, const char* var, bool asked) {
  if (!asked) return false;
  if (capturing() && !copy_engine_probed()) return true;
  const std::string& why = copy_engine_unavailable();
  if (!why.empty()) {
    static std::mutex noted_mu;
    static std::set<std::string> noted;
    std::lock_guard<std::mutex> lock(noted_mu);
    if (noted.insert(var).second) {
      std::fprintf(stderr, "%s: %s set, but the route is not available: %s\n", op, var,
                   why.c_str());
    }
  }
  return why.empty();
}

const std::string& copy_engine_unavailable() {
  static const std::string why = [] {
#if CUDART_VERSION < 12080
    return std::string("built with CUDA < 12.8 (no cudaMemcpyBatchAsync)");
#else
    std::string w;
    writes_fn = batch_mem_op(&w);
    if (writes_fn == nullptr) return w;
    w = probe_batch_copy();
    if (!w.empty()) writes_fn = nullptr;
    return w;
#endif
  }();
  probed.store(true, std::memory_order_release);
  return why;
}

void copy_engine_fork(const char* op, const AgCopyEngineCall& call, cudaStream_t op_stream) {
  const std::string& unavailable = copy_engine_unavailable();
  TORCH_CHECK(unavailable.empty(), op, ": the copy-engine route is not available here (",
              unavailable, "); set MKERNEL_FUSED_AG_COPY_ENGINE=0");
  const comm::GroupDevice& g = *call.group;
  DeviceStreams& st = device_streams(op);
  const int used = std::min(kCopyEngineStreams, g.world);
  C10_CUDA_CHECK(cudaEventRecord(st.fork, op_stream));
  for (int i = 0; i < used; ++i) C10_CUDA_CHECK(cudaStreamWaitEvent(st.streams[i], st.fork, 0));
  const std::vector<int32_t> bounds = ag_route::copy_engine_pieces(call.chunks);
  for (int j = 0; j < g.world; ++j) {
    const int peer = (g.rank + j) % g.world;  // this rank's own slot first, then rank + 1, ...
    if (g.data[peer] == nullptr || g.flags[peer] == nullptr) continue;  // (one node: never)
    const cudaStream_t s = st.streams[j % used];
    for (size_t p = 0; p + 1 < bounds.size(); ++p) {
      const int64_t row0 = bounds[p] * kCopyEngineChunkRows;
      const int64_t row1 = std::min<int64_t>(bounds[p + 1] * kCopyEngineChunkRows, call.m_local);
      uint8_t* dst =
          g.data[peer] + (static_cast<int64_t>(g.rank) * call.m_local + row0) * call.row_bytes;
      const cudaError_t e =
          comm::ce_copy_async(dst, call.x + row0 * call.row_bytes,
                              static_cast<size_t>((row1 - row0) * call.row_bytes), s);
      TORCH_CHECK(e == cudaSuccess, op, ": the copy-engine route's copy of rows [", row0, ", ",
                  row1, ") to rank ", peer, " failed: ", cudaGetErrorString(e));
      // The piece's chunk flags at the destination (a piece has at most 8 chunks).
      write_ones(op, s, g.flags[peer] + call.flag_base + static_cast<int64_t>(g.rank) * call.chunks,
                 bounds[p], bounds[p + 1], peer);
    }
  }
  for (int i = 0; i < used; ++i) C10_CUDA_CHECK(cudaEventRecord(st.joins[i], st.streams[i]));
  st.used = used;
}

void copy_engine_join(const char* op, cudaStream_t op_stream) {
  DeviceStreams& st = device_streams(op);
  for (int i = 0; i < st.used; ++i) {
    C10_CUDA_CHECK(cudaStreamWaitEvent(op_stream, st.joins[i], 0));
  }
}

RsCopyEngine::RsCopyEngine(const char* op, const comm::GroupDevice& g, uint32_t flag_base,
                           uint64_t slot_bytes, cudaStream_t op_stream)
    : op_(op), g_(g), flag_base_(flag_base), slot_bytes_(slot_bytes), op_stream_(op_stream) {
  const std::string& unavailable = copy_engine_unavailable();
  TORCH_CHECK(unavailable.empty(), op, ": the copy-engine route is not available here (",
              unavailable, "); set MKERNEL_FUSED_RS_COPY_ENGINE=0");
}

void RsCopyEngine::send(int dst, const void* partial, uint64_t bytes) {
  TORCH_CHECK(dst >= 0 && dst < g_.world && dst != g_.rank && g_.data[dst] != nullptr &&
                  g_.flags[dst] != nullptr,
              op_, ": the copy-engine route cannot send to rank ", dst);
  TORCH_CHECK(bytes <= slot_bytes_, op_, ": a partial of ", bytes, " bytes exceeds its slot (",
              slot_bytes_, ")");
  DeviceStreams& st = device_streams(op_);
  const int j = (dst - g_.rank + g_.world) % g_.world;  // 1, 2, ...: the sends' order
  const int used = std::min(kCopyEngineStreams, g_.world - 1);
  const cudaStream_t s = st.streams[(j - 1) % used];
  C10_CUDA_CHECK(cudaEventRecord(st.ready[dst], op_stream_));
  C10_CUDA_CHECK(cudaStreamWaitEvent(s, st.ready[dst], 0));
  uint8_t* slot = g_.data[dst] + static_cast<uint64_t>(g_.rank) * slot_bytes_;
  const cudaError_t e = comm::ce_copy_async(slot, partial, static_cast<size_t>(bytes), s);
  TORCH_CHECK(e == cudaSuccess, op_, ": the copy-engine route's copy of ", bytes, " bytes to rank ",
              dst, " failed: ", cudaGetErrorString(e));
  write_ones(op_, s, g_.flags[dst] + flag_base_ + g_.rank, 0, 1, dst);
  st.used = used;
  ++sends_;
}

void RsCopyEngine::join() {
  joined_ = true;
  if (sends_ == 0) return;
  DeviceStreams& st = device_streams(op_);
  for (int i = 0; i < st.used; ++i) C10_CUDA_CHECK(cudaEventRecord(st.joins[i], st.streams[i]));
  copy_engine_join(op_, op_stream_);
}

RsCopyEngine::~RsCopyEngine() {
  if (joined_ || sends_ == 0) return;
  try {
    join();
  } catch (...) {  // (the error that unwound the call is the one to report)
  }
}

}  // namespace mkernel::fused_glue

#endif  // MKERNEL_WITH_CUDA
