// The record a timed-out device wait leaves behind (host and device code).
#pragma once

#include <cstdint>

namespace mkernel::comm {

// What a timed-out wait saw. Lives in pinned, mapped host memory; the host
// reads it after the kernel failed. `valid` is written last.
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
};

enum WaitKind : int32_t { kWaitARows = 1, kWaitPeerFlag = 2 };

}  // namespace mkernel::comm
