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

// Right after a fused launch on `stream`: one warp stores the call number the grid's last CTA
// stored (*g.epoch: its call) into v.own, then returns once every mate's word has reached it
// (each mate's grid of the same call has left the GPU), so the stream's next grid is placed on a
// GPU the other nodes' grids of this call have left. Bounded like every wait (kWaitPeerExit
// naming the mate, `op`, then a trap).
cudaError_t gpu_gate_after(const comm::GroupDevice& g, const GpuGateView& v, int32_t op,
                           cudaStream_t stream);

}  // namespace mkernel::fused
