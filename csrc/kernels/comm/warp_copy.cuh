// One warp's copy of a run of 16-byte vectors, shared by the side warps of the fused kernels
// (fused_hooks.cuh's copy role, the MoE fused dispatch's sends and expansions): written for
// their 40 registers — four 16-byte loads in flight per lane, 32-bit counts, pointers that step
// (ptxas spilled the hoisted 64-bit addresses of an indexed version).
#pragma once

#include <cstdint>

namespace mkernel::comm {

// kCoherent: the source is written during the call by another agent (a peer through its IPC
// mapping, the inter-node receive area): loads through L2 (ld.global.cg), never the
// non-coherent path; else the source is read-only for the call (ld.global.nc).
template <bool kCoherent>
__device__ __forceinline__ uint4 load16(const uint4* s) {
  if constexpr (kCoherent) {
    return __ldcg(s);
  } else {
    return __ldg(s);
  }
}

// Copies `bytes` (a multiple of 16, < 32 GiB) from src to dst with the 32 lanes of one warp.
template <bool kCoherent>
__device__ __forceinline__ void warp_copy(uint8_t* dst, const uint8_t* src, int64_t bytes,
                                          int lane) {
  const int n = static_cast<int>(bytes / 16);
  const uint4* s = reinterpret_cast<const uint4*>(src) + lane;
  uint4* d = reinterpret_cast<uint4*>(dst) + lane;
  int i = lane;
#pragma unroll 1
  for (; i + 96 < n; i += 128, s += 128, d += 128) {
    const uint4 a = load16<kCoherent>(s), b = load16<kCoherent>(s + 32),
                c = load16<kCoherent>(s + 64), e = load16<kCoherent>(s + 96);
    d[0] = a;
    d[32] = b;
    d[64] = c;
    d[96] = e;
  }
#pragma unroll 1
  for (; i < n; i += 32, s += 32, d += 32) *d = load16<kCoherent>(s);
}

}  // namespace mkernel::comm
