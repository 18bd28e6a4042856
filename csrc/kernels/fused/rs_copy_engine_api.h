// Host API of gemm_rs's copy-engine route's two kernels (plain C++, no torch): see
// rs_copy_engine.cu, and csrc/fused_copy_engine.h for the route as a whole.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "../comm/group_device.h"

namespace mkernel::fused {

// The route's entry barrier for call *g.epoch + 1 (group_sync.cuh entry_barrier: every same-node
// rank has entered the same call, and `signature` — op, shape, dtype — matches every peer's,
// else kWaitSignature names the peer and the kernel traps). One warp on `stream`, after the
// launch gate and before the first copy into a peer's region: a rank called with another shape
// must never have its slots written at this rank's sizes.
cudaError_t launch_route_entry(const comm::GroupDevice& g, int32_t op, uint64_t signature,
                               cudaStream_t stream);

// out[i] = round(sum over ranks s = 0 .. world - 1, in that order, of float(partial_s[i])), for
// i < elems, where partial_s is `own` for s == g.rank and slot s of this rank's data region
// (g.data[g.rank] + s * slot_bytes) for the others, each slot valid once this rank's flag
// flag_base + s holds a nonzero value (set by source s's stream write after its copy: the launch
// gate reset it to 0 for this call). The flags are waited for by one warp in a kernel of its own,
// before the reduce's grid is placed (wait_geq: bounded, kWaitPeerFlag naming s). The reduce's
// last CTA ends the call as the fused kernels do (the epoch, kExit at every same-node rank), so
// the next fused call's launch gate sees it.
struct RsSlotsReduce {
  comm::GroupDevice group;
  int32_t op = comm::kOpGemmRs;  // WaitOp for diagnostics
  uint32_t flag_base = 0;
  const void* own = nullptr;  // this rank's own partial, `elems` elements
  uint64_t slot_bytes = 0;    // bytes between two slots (a multiple of 16)
  void* out = nullptr;        // `elems` elements
  int64_t elems = 0;
  int32_t bf16 = 1;  // element type of the partials and out: bf16 (1) or fp16 (0)
};

// Launches the flags' wait (one warp) and then the reduce with `grid` CTAs (at least 1) on
// `stream`.
cudaError_t launch_rs_slots_reduce(const RsSlotsReduce& p, int grid, cudaStream_t stream);

}  // namespace mkernel::fused
