// Named barrier ids of the attention kernel (offset past CUTLASS's reserved ids by
// cutlass::arch::NamedBarrier::sync/arrive).
#pragma once

#include <cstdint>

namespace mkernel::attention {

enum class AttnBarrier : uint32_t {
  // All consumer threads: the O tile in shared memory is free (the previous tile's TMA
  // store has read it) / fully written (the TMA store may start).
  EpilogueSmemFree = 0,
  EpilogueSmemFull = 1,
  // Inter-warpgroup ping-pong: consumer warpgroup g may issue its GEMMs (WarpSchedulerWG1 + g).
  WarpSchedulerWG1 = 2,
  WarpSchedulerWG2 = 3,
  WarpSchedulerWG3 = 4,
};

constexpr uint32_t barrier_id(AttnBarrier b) { return static_cast<uint32_t>(b); }

}  // namespace mkernel::attention
