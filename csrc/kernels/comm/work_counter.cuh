// Call-tagged work counters: a 64-bit word in a rank's flag region holding (call << 32) | count.
// The first claimant of a call restarts it (no reset between calls, no host work), so items go
// to whatever warps or CTAs run — none waits for one that is not resident yet (under MPS the
// ranks' grids share SMs). A counter word satisfies any later wait_geq on it: it must sit in a
// region no flag wait reads (the top area, group_device.h).
#pragma once

#include <cstdint>

namespace mkernel::comm {

// The next item of this call from `counter` (one thread).
__device__ __forceinline__ int64_t claim_tagged(uint64_t* counter_word, uint64_t call) {
  auto* counter = reinterpret_cast<unsigned long long*>(counter_word);
  const unsigned long long tag = (call & 0xffffffffull) << 32;
  for (;;) {
    const unsigned long long seen = *reinterpret_cast<volatile unsigned long long*>(counter);
    if ((seen & ~0xffffffffull) != tag) {  // an earlier call's count (or another op's word)
      if (atomicCAS(counter, seen, tag | 1ull) == seen) return 0;
      continue;
    }
    return static_cast<int64_t>(atomicAdd(counter, 1ull) & 0xffffffffull);
  }
}

}  // namespace mkernel::comm
