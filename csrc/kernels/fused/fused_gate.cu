// The launch gate of the fused GEMM + communication kernels (fused_gate_api.h).
//
// Why (benchmarks/NOTES.md "Fused ops, fused11"): under MPS at 100/W % the ranks' 2-CTA-cluster
// grids fit on the GPU together only when they are placed from an empty GPU (W = 2: two grids
// of 48 CTAs, 96 SMs, s8run2). Back to back, a rank that finishes a call first launches its
// next grid while a peer's previous grid still holds SMs; its CTAs are placed (then spin at the
// entry barrier), and the peer's next grid finds room for only part of its CTAs (s10run1,
// ag_gemm Llama fc1 W=2 grid 48: 32 of 48), the rest waiting for SMs a whole GEMM later. The
// call then takes ~1.8x, and the state repeats itself (the late rank stays late): 4 calls after
// an aligned start measured 10.4 ms per call where the aligned launches' period was 6.3 ms.
// The gate keeps a rank's next fused grid off the GPU until every peer's previous fused grid
// has left it: one warp spins (bounded) in place of a whole grid squatting.
//
// Protocol: a fused kernel's last CTA releases FlagSlot::kExit + rank = e (its call number) at
// every same-node rank, itself included. Before a fused launch the gate reads this rank's own
// kExit (e_last: the group's last fused call, finished on this stream, so the value is this
// rank's) and waits for kExit + q >= e_last from every local peer q. Every rank issues the
// group's calls in the same order, so peer q's call e_last is the same call; it completes
// without this rank doing more (this rank's part of it is done), so the wait cannot deadlock.
// A call that signalled no exit on any rank (no such kernel) leaves older values alike on every
// rank: the gate then passes at once.
//
// Barrier mode (launch_gate's `barrier`, MKERNEL_FUSED_GATE_MODE=barrier): the exit wait keeps
// the peers' previous FUSED grids off the GPU, not their other kernels; s10run2's timeline mode
// (a memset between gate and grid) still split 4 of 8 gated launches. In barrier mode each lane
// also releases FlagSlot::kGate + rank = e (the call number the fused kernel after the gate
// takes: *epoch + 1, read here after the stream's previous group op stored it) at its peer and
// waits for kGate + q >= e from every local peer q. A peer's gate starts only once its stream
// has finished everything queued before its fused call, so when the wait passes, no peer runs
// an earlier kernel of that stream any more, and the grids launched right after the gates are
// placed together. No new deadlock: every rank reaches its gate of call e without any other
// rank's call e (its own previous work needs only calls <= e - 1, complete on every rank that
// passed its own gate of e - 1); every rank must set the mode alike (a rank without it never
// releases kGate: its peers' waits time out naming it, kWaitPeerGate).
#include "fused_gate_api.h"

#include "../comm/group_sync.cuh"

namespace mkernel::fused {
namespace {

__global__ void __launch_bounds__(32) fused_gate_kernel(const comm::GroupDevice g, int32_t op,
                                                        int32_t barrier) {
  const int q = static_cast<int>(threadIdx.x);
  if (q >= g.world || g.flags[q] == nullptr) return;  // same-node ranks only
  const uint64_t e = comm::op_begin(g);
  if (barrier) comm::signal(g, q, comm::FlagSlot::kGate + g.rank, e);  // q == rank included
  if (q == g.rank) return;
  const uint64_t* mine = g.flags[g.rank];
  const uint64_t last = comm::ld_relaxed_sys(mine + comm::FlagSlot::kExit + g.rank);
  comm::wait_geq(g, mine + comm::FlagSlot::kExit + q, last,
                 comm::WaitSite{op, comm::kWaitPeerExit, q,
                                static_cast<int32_t>(comm::FlagSlot::kExit) + q});
  if (barrier) {
    comm::wait_geq(g, mine + comm::FlagSlot::kGate + q, e,
                   comm::WaitSite{op, comm::kWaitPeerGate, q,
                                  static_cast<int32_t>(comm::FlagSlot::kGate) + q});
  }
}

}  // namespace

cudaError_t launch_gate(const comm::GroupDevice& g, int32_t op, cudaStream_t stream,
                        bool barrier) {
  static_assert(comm::kMaxRanks <= 32, "one warp waits for every peer");
  fused_gate_kernel<<<1, 32, 0, stream>>>(g, op, barrier ? 1 : 0);
  return cudaGetLastError();
}

}  // namespace mkernel::fused
