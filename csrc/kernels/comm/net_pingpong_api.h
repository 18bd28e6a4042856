// Host API of the inter-node path's self-test kernel (net_pingpong.cu; torch glue in
// csrc/comm/net_pingpong.cpp). Plain C++: no torch.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "group_device.h"

namespace mkernel::comm {

// Arrival flag slots the test uses (slot = kind * kMaxRanks + source rank).
struct NetPingPongSlot {
  static constexpr uint32_t kPing = 0;
  static constexpr uint32_t kData = 1 * kMaxRanks;
  static constexpr uint32_t kAck = 2 * kMaxRanks;
  static constexpr uint32_t kBulk = 3 * kMaxRanks;
  static constexpr uint32_t kSlots = 4 * kMaxRanks;
};

struct NetPingPongParams {
  GroupDevice g;          // rank, world, diag, timeout_ns, group_id, net (the rest unused)
  int peer = 0;           // the other rank (another node)
  bool initiator = false; // pings first (the lower rank)
  int iters = 0;          // latency round trips
  uint64_t seq_base = 0;  // flag values used are seq_base + 1 ... (flags only grow)
  // Out (device memory): per iteration, the initiator's %globaltimer before the push of ping i
  // and after the pong arrived, or the responder's when ping i arrived ([2 * iters] words).
  uint64_t* times = nullptr;
  // Data check: `rounds` rounds, each sends data_bytes (a multiple of 16) in chunks of
  // chunk_bytes both ways at once and verifies what arrived.
  uint64_t data_bytes = 0;
  uint64_t chunk_bytes = 0;
  int rounds = 0;
  unsigned long long* mismatches = nullptr;  // out: 16-byte words that differed (device memory)
  uint64_t* data_ns = nullptr;               // out: [0] start, [1] end of the data phase
  // Bulk phase (throughput): the initiator sends data_bytes from send_area `bulk_rounds` times
  // (unchanged data, chunk_bytes per command, a signal per round); the responder acknowledges
  // the last round. bulk_ns[0] / [1]: the initiator's stamps before the first push and after
  // the acknowledgement.
  int bulk_rounds = 0;
  uint64_t* bulk_ns = nullptr;
  // Fault test: >= 0 makes this rank stop after that many latency iterations and skip the
  // rest (its peer's next wait must time out, record the wait naming this rank, and trap).
  int stop_after = -1;
};

// One CTA. Launched by both ranks; returns the launch error.
cudaError_t launch_net_pingpong(const NetPingPongParams& p, cudaStream_t stream);

}  // namespace mkernel::comm
