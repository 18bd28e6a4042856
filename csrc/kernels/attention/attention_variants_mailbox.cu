// Non-causal variants with AttnTraits bit 25 (kTileMailbox, session 51): the producer
// warpgroup's warp 2 decodes the CTA's static tile sequence and hands each tile to the consumers
// through a two-slot shared-memory mailbox (tile_handoff.cuh TileMailbox), so the scheduler's
// divisions (s50b's timeline: a 730-cycle gap a tile between the epilogue and the next first S
// GEMM) leave the consumers' path. Same tiles, same output bits as the bases:
//   33949832 = 395400 + bit 25 (128x128: O in a V stage, the split tail, bits 17-18),
//   35293320 = 1738888 + bit 25 (the non-causal default from 4096 keys: 128x144, lazy rescale,
//              the narrow top block, the split tail).
// Their timeline builds (+ bit 23) are in attention_variants_timeline.cu. A causal call runs 136
// (the dispatcher).
#include "attention_launch.cuh"

namespace mkernel::attention {

cudaError_t run_bf16_d128_m128_variant_mailbox(const Problem& p, const Launch& l) {
  using E = cutlass::bfloat16_t;
  const NoHooks::Params h{};
  if (p.causal) return cudaErrorInvalidValue;  // the dispatcher runs 136
  switch (p.variant) {
    case 33949832: return launch_attention<E, 128, 128, 128, false, NoHooks, 395400 | kTileMailboxBit>(p, l, h);
    case 35293320:
      return launch_attention<E, 128, 128, 144, false, NoHooks,
                              2184 | (1 << 17) | (1 << 19) | (1 << 20) | kTileMailboxBit>(p, l, h);
    default: return cudaErrorInvalidValue;
  }
}

}  // namespace mkernel::attention
