// Host API of the launch gate across emulated nodes sharing one GPU (plain C++, no torch): see
// fused_gpu_gate.cu. Measurement, opt-in (MKERNEL_FUSED_GATE_GPU=1, fused_common.cpp).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "../comm/group_device.h"

namespace mkernel::fused {

// The ranks of the group on this GPU that live on other (emulated) nodes: their exit words,
// mapped into this process through CUDA IPC, and this rank's own.
struct GpuGateView {
  uint64_t* own = nullptr;                       // this rank's exit word (device memory)
  const uint64_t* mates[comm::kMaxRanks] = {};   // other-node ranks' exit words on this GPU
  int32_t mate_rank[comm::kMaxRanks] = {};       // their group ranks (diagnostics)
  int32_t count = 0;
};

// After a fused launch on `stream`: one thread stores *epoch (the call number the fused kernel's
// last CTA stored: its call) into v.own, so the other-node ranks' gates see this grid has left.
cudaError_t gpu_gate_publish(const GpuGateView& v, const uint64_t* epoch, cudaStream_t stream);

// Before a fused launch on `stream`: one warp returns once every mate's exit word has reached
// this rank's own (the group's last gated fused call, finished on this stream), bounded like
// every wait (kWaitPeerExit naming the mate, `op`, then a trap).
cudaError_t gpu_gate_wait(const comm::GroupDevice& g, const GpuGateView& v, int32_t op,
                          cudaStream_t stream);

}  // namespace mkernel::fused
