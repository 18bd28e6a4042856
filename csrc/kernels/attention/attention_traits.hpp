// Compile-time shape of one attention kernel: element type, head dim, tile sizes, pipeline
// depth, masking; and the CuTe types they imply (the two TiledMMAs, shared-memory layouts).
//
// A CTA owns a kBlockM x d tile of queries (kBlockM = 64 per consumer warpgroup: 128 or 192,
// FA3's layouts) and streams kBlockN x d blocks of K and V through a kStages-deep shared-memory
// ring. S = Q·Kᵀ is an SS wgmma (both operands in shared memory); O += P·V takes P from
// registers (RS wgmma: the fp32 accumulator of S, converted, is already in the A-operand
// register layout) and V as an MN-major B operand (V's rows are keys, the GEMM's K mode).
#pragma once

#include "cute/tensor.hpp"
#include "cutlass/numeric_types.h"

namespace mkernel::attention {

template <class Element_, int kHeadDim_, int kBlockN_, bool kCausal_, int kNumMmaWarpGroups_ = 2,
          int kClusterM_ = 1, int kVariant_ = 0, int kReserveBytes_ = 0>
struct AttnTraits {
  using Element = Element_;
  static constexpr int kHeadDim = kHeadDim_;
  static constexpr bool kCausal = kCausal_;
  static_assert(kHeadDim == 64 || kHeadDim == 128, "shipped head dims: 64 and 128");

  // Consumer warpgroups, 64 query rows each: 2 (kBlockM 128, FA3's d=128 layout) or 3
  // (kBlockM 192, FA3's d=64 layout: more rows per K/V block, softmax spread over more
  // warpgroups).
  static constexpr int kNumMmaWarpGroups = kNumMmaWarpGroups_;
  static_assert(kNumMmaWarpGroups == 2 || kNumMmaWarpGroups == 3, "2 or 3 consumer warpgroups");
  static constexpr int kNumMmaThreads = kNumMmaWarpGroups * 128;
  static constexpr int kNumThreads = kNumMmaThreads + 128;  // + the producer warpgroup
  static constexpr int kBlockM = 64 * kNumMmaWarpGroups;
  static constexpr int kBlockN = kBlockN_;
  static_assert(kBlockN % 16 == 0 && kBlockN <= 256,
                "kBlockN: a multiple of 16 (the PV GEMM's K step) and <= 256 (wgmma N)");
  // Shared memory: the Q and O tiles (kBlockM x d each) plus as many K/V stages
  // (2 x kBlockN x d each) as fit in the sm90 opt-in limit, at most 4: d=128 -> 2 stages
  // (kBlockN 128 or 160), d=64 -> 4.
  static constexpr int kSmemLimit = 227 * 1024;
  static constexpr int kTileBytes = kBlockM * kHeadDim * int(sizeof(Element));
  static constexpr int kStageBytes = 2 * kBlockN * kHeadDim * int(sizeof(Element));
  static constexpr int kStagesFit = (kSmemLimit - 2 * kTileBytes - 1024) / kStageBytes;
  static constexpr int kStages = kStagesFit > 4 ? 4 : kStagesFit;
  // (With variant bit 7 the rings are sized without the O tile: kStagesK / kStagesV below, e.g.
  // 128x176 at d = 128: K 2 + V 2 stages of 44 KiB beside Q.)
  static_assert(kStages >= 2 || (kVariant_ & 128) != 0,
                "the K/V ring needs 2 stages: use a smaller kBlockN");

  // CTAs per cluster along the query blocks (1 or 2): with 2, the two CTAs of a cluster own
  // query tiles 2i and 2i + 1 of the same (batch, head), walk the same KV blocks, and each
  // loads half of every K/V block with a TMA multicast into both (FA3's cluster for d >= 128
  // non-causal): half the L2 -> SM traffic of K/V per FLOP. Causal: both walk the blocks of
  // tile 2i + 1 (tile 2i's extra block, past its diagonal, is masked whole).
  static constexpr int kClusterM = kClusterM_;
  static_assert(kClusterM == 1 || kClusterM == 2, "cluster of 1 or 2 CTAs");

