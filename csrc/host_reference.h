// The host reference backend's plumbing: how the CPU kernels of ag_gemm, gemm_rs and gemm_ar
// (csrc/<op>.cpp) move data between the ranks of a group through the real inter-node path.
//
// Host threads play the GPU kernel's producer role: they push WRITE_SIGNAL commands into the
// command FIFO of a Go data path (csrc/include/mkernel/fifo.h, gocore/datapath), the Go proxy
// drains them into a transport, and receivers wait on arrival flags with bounded waits.
//
// Per group (the op's `group` argument: the Go session handle of an mkernel.init() context) a
// HostGroup holds up to two data paths, created lazily on the group's first multi-rank call:
//   - "intra": the loopback transport, connecting the ranks of the same (emulated) node;
//   - "inter": the transport MKERNEL_NET / MKERNEL_NET_PLUGIN / automatic selection picks
//     (tcp where there is no RDMA NIC), connecting ranks of different nodes.
// A rank's node is the pair (host name, MKERNEL_EMULATED_NODE), all-gathered over the session
// once, so ranks of one host split into emulated nodes talk tcp across the split.
//
// Every call runs the same protocol (one call = one epoch, a sequence number kept in the
// group; flags are never reset, receivers wait for flag >= epoch):
//   1. header: every rank writes a 128-byte header (op, dtype, shapes, its buffer capacities)
//      into every peer's header slot [epoch parity][rank] and signals flag (kHeader, rank).
//      Receiving every peer's header proves that the peer finished the previous call, so its
//      receive buffers may be overwritten; the shapes are checked against this rank's (errors
//      name the peer and are raised on every rank alike, so the group stays usable).
//   2. growth: if the call needs more buffer space than some rank has, every rank (they all
//      see the same headers) quiesces (own commands finished, session barrier) and recreates
//      the data paths with power-of-two larger buffers.
//   3. data: the op's phases (Arrival::kPhaseA, kPhaseB) — stage into the send area, push
//      WRITE_SIGNAL to the peer's receive area, wait for the peers' flags.
// Every wait is bounded by the op timeout (MKERNEL_OP_TIMEOUT seconds, default 60) and watches
// the data paths' failure word, so a dead peer fails the call within milliseconds with the
// transport's message naming it; a timeout names the peer, the flag and the call. After such a
// failure the group is marked broken: later calls raise at once.
//
// Buffers of one data path (symmetric ids, fifo.h's flag array is id 0):
//   id 1 (receive): [header slots: 2 x world x 128 B][data area: recv capacity]
//   id 2 (send):    [header staging: 128 B][send area: send capacity]
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/ScalarType.h>
#include <mkernel/core_api.h>
#include <mkernel/fifo.h>

#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace mkernel {
namespace host {

// The ops of the host reference backend (the header's op field).
enum class OpKind : uint16_t {
  kAgGemm = 1,
  kGemmRs = 2,
  kGemmAr = 3,
  kRingAttention = 4,  // ring_attention's host reference
  // The plain collectives (collectives_host.cpp). Their dims: {rows (x.size(0)), elements per
  // row, x.dim(), a hash of x.sizes()[1:]}.
  kAllGather = 5,
  kReduceScatter = 6,
  kAllReduce = 7,
  kMoeDispatch = 8,  // moe_dispatch_gemm (csrc/moe_host.cpp)
  kMoeCombine = 9,   // moe_combine and its gather
  kMoeScatter = 10,  // the scatter of moe_combine's backward
};

// Arrival flag kinds; a flag slot is kind * world + source rank.
enum class Arrival : uint32_t { kHeader = 0, kPhaseA = 1, kPhaseB = 2 };
constexpr uint32_t kArrivalKinds = 3;

// What this rank announces at the start of a call.
struct CallInfo {
  OpKind op;
  at::ScalarType dtype;
  // x's and w's sizes: {x.size(0), x.size(1), w.size(0), w.size(1)}.
  std::array<int64_t, 4> dims;
  // Bit i set: dims[i] must be equal on every rank; names[i] names it in messages.
  uint32_t must_match;
  std::array<const char*, 4> names;
  uint64_t recv_bytes;  // the receive data area this call needs on every rank
  uint64_t send_bytes;  // the send area this call needs on every rank
};

// A peer's header as received (the parts the ops look at).
struct PeerInfo {
  int rank;
  OpKind op;
  at::ScalarType dtype;
  std::array<int64_t, 4> dims;
};

class HostGroup;
class DataPath;

// One call of an op on a group. Construct it, begin() the protocol, move data with
// send()/wait(), then end(). It holds the group's lock for its lifetime (calls on one group
// are serialized, as the ranks must issue them in the same order anyway). If it is destroyed
// between begin() and end() outside the consistent points (an exception from a wait, a
// timeout), the group is marked broken.
class Call {
 public:
  // Resolves `group` (creating its HostGroup on first use: an all-gather over the session).
  Call(const char* op, int64_t group, int64_t world_size);
  ~Call();
  Call(const Call&) = delete;
  Call& operator=(const Call&) = delete;

  int rank() const;
  int world() const;

  // Steps 1 and 2 of the protocol. On return every peer's header was received and checked.
  void begin(const CallInfo& info);

  // The send area of the data path that reaches `peer` (info.send_bytes long), and the
  // receive data area where `peer`'s data lands (info.recv_bytes long). For peer == rank()
  // any path's areas (the first one's).
  uint8_t* send_area(int peer);
  uint8_t* recv_area(int peer);

  // WRITE_SIGNAL: send_area(peer)[local_off, +bytes) to peer's receive data area at
  // remote_off, then flag (kind, rank()) = epoch at the peer. bytes may be 0.
  void send(int peer, uint64_t local_off, uint64_t remote_off, uint64_t bytes, Arrival kind);

  // Waits until `peer`'s data of `kind` for this call has arrived; `what` names it in
  // errors ("the x rows").
  void wait(int peer, Arrival kind, const char* what);

  // The call completed on this rank.
  void end();

 private:
  [[noreturn]] void fail(const std::string& message);

  const char* op_;
  std::shared_ptr<HostGroup> group_;
  std::unique_lock<std::mutex> lock_;
  bool begun_ = false;
  bool consistent_ = true;  // false while peers may be mid-protocol with us
  bool ended_ = false;
};

// Releases the group's data paths (Context.close / mkernel.shutdown). Quiesces first when the
// group is healthy: waits for this rank's commands to finish and for every rank at a session
// barrier, so that no peer loses in-flight commands. Never throws; idempotent.
void release_group(int64_t group);

// JSON describing the group's host state (rank, nodes, data paths, epoch, capacities), or
// "{}" when it has none. For tests and diagnostics.
std::string group_info(int64_t group);

}  // namespace host
}  // namespace mkernel
