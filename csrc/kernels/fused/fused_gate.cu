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
//
// Reset (ag_gemm's copy-engine route, ag_gemm.cpp): the route's arrival flags are set by stream
// writes of a constant (1), not the call number, so before the barrier the gate stores 0 into
// them at this rank. Every peer writes them only after its own gate has passed, i.e. after this
// rank's kGate release, which follows the stores. So a flag holding 1 in the kernel after this
// gate was set in this call. The stores wait for every peer's exit (kExit, above) first: the
// slots are the op range's, where gemm_rs / gemm_ar's tile flags live, and a peer's reduce polls
// this rank's tile flags through the IPC mapping until its own kernel ends, which may be after
// this rank's kernel of that call ended. A 0 stored while a lagging peer still waits for a tile
// flag holding the call number would never satisfy that wait: its bounded wait would trap,
// naming this rank. Past the exit wait no peer's fused kernel of an earlier call runs (the
// collectives and ring attention read only their own flags; the copy role's and the stream
// writes' flags at this rank are read only by this rank, whose previous kernel waited for all).
#include "fused_gate_api.h"

#include "../comm/group_sync.cuh"

namespace mkernel::fused {
namespace {

__global__ void __launch_bounds__(32)
    fused_gate_kernel(const comm::GroupDevice g, int32_t op, int32_t barrier, uint32_t reset_base,
                      uint32_t reset_count) {
  const int q = static_cast<int>(threadIdx.x);
  const bool peer = q < g.world && g.flags[q] != nullptr;  // same-node ranks only
  const uint64_t* mine = g.flags[g.rank];
  auto wait_exit = [&] {
    const uint64_t last = comm::ld_relaxed_sys(mine + comm::FlagSlot::kExit + g.rank);
    comm::wait_geq(g, mine + comm::FlagSlot::kExit + q, last,
                   comm::WaitSite{op, comm::kWaitPeerExit, q,
                                  static_cast<int32_t>(comm::FlagSlot::kExit) + q});
  };
  if (reset_count > 0) {
    // The copy-engine route's arrival flags at this rank back to 0 before any peer may set them
    // (a peer's copy engines start once its gate has seen this rank's kGate, released below with
    // a system-scope fence after these stores), and only once every peer's previous fused kernel
    // has ended (its exit, acquired): a lagging peer's gemm_rs / gemm_ar may still poll its tile
    // flags in these slots at this rank (see "Reset" above).
    if (peer && q != g.rank) wait_exit();
    __syncwarp();
    for (uint32_t i = threadIdx.x; i < reset_count; i += 32) g.flags[g.rank][reset_base + i] = 0;
    __syncwarp();
  }
  if (!peer) return;
  const uint64_t e = comm::op_begin(g);
  if (barrier) comm::signal(g, q, comm::FlagSlot::kGate + g.rank, e);  // q == rank included
  if (q == g.rank) return;
  if (reset_count == 0) wait_exit();  // (with a reset: done above)
  if (barrier) {
    comm::wait_geq(g, mine + comm::FlagSlot::kGate + q, e,
                   comm::WaitSite{op, comm::kWaitPeerGate, q,
                                  static_cast<int32_t>(comm::FlagSlot::kGate) + q});
  }
}

}  // namespace

cudaError_t launch_gate(const comm::GroupDevice& g, int32_t op, cudaStream_t stream, bool barrier,
                        uint32_t reset_base, uint32_t reset_count) {
  static_assert(comm::kMaxRanks <= 32, "one warp waits for every peer");
  if (reset_count > 0 && !barrier) return cudaErrorInvalidValue;  // the reset needs the barrier
  fused_gate_kernel<<<1, 32, 0, stream>>>(g, op, barrier ? 1 : 0, reset_base, reset_count);
  return cudaGetLastError();
}

}  // namespace mkernel::fused