  // Force the softmax of S_n ahead of the PV GEMM's wait (textbook intra-warpgroup overlap).
  // Off: left alone, ptxas hoists that wait above the exps, so each warpgroup runs its softmax
  // after its own PV GEMM (overlapping only the other warpgroup's GEMMs). Forcing the order
  // measured 2-13% *slower* relative to cuDNN in session 7's device run 2 (d=128 non-causal
  // S=8192: 0.78x vs 0.89x; benchmarks/NOTES.md), so ptxas's order stays.
  static constexpr bool kSoftmaxAheadOfPvWait = false;

  // Mainloop variants (session 8; a bit set): the default kernels of bf16 d=128 128x128 are
  // built with 9 = bits 0 + 3 (causal, and the KV-wait hooked ones), 136 = bits 3 + 7
  // (non-causal plain, since session 9), 137 = bits 0 + 3 + 7 (the forwarding hooked ones;
  // attention_launch.cuh), every other kernel with 0; others by Problem::variant
  // (attention_variants_*.cu). Measured in session
  // 8's device run 2 against 0 (benchmarks/NOTES.md, Attention engine item 5): 9 +2..+9%; bit 0
  // alone -1..-4%, bits 1-2 -15..-25%, bit 4 and bit 5 -1..-4% (code kept, off).
  //   bit 0: the softmax's row max and row sum as 4 independent partial chains (softmax.hpp)
  //   bits 1-2: exp2 of 2, 4 or 6 of every 8 scores on the FMA pipe instead of MUFU (exp2_fma)
  static constexpr int kVariant = kVariant_;
  static constexpr bool kTreeReduce = (kVariant & 1) != 0;
  static constexpr int kExpEmuPer8 = ((kVariant >> 1) & 3) * 2;
  //   bit 3: V one stage deeper than K (d=128 128x128: K 2 + V 3 stages = 160 KiB, beside Q
  //          and O): V_n's stage is released only when its PV GEMM is done, one block after
  //          K_n's (released when S_n is done), so with equal depths V's load has about one
  //          KV block of lead over its use, K's about two.
  //          (only where the extra stage fits beside Q, O and K, and below 4 stages).
  static constexpr bool kDeepVFits =
      kStages < 4 && 2 * kTileBytes + 1024 + (2 * kStages + 1) * (kStageBytes / 2) <= kSmemLimit;
  //   bit 7: no O buffer of its own: the epilogue writes O into the V stage of the tile's last
  //          KV block (FA3 also puts O in V's shared memory), which both consumer warpgroups
  //          hold past their last PV GEMM (a barrier across them: the other one may still read
  //          it) until their O stores have read it; a tile with no visible key stores its zero
  //          O from registers. The 32 KiB go to one more K/V stage, or to a hook policy's own
  //          shared memory (kReserveBytes: the forwarding hooks' staging buffers).
  //   bit 8 (with bit 7): the stages the smem holds split as K 2 + V rest (else V gets half,
  //          rounded up: d=128 128x128 K 3 + V 3 plain, K 2 + V 3 beside the forwarding buffers).
  //   bit 9 (with bit 7; attention_launch.cuh): the rings sized beside the forwarding hooks'
  //          staging buffers (K 2 + V 3): that policy's mainloop, measured as a plain kernel.
  static constexpr bool kOInV = (kVariant & 128) != 0;
  static constexpr int kReserveBytes = kReserveBytes_;
  //   bit 21 (with bit 7; non-causal plain kernels): cross-tile overlap, Q double-buffered (see
  //          kCrossTile below): the second Q stage comes out of the K/V rings' budget.
  //   bit 22 (with 21): one Q stage (K 3 + V 3 kept): the tile's Q is released as soon as its
  //          last S GEMM is done, inside its last block's step, and the boundary turn waits for
  //          the next Q's load (latency exposed, no K stage given up).
  static constexpr bool kCrossTile = (kVariant & (1 << 21)) != 0;
  static constexpr bool kCrossTileOneQ = (kVariant & (1 << 22)) != 0;
  static constexpr int kStagesQ = kCrossTile && !kCrossTileOneQ ? 2 : 1;
  static constexpr int kHalfStagesOInV =
      (kSmemLimit - kStagesQ * kTileBytes - 2048 - kReserveBytes) / (kStageBytes / 2);
  static constexpr int kStagesK =
      !kOInV ? kStages : ((kVariant & 256) != 0 ? 2 : kHalfStagesOInV - (kHalfStagesOInV + 1) / 2);
  static constexpr int kStagesV =
      kOInV ? kHalfStagesOInV - kStagesK
            : ((kVariant & 8) != 0 && kDeepVFits ? kStages + 1 : kStages);
  static_assert(!kOInV || (kClusterM == 1 && kNumMmaWarpGroups == 2 && kBlockN >= kBlockM &&
                           kStagesK >= 2 && kStagesV >= 2),
                "bit 7 (O in a V stage): no cluster, 2 consumer warpgroups, a V stage holds O, "
                "2 K and 2 V stages at least");
  //   bit 4: P converted to bf16 on the integer pipe (mainloop convert_to_element), not F2FP
  static constexpr bool kIntConvertP = (kVariant & 16) != 0;
  //   bit 5: O rescaled at the end of a step (after its PV GEMM's wait, beside the softmax's
  //          tail: FA3's place for d <= 128) instead of between the S and PV GEMM issues
  static constexpr bool kLateRescale = (kVariant & 32) != 0;

