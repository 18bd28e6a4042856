// Cross-GPU / cross-process flags: 64-bit words that a writer releases once
// the data they guard is complete and a reader acquires before touching that
// data. `.sys` scope because writers may be another GPU (NVLink peer memory),
// a copy engine or a host thread (mapped pinned memory).
//
// Every wait is bounded: it gives up after `timeout_cycles` (clock64),
// records who waited on what in a WaitDiagnostic (host-mapped memory, so it
// survives the trap that follows), then traps: a lost peer never hangs the GPU.
// No printf here: a call inside a wgmma kernel makes ptxas serialize wgmma.
#pragma once

#include <cstdint>

#include "group_sync.cuh"  // ld_acquire_sys, st_release_sys, the proxy fences
#include "wait_diagnostic.h"

namespace mkernel::comm {

// Spins until *flag >= expected; on timeout fills *diag (if given) and traps.
// `what`/`index` name the flag in the report. Returns the value seen.
__device__ __forceinline__ uint64_t wait_flag_geq(const uint64_t* flag, uint64_t expected,
                                                  long long timeout_cycles, WaitKind what,
                                                  int index, WaitDiagnostic* diag) {
  uint64_t seen = ld_acquire_sys(flag);
  if (seen >= expected) return seen;
  const long long start = clock64();
  while ((seen = ld_acquire_sys(flag)) < expected) {
    if (clock64() - start > timeout_cycles) {
      if (diag != nullptr) {
        volatile WaitDiagnostic* d = diag;
        d->expected = expected;
        d->seen = seen;
        d->flag_address = reinterpret_cast<uint64_t>(flag);
        d->flag_index = index;
        d->block_x = static_cast<int32_t>(blockIdx.x);
        d->block_y = static_cast<int32_t>(blockIdx.y);
        d->thread = static_cast<int32_t>(threadIdx.x);
        d->what = what;
        __threadfence_system();
        d->valid = 1;
        __threadfence_system();
      }
      __trap();
    }
    __nanosleep(64);
  }
  return seen;
}

}  // namespace mkernel::comm
