// What a fused GEMM + communication launch receives (host and device; plain C++): the group's
// device view and the op's layout. See fused_hooks.cuh for the protocol of each mode.
#pragma once

#include <cstdint>

#include "../comm/group_device.h"

namespace mkernel::fused {

enum FusedMode : int32_t {
  kModeAllGather = 0,  // ag_gemm: A = the gathered rows, pushed by the COPY role
  kModeReduce = 1,     // gemm_rs / gemm_ar (one-shot): D = this rank's partial, REDUCE role
};

struct FusedParams {
  comm::GroupDevice group;
  int32_t mode = kModeAllGather;
  int32_t op = comm::kOpAgGemm;  // WaitOp for diagnostics and the entry barrier
  uint64_t signature = 0;        // the call's signature (entry barrier)
  uint32_t flag_base = comm::FlagSlot::kOpSlotBase;  // first flag slot of the op

  // kModeAllGather: flag of (rank s, chunk c) = flag_base + s * chunks + c.
  const uint8_t* x = nullptr;  // [m_local, K] this rank's rows
  int32_t m_local = 0;         // rows per rank
  int32_t m_total = 0;         // world * m_local (the GEMM's M)
  int64_t row_bytes = 0;       // K * element size (a multiple of 16)
  int32_t chunk_rows = 128;    // rows per arrival flag
  int32_t chunks = 0;          // ceil(m_local / chunk_rows)

  // kModeReduce: the GEMM's D is this rank's data region ([m, n] partial); tile (tm, tn)'s flag
  // = flag_base + tm * tiles_n + tn, released at this rank when the tile is stored. The REDUCE
  // role sums rows [reduce_row0, reduce_row0 + reduce_rows) of every same-node rank's partial in
  // fp32, rank order 0..world-1, into out [reduce_rows, n].
  int32_t m = 0, n = 0;
  int32_t block_m = 0, block_n = 0, tiles_n = 0;
  int32_t reduce_row0 = 0, reduce_rows = 0;
  void* out = nullptr;
  int32_t bf16 = 1;  // element type of D and out: bf16 (1) or fp16 (0)
};

}  // namespace mkernel::fused