  //   bit 10: masked and wholly visible KV blocks in two consumer loops (FA3's split): the
  //          blocks a tile walks first (the diagonal one(s) under causal masking, the ragged last
  //          one) run apply_mask; the rest run a loop without mask code, and in the zigzag ring
  //          mode a block walk that steps within a visible key chunk without dividing (the chunk
  //          walk only at chunk ends). Same blocks, same order, same arithmetic as without it:
  //          the output is bit for bit the unsplit variant's (mainloop mma). Session 9 (ring10)
  //          counted the hooked zigzag causal kernel's consumer block loop at 868 SASS
  //          instructions against 721 plain causal and ~620 non-causal. Not yet measured: opt-in
  //          (variants 1033 = 9 + bit 10, 1160 = 136 + bit 10; the hooked causal kernels by
  //          HookArgs::split_masked, MKERNEL_RING_SPLIT_MASK=1).
  static constexpr bool kSplitMasked = (kVariant & 1024) != 0;

  //   bit 11 (attn11; non-causal): the persistent grid's last, partial round of tiles split
  //          along the KV blocks, one piece per CTA (tile_scheduler.hpp kSplitTail), the pieces'
  //          normalised O and LSE in fp32 to a workspace (epilogue store_piece), merged by a
  //          second kernel (split_tail_merge.cuh). The whole tiles run exactly as without it.
  //          Variant 2184 = 136 + bit 11; opt-in until measured.
  static constexpr bool kSplitTail = (kVariant & 2048) != 0;
  static_assert(!kSplitTail || (!kCausal && kClusterM == 1),
                "bit 11 (split tail): non-causal, no cluster (causal tiles differ in length and "
                "run longest first: the tail is light already)");

