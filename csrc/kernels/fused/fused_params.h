// What a fused GEMM + communication launch receives (host and device; plain C++): the group's
// device view and the op's layout. See fused_hooks.cuh for the protocol.
#pragma once

#include <cstdint>

#include "../comm/group_device.h"

namespace mkernel::fused {

enum FusedMode : int32_t { kModeAllGather = 0 };

struct FusedParams {
  comm::GroupDevice group;
  int32_t mode = kModeAllGather;
  int32_t op = comm::kOpAgGemm;  // WaitOp for diagnostics and the entry barrier
  uint64_t signature = 0;        // the call's signature (entry barrier)
  // kModeAllGather
  const uint8_t* x = nullptr;  // [m_local, K] this rank's rows
  int32_t m_local = 0;         // rows per rank
  int32_t m_total = 0;         // world * m_local (the GEMM's M)
  int64_t row_bytes = 0;       // K * element size (a multiple of 16)
  int32_t chunk_rows = 128;    // rows per arrival flag
  int32_t chunks = 0;          // ceil(m_local / chunk_rows)
  uint32_t flag_base = comm::FlagSlot::kOpSlotBase;  // flag of (rank s, chunk c): base + s * chunks + c
};

}  // namespace mkernel::fused
