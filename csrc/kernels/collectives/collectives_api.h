// Host API of the collectives on the GPU substrate (plain C++, no torch): all_gather,
// reduce_scatter and all_reduce of one group, one kernel per call.
//
// Every kernel runs the same protocol over the group's symmetric memory (kernels/comm):
//   1. op_begin: e = the call number (device counter); entry_barrier with the call's signature.
//   2. stage: each rank copies what its peers need out of its input into ITS OWN data region,
//      chunk by chunk, and releases a per-chunk flag at each reader (flag = e).
//   3. pull: each rank waits for a chunk's flag (a local-memory poll) and reads the chunk from
//      the peer's data region through the IPC mapping (reduce_scatter / all_reduce sum the W
//      contributions of a chunk in rank order 0..W-1 in fp32; all_reduce then publishes its
//      reduced block the same way for the peers to pull).
//   4. op_end.
// Pull, not push: a rank's data region is written only by that rank, so within a call no rank
// writes where another reads, and between calls the entry barrier (a peer entered call e =>
// its kernel of call e-1, and so its reads of our region, completed) is the only ordering
// needed. Data never crosses the link twice: each byte a rank needs is read once from its
// owner. The flags a reader waits on live in the reader's own flag region (written remotely by
// the owner), so every spin polls local memory.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "../comm/group_device.h"

namespace mkernel::collectives {

enum class DType : int { kBF16 = 0, kFP16 = 1, kFP32 = 2 };

struct Args {
  comm::GroupDevice group;   // the group's device view (SymmetricGroup::device_view())
  const void* x = nullptr;   // this rank's input, `count` elements (contiguous)
  void* out = nullptr;       // the output: all_gather W*count, reduce_scatter count/W, all_reduce count
  uint64_t count = 0;        // elements of x (the same on every rank)
  DType dtype = DType::kBF16;
  uint64_t signature = 0;    // comm::call_signature of the call (checked by the entry barrier)
  int ctas = 0;              // grid size; 0: the co-resident maximum on this device
  cudaStream_t stream = nullptr;
};

// Bytes of symmetric data region every rank needs for the call (SymmetricGroup::ensure).
uint64_t all_gather_bytes(DType dtype, uint64_t count, int world);
uint64_t reduce_scatter_bytes(DType dtype, uint64_t count, int world);
uint64_t all_reduce_bytes(DType dtype, uint64_t count, int world);

// The inter-node areas (GroupDevice::net) every rank needs for the call when the group spans
// several nodes (SymmetricGroup::ensure_net): a rank of another node receives a whole block
// through the FIFO -> Go proxy -> transport path (the receive area alternates halves by call
// parity: a peer may send call e+1 while this rank still reads call e).
struct NetBytes {
  uint64_t send = 0;
  uint64_t recv = 0;
};
NetBytes all_gather_net_bytes(DType dtype, uint64_t count, int world);
NetBytes reduce_scatter_net_bytes(DType dtype, uint64_t count, int world);
NetBytes all_reduce_net_bytes(DType dtype, uint64_t count, int world);

// Whether these kernels were built with the inter-node path (kernels/comm/net_ops.cuh).
bool net_supported();

// The experimental overlap mode of calls across nodes (MKERNEL_NET_OVERLAP / MKERNEL_NET_STAGERS,
// collectives.cu item_range): mode 1 on, 0 off; stager_eighths 0..7 (0: the deferred transport
// waits alone); -1 each: back to the environment's. Applies to calls launched (or captured) after
// it, process-wide; for benchmarks that time the variants in one process. False: out of range.
bool set_net_overlap(int mode, int stager_eighths);

// Launch the call's kernel on args.stream. reduce_scatter needs count % world == 0. Returns
// the launch's error (cudaErrorInvalidValue with *reason set for bad arguments).
cudaError_t all_gather(const Args& args, const char** reason = nullptr);
cudaError_t reduce_scatter(const Args& args, const char** reason = nullptr);
cudaError_t all_reduce(const Args& args, const char** reason = nullptr);

}  // namespace mkernel::collectives