  //   bit 12 (attn12): claimed tiles — not a mainloop change: the launch picks the hook policy
  //          ClaimTilesHooks (attention_launch.cuh launch_claimed) with the base variant's bits.
  //   bit 13 (attn12): the load lane prefetches the next tile's Q tile into L2 (a TMA prefetch,
  //          no shared memory) right after issuing the current tile's last K/V load. Q is read
  //          once per tile, from HBM, and its single smem stage is free only once the tile's last
  //          S GEMM is done: the next tile's first S GEMM then waits for Q's HBM latency unless
  //          the last softmax, PV GEMM and epilogue cover it. Static tile order only (the next
  //          tile is blockIdx-strided; a claimed tile is not known that early). Opt-in
  //          (variants 8201 = 9 + bit 13, 10376 = 2184 + bit 13) until measured.
  static constexpr bool kPrefetchNextQ = (kVariant & 8192) != 0;
  //   bit 14 (attn13; with bit 7): O goes from registers straight to global (paired 32-bit
  //          stores, rows past seq_q skipped) instead of through the V stage of the tile's last
  //          block and a TMA store. That stage is released right after the last PV GEMM (as
  //          without bit 7), and the epilogue has no cross-warpgroup meet (OInVStageFree), no
  //          stmatrix, no proxy fence and no TMA store wait: the warpgroup that finishes its
  //          tile first starts the next tile's first S GEMM while the other one still runs its
  //          last PV GEMM. Same conversion of the same values: bit for bit the base's output.
  //          Opt-in (variant 18568 = 2184 + bit 14) until measured.
  static constexpr bool kODirect = (kVariant & 16384) != 0;
  static_assert(!kODirect || kOInV, "bit 14 (O from registers) is built on bit 7 (no O buffer)");

  //   bit 17 (attn15): lazy O rescale (FA4's conditional rescaling; softmax.hpp kLazyRescale):
  //          a row's running max moves only when a block raises it by more than 2^8 in the
  //          exponent; otherwise the block's factor is exactly 1 and a warp whose rows all kept
  //          their max skips O's 64 FMULs per thread (a warp vote). The FMULs sit between the S
  //          and PV GEMM issues, in the window where the other warpgroup's softmax (the critical
  //          path of the ping-pong) shares the issue slots. Another rounding than the base (P up
  //          to 256 instead of 1): tested against the fp64 reference, not bit for bit.
  //          Opt-in (variant 133256 = 2184 + bit 17) until measured.
  static constexpr bool kLazyRescale = (kVariant & (1 << 17)) != 0;
  //   bit 18 (attn15): only consumer warpgroup 0 waits on the K and V full barriers (FA3's
  //          mainloop with its scheduler barrier): the ping-pong lets warpgroup g issue a block's
  //          GEMMs only after warpgroup g - 1 issued the same block's, which it did after its
  //          waits (named barrier arrive -> sync orders them), so for warpgroups >= 1 the K wait
  //          between the softmax and the next S GEMM issue (their critical path) is dropped, and
  //          the V wait before the PV GEMM issue. Q's wait (once per tile) stays. The same
  //          output bit for bit. Opt-in (variant 264328 = 2184 + bit 18) until measured.
  static constexpr bool kLeadWaitsOnly = (kVariant & (1 << 18)) != 0;

  //   bit 19 (attn16; non-causal, with bit 7, not with bit 10): the narrow top block. A tile's
  //          walk starts at the ragged last KV block; when it holds at most kNarrowN keys
  //          (seq_kv - n kBlockN <= kNarrowN), its PV GEMM runs kNarrowN / 16 k-steps instead of
  //          kBlockN / 16 (the dropped ones multiply P = 0 by V's zero-filled rows: exact zeros).
  //   bit 20 (with 19): its S GEMM too, as wgmmas of N = kNarrowN (mainloop first_qk_narrow).
  //          At 4096 keys on the 128x144 tile the top block holds 64 keys: its whole-block
  //          GEMMs are 80 / 4176 = 1.9% of the tensor work, half of it in each GEMM (NOTES
  //          attn16). Every other block, and a top block with more keys, runs as without the
  //          bits. Opt-in (variants 690312 = 166024 + bit 19, 952456 = 690312 + bit 18,
  //          1738888 = 690312 + bit 20).
  static constexpr bool kNarrowTop = (kVariant & (1 << 19)) != 0;
  static constexpr bool kNarrowS = (kVariant & (1 << 20)) != 0;
  static constexpr int kNarrowN = 64;
  static_assert(!kNarrowTop || (!kCausal && kOInV && !kSplitMasked && kClusterM == 1 &&
                                kBlockN > kNarrowN && kNarrowN % 16 == 0),
                "bit 19 (narrow top block): non-causal, O in a V stage, no split masked loop, no "
                "cluster, kBlockN > kNarrowN");
  static_assert(!kNarrowS || kNarrowTop, "bit 20 (narrow top S GEMM) is built on bit 19");

