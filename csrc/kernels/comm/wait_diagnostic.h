// The record a timed-out device wait leaves behind (host and device code).
#pragma once

#include <cstdint>

namespace mkernel::comm {

// What waited (WaitDiagnostic::what).
enum WaitKind : int32_t {
  kWaitARows = 1,      // GEMM hook (a): A rows of a tile
  kWaitPeerFlag = 2,   // a flag a peer releases (data arrived, tile ready, ...)
  kWaitEntry = 3,      // a peer's entry into the same call (entry barrier)
  kWaitSignature = 4,  // a peer called a different op or shape (mismatch, not a timeout)
  kWaitFifoCredit = 5, // no FIFO slot freed by the proxy
  kWaitFifoFailed = 6, // the proxy reported a failure (error_peer names the peer)
  kWaitNetArrival = 7, // inter-node data (FIFO path) from a peer
  kWaitNetSent = 8,    // the transport finishing a command to a peer (the FIFO's done count)
  kWaitPeerExit = 9,   // a peer's last fused kernel leaving the GPU (fused launch gate)
  kWaitPeerGate = 10,  // a peer's launch gate of the same fused call (the gate's barrier mode)
  kWaitTilePhase = 11, // the first phase of the same query tile (another CTA of this engine)
};

// Which op waited (WaitDiagnostic::op).
enum WaitOp : int32_t {
  kOpNone = 0,
  kOpGemmHooked = 1,
  kOpAllGather = 2,
  kOpReduceScatter = 3,
  kOpAllReduce = 4,
  kOpAgGemm = 5,
  kOpGemmRs = 6,
  kOpGemmAr = 7,
  kOpMoeDispatch = 8,
  kOpMoeCombine = 9,
  kOpRingAttention = 10,
};

// Lives in pinned, mapped host memory; the host reads it after the kernel failed. Written by
// the first waiter that times out (claim on `claimed` with an atomic CAS), `valid` written last.
struct WaitDiagnostic {
  uint64_t expected;
  uint64_t seen;
  uint64_t flag_address;
  int32_t flag_index;
  int32_t block_x;
  int32_t block_y;
  int32_t thread;
  int32_t what;  // WaitKind
  int32_t valid;
  int32_t op;     // WaitOp
  int32_t group;  // session handle (GroupDevice::group_id)
  int32_t rank;   // the waiting rank
  int32_t peer;   // the rank waited for (-1: unknown / local)
  uint32_t claimed;
  uint64_t elapsed_ns;
};

}  // namespace mkernel::comm
