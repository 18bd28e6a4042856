// Measurement builds (AttnTraits bit 23, kTimeline): the per-tile phase cycle sums, printed by
// the kernel (benchmarks/attention_timeline.py), of two non-causal mainloops:
//   8784008 = 395400 + bit 23 (128x128: O in a V stage, the split tail, bits 17-18),
//   10127496 = 1738888 + bit 23 (the non-causal default from 4096 keys: 128x144, lazy rescale,
//              the narrow top block, the split tail),
//   10897544 = 2508936 + bit 23 and 15075464 = 6686856 + bit 23 (the cross-tile walks: O from
//              registers with Q double-buffered; O in a V stage with one Q stage),
//   25561224 = 17172616 + bit 23 and 26904712 = 18516104 + bit 23 (bit 24: the next tile's
//              coordinates before the epilogue),
//   42338440 = 33949832 + bit 23 and 43681928 = 35293320 + bit 23 (bit 25: the tile mailbox).
// The same output bits as the variants without it. A causal call runs 136 (the dispatcher).
#include "attention_launch.cuh"

#include <cstdio>

namespace mkernel::attention {
namespace {

// One line per consumer warpgroup of CTAs 0-7: its tiles, KV blocks and cycles per phase.
template <int kTraitsVariant>
__global__ void timeline_print_kernel(int variant) {
  const uint32_t* b = timeline_buffer<kTraitsVariant>();
  for (int r = 0; r < kTimelineCtas * 2; ++r, b += kTimelineSlots) {
    printf("mkernel-timeline variant %d cta %d wg %d tiles %u blocks %u gap %u qwait %u first %u "
           "loop %u lastpv %u epilogue %u finalize %u lse %u meet %u\n",
           variant, r / 2, r % 2, b[6], b[7], b[0], b[1], b[2], b[3], b[4], b[5], b[8], b[9], b[10]);
  }
}

template <int kTraitsVariant, int kBlockN>
cudaError_t run_and_print(const Problem& p, const Launch& l) {
  const NoHooks::Params h{};
  cudaError_t e = launch_attention<cutlass::bfloat16_t, 128, 128, kBlockN, false, NoHooks,
                                   kTraitsVariant>(p, l, h);
  if (e != cudaSuccess) return e;
  timeline_print_kernel<kTraitsVariant><<<1, 1, 0, l.stream>>>(p.variant);
  return cudaGetLastError();
}

}  // namespace

cudaError_t run_bf16_d128_m128_variant_timeline(const Problem& p, const Launch& l) {
  if (p.causal) return cudaErrorInvalidValue;  // the dispatcher runs 136
  switch (p.variant) {
    case 8784008: return run_and_print<395400 | kTimelineBit, 128>(p, l);
    case 10127496: return run_and_print<2184 | (1 << 17) | (1 << 19) | (1 << 20) | kTimelineBit, 144>(p, l);
    case 10897544: return run_and_print<2508936 | kTimelineBit, 128>(p, l);
    case 15075464: return run_and_print<6686856 | kTimelineBit, 128>(p, l);
    case 25561224: return run_and_print<395400 | kEarlyNextTileBit | kTimelineBit, 128>(p, l);
    case 26904712:
      return run_and_print<2184 | (1 << 17) | (1 << 19) | (1 << 20) | kEarlyNextTileBit | kTimelineBit, 144>(p, l);
    case 42338440: return run_and_print<395400 | kTileMailboxBit | kTimelineBit, 128>(p, l);
    case 43681928:
      return run_and_print<2184 | (1 << 17) | (1 << 19) | (1 << 20) | kTileMailboxBit | kTimelineBit, 144>(p, l);
    default: return cudaErrorInvalidValue;
  }
}

}  // namespace mkernel::attention