  //   bit 21 (attn17; non-causal, with bit 7): cross-tile overlap. At a tile's end the next
  //          tile's first S GEMM is issued in the same turn as this tile's last PV GEMM, and its
  //          softmax runs while that PV GEMM does (FA3's intra-warpgroup pairing carried across
  //          the tile boundary, two softmax states); the epilogue follows. Without it the last PV
  //          GEMM and the next first S GEMM each run with nothing beside them: about one KV
  //          block's period per tile with the tensor cores half idle (NOTES attn16: c_t ~1.9 us
  //          = 1.05 blocks per tile at 4096 keys). Q is double-buffered (kStagesQ) so the next
  //          tile's Q is resident before this tile's last S GEMM is done. The consumers walk the
  //          static tile sequence in one call (mainloop mma_stream); the tiles' outputs are the
  //          same sums in the same order as the base's: bit for bit.
  //          With bit 14 (O from registers) the epilogue has no cross-warpgroup meet: the V
  //          stage goes back after the last PV GEMM, and a warpgroup's epilogue runs under the
  //          other's next GEMMs (the staggered epilogues; the next Q is resident already).
  static_assert(!kCrossTile || (!kCausal && kOInV && !kNarrowTop && !kSplitMasked &&
                                kClusterM == 1 && !kPrefetchNextQ && !kLateRescale),
                "bit 21 (cross-tile overlap): non-causal, O in a V stage (bit 7) or from registers "
                "(bit 14), not with bits 5, 10, 13 or 19, no cluster");
  static_assert(!kCrossTileOneQ || kCrossTile, "bit 22 (one Q stage) is built on bit 21");
  //   bit 23 (a measurement build, not a kernel to run): the consumer threads sum the SM cycles
  //          (clock) each tile spends in its phases — the gap since the previous tile's end, the
  //          Q wait, the first KV block, the block loop, the last PV GEMM, the epilogue — and the
  //          first warp of each consumer warpgroup of CTAs 0-7 prints the sums once at the end
  //          (device printf; benchmarks/attention_timeline.py reads them). Same output bits as
  //          the variant without it. Where a tile's c_t (NOTES attn13, session 50) is spent. On
  //          the cross-tile walk (bit 21) "lastpv" is the carried turn (the next tile's first S
  //          GEMM and softmax with this tile's last PV GEMM) and a carried tile has no "first".
  //   bit 24 (session 50): the consumers work out the next tile's coordinates (the scheduler's
  //          runtime divisions: ~300 instructions, s50b's "gap" of 730 cycles a tile, on the
  //          path from the epilogue to the next first S GEMM) right after the tile's last PV GEMM,
  //          where warpgroup 0 waits at the epilogue's meet anyway. Same tiles, same output bits.
  static constexpr bool kEarlyNextTile = (kVariant & (1 << 24)) != 0;
  //   bit 25 (session 51; static tile order): the producer warpgroup's warp 2 walks the CTA's
  //          static tile sequence ahead of the consumers and hands each decoded WorkTile to them
  //          through a two-slot shared-memory mailbox (tile_handoff.cuh TileMailbox). The
  //          scheduler's runtime divisions then leave the consumers' path altogether (bit 24 only
  //          moved them onto the epilogue's: the gap fell 730 -> 136 cycles, the epilogue grew
  //          600); a consumer takes a tile with one barrier wait and eight shared loads. Same
  //          tiles, same output bits.
  static constexpr bool kTileMailbox = (kVariant & (1 << 25)) != 0;
  static_assert(!kTileMailbox || !kEarlyNextTile, "bit 25 (the tile mailbox) replaces bit 24");
  static constexpr bool kTimeline = (kVariant & (1 << 23)) != 0;
  static_assert(!kTimeline || (!kCausal && kClusterM == 1),
                "bit 23 (timeline): non-causal, no cluster");

