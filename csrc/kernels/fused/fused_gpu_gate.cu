// The launch gate across emulated nodes sharing one GPU (fused_gpu_gate_api.h).
//
// Why (benchmarks/NOTES.md "xnode2"): the fused launch gate (fused_gate.cu) waits until every
// same-node peer's previous fused grid has left the GPU, so that the ranks' co-resident grids are
// placed together. Ranks of other emulated nodes share the same GPU under MPS, but the group
// hides their memory (they are "remote"), so nothing gates against their grids: back to back, a
// rank can launch its next grid while another node's previous grid still holds SMs, and the
// partially placed grid state of fused11 (~1.8x per call, self-sustaining) can start. Real nodes
// do not share SMs: this gate exists for the emulation (and for measuring that reading), opt-in.
//
// Protocol: right after each gated fused launch, one warp on the stream copies the group's call
// counter (*epoch = e, stored by the grid's last CTA: the call just finished on this stream) into
// this rank's exit word, then waits until every mate's exit word >= e. Every rank issues the
// group's calls in the same order and gates the same calls (the variable is the same on every
// rank), so mate q's call e is the same call; it completes without this rank doing more (this
// rank's part is done), and q publishes e before it waits itself: no cycle.
#include "fused_gpu_gate_api.h"

#include "../comm/group_sync.cuh"

namespace mkernel::fused {
namespace {

__global__ void __launch_bounds__(32) gpu_gate_after_kernel(const comm::GroupDevice g,
                                                            const GpuGateView v, int32_t op) {
  const int i = static_cast<int>(threadIdx.x);
  const uint64_t e = comm::ld_relaxed_sys(g.epoch);
  if (i == 0) comm::st_release_sys(v.own, e);
  if (i >= v.count) return;
  comm::wait_geq(g, v.mates[i], e, comm::WaitSite{op, comm::kWaitPeerExit, v.mate_rank[i], -1});
}

}  // namespace

cudaError_t gpu_gate_after(const comm::GroupDevice& g, const GpuGateView& v, int32_t op,
                           cudaStream_t stream) {
  static_assert(comm::kMaxRanks <= 32, "one warp waits for every mate");
  gpu_gate_after_kernel<<<1, 32, 0, stream>>>(g, v, op);
  return cudaGetLastError();
}

}  // namespace mkernel::fused
