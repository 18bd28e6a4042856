// Named barrier ids of the attention kernel (offset past CUTLASS's reserved ids by
// cutlass::arch::NamedBarrier::sync/arrive).
#pragma once

#include <cstdint>

namespace mkernel::attention {

enum class AttnBarrier : uint32_t {
  // One consumer warpgroup's 128 threads: its region of the O buffer is free (its previous
  // TMA store has read it), then fully written (its TMA store may start); the same barrier
  // twice per tile. (Ids 0, 1 and 5: at most 16 hardware barriers, CUTLASS reserves 8.)
  EpilogueWG1 = 0,
  EpilogueWG2 = 1,
  // Inter-warpgroup ping-pong: consumer warpgroup g may issue its GEMMs (WarpSchedulerWG1 + g).
  WarpSchedulerWG1 = 2,
  WarpSchedulerWG2 = 3,
  WarpSchedulerWG3 = 4,
  EpilogueWG3 = 5,
  // Both consumer warpgroups (AttnTraits::kOInV): their last PV GEMMs of the tile are done, so
  // the V stage they read may take O.
  OInVStageFree = 6,
};

constexpr AttnBarrier epilogue_barrier(int warp_group) {
  return warp_group == 0 ? AttnBarrier::EpilogueWG1
                         : (warp_group == 1 ? AttnBarrier::EpilogueWG2 : AttnBarrier::EpilogueWG3);
}

constexpr uint32_t barrier_id(AttnBarrier b) { return static_cast<uint32_t>(b); }

}  // namespace mkernel::attention