  // Inter-warpgroup ping-pong of the GEMM issue (named barriers WarpSchedulerWG1/2).
  static constexpr bool kPingPong = true;
  static_assert(!kLeadWaitsOnly || (kPingPong && kClusterM == 1),
                "bit 18 (only warpgroup 0 waits on K/V): needs the ping-pong's order, no cluster");

  using TileShapeMNK = cute::Shape<cute::Int<kBlockM>, cute::Int<kBlockN>, cute::Int<kHeadDim>>;
  // Two warpgroups stacked along M; each issues its own 64-row wgmma.
  using AtomLayoutMma = cute::Layout<cute::Shape<cute::Int<kNumMmaWarpGroups>, cute::_1, cute::_1>>;
  using TiledMmaQK = decltype(cute::make_tiled_mma(
      cute::GMMA::ss_op_selector<Element, Element, float,
                                 cute::Shape<cute::_64, cute::Int<kBlockN>, cute::Int<kHeadDim>>>(),
      AtomLayoutMma{}));
  using TiledMmaPV = decltype(cute::make_tiled_mma(
      cute::GMMA::rs_op_selector<Element, Element, float,
                                 cute::Shape<cute::_64, cute::Int<kHeadDim>, cute::Int<kBlockN>>,
                                 cute::GMMA::Major::K, cute::GMMA::Major::MN>(),
      AtomLayoutMma{}));

  using SmemLayoutQ = decltype(cute::tile_to_shape(
      cute::GMMA::Layout_K_SW128_Atom<Element>{},
      cute::Shape<cute::Int<kBlockM>, cute::Int<kHeadDim>>{}));
  using SmemLayoutK = decltype(cute::tile_to_shape(
      cute::GMMA::Layout_K_SW128_Atom<Element>{},
      cute::Shape<cute::Int<kBlockN>, cute::Int<kHeadDim>, cute::Int<kStagesK>>{}));
  // One wgmma of N = kBlockN per k-step of the S GEMM (attention_launch.cuh enables CuTe's
  // extended shapes before any CuTe header; without them a 144/160/176-key block splits into
  // N = 16 or 32 wgmmas, each re-reading Q's 64x16 slice from shared memory).
  static_assert(cute::size<1>(typename TiledMmaQK::AtomShape_MNK{}) == kBlockN,
                "S GEMM: one wgmma per k-step (define CUTE_SM90_EXTENDED_MMA_SHAPES_ENABLED "
                "before the first CuTe include)");
  // V^T as the PV GEMM's B operand: (d, kBlockN) with d contiguous (MN-major).
  using SmemLayoutVt = decltype(cute::tile_to_shape(
      cute::GMMA::Layout_MN_SW128_Atom<Element>{},
      cute::Shape<cute::Int<kHeadDim>, cute::Int<kBlockN>, cute::Int<kStagesV>>{}));

  static constexpr uint32_t kTmaBytesQ = kBlockM * kHeadDim * sizeof(Element);
  static constexpr uint32_t kTmaBytesKV = kBlockN * kHeadDim * sizeof(Element);

  // Register budgets (setmaxnreg): the producer only issues TMA; each consumer thread holds
  // S (kBlockN/2 fp32), O (d/2 fp32) and P. 128 x (24 + 2 x 240) = 64512 and
  // 128 x (32 + 3 x 160) = 65536, within the 64K registers of an SM.
  static constexpr uint32_t kLoadRegisters = kNumMmaWarpGroups == 2 ? 24 : 32;
  static constexpr uint32_t kMmaRegisters = kNumMmaWarpGroups == 2 ? 240 : 160;
};

}  // namespace mkernel::attention
