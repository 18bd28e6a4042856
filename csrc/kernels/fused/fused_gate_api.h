// Host API of the fused kernels' launch gate (plain C++, no torch): see fused_gate.cu.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "../comm/group_device.h"

namespace mkernel::fused {

// Enqueues on `stream` one warp that returns once every same-node peer of `g` has finished the
// group's last fused kernel this rank finished (FlagSlot::kExit, released by each fused
// kernel's last CTA: fused_hooks.cuh call_end), so the fused grid launched after it is placed
// on a GPU its peers' previous fused grids have left. Bounded: a peer that never exits is
// reported (kWaitPeerExit naming it, `op`) and the kernel traps. `barrier` (opt-in, every rank
// alike): also wait until every same-node peer's gate of the same call has started
// (FlagSlot::kGate; kWaitPeerGate when one never does). reset_count > 0 (barrier mode only):
// once every peer's exit has been seen (no peer's earlier fused kernel still polls them), store
// 0 into this rank's flag slots [reset_base, reset_base + reset_count) before the kGate release
// (the copy-engine route's arrival flags, fused_gate.cu). Returns the launch error
// (cudaErrorInvalidValue for a reset without the barrier).
cudaError_t launch_gate(const comm::GroupDevice& g, int32_t op, cudaStream_t stream,
                        bool barrier = false, uint32_t reset_base = 0, uint32_t reset_count = 0);

}  // namespace mkernel::fused
