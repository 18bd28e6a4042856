// Host API of mkernel's Hopper attention engine (forward):
//   out[b, i, h, :] = softmax(scale * q[b, i, h, :] · k[b, :, h / g, :]ᵀ) · v[b, :, h / g, :]
// with g = h / h_kv (grouped-query attention), and the log-sum-exp of the scaled scores
//   lse[b, h, i] = log Σ_j exp(scale * q_i · k_j)   (natural log, fp32).
//
// Layouts: q and out [b, s, h, d], k and v [b, s_kv, h_kv, d], contiguous; lse [b, h, s].
// bf16 or fp16 in and out, fp32 softmax and accumulation.
//
// Causal masking is bottom-right aligned (FlashAttention's convention when s != s_kv): query i
// sees keys j <= i + (s_kv - s). A query row that sees no key (i < s - s_kv) gets out = 0 and
// lse = -inf.
//
// Plain C++ (no torch, no CUTLASS): csrc/attention.cpp is the torch glue; the CuTe kernels
// implement it, one .cu per (dtype, head dim) in instantiations/.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace mkernel::attention {

enum class DType : int { kBF16 = 0, kFP16 = 1 };

struct Problem {
  const void* q;  // [b, s, h, d]
  const void* k;  // [b, s_kv, h_kv, d]
  const void* v;  // [b, s_kv, h_kv, d]
  void* out;      // [b, s, h, d], q's dtype
  float* lse;     // [b, h, s]
  int batch, seq_q, seq_kv, heads, heads_kv, head_dim;
  float softmax_scale;  // usually 1/sqrt(d)
  bool causal;
  DType dtype;
  // The kernel's tile: query rows per CTA tile (kBlockM) and keys per KV block (kBlockN); 0
  // picks block_m/block_n; other values must be built (instances.inc: 128x128 everywhere,
  // 192x128 for bf16 d=64 non-causal).
  int block_m = 0;
  int block_n = 0;
  // Batch strides in elements (0: dense, s * h * d): ring attention runs the engine on one half
  // of a zigzag shard (q[:, s/2:], k[:, :s/2]) in place, and writes that half's partial into
  // rows [s/2, s) of a [b, s, h, d] buffer. lse_head_stride: distance between the (b, h) rows
  // of lse (0: seq_q), same purpose.
  int64_t q_batch_stride = 0;
  int64_t kv_batch_stride = 0;
  int64_t out_batch_stride = 0;
  int64_t lse_head_stride = 0;
  // Zigzag ring mode (causal only; ring attention in one launch): q is rank zz_rank's zigzag
  // shard (global chunks zz_rank and 2W-1-zz_rank of zz_chunk rows each) and k/v hold the W
  // shards by ring step (rank (zz_rank + 1 + pos) mod W's at position pos); a key is seen iff
  // its global position <= the query's. zz_world = 0: plain bottom-right causal. zz_chunk must
  // be a multiple of 128.
  int zz_world = 0;
  int zz_rank = 0;
  int zz_chunk = 0;
  // The keys from own_key_start on read from k_own / v_own ([batch, seq_kv - own_key_start,
  // heads_kv, d], dense) instead of k / v: ring attention's whole mode passes the rank's own
  // shard (the top of its virtual K/V) in place, so it need not copy it there first.
  // own_key_start: a multiple of the kernel's kBlockN (else the launch refuses). Null: k / v
  // only.
  const void* k_own = nullptr;
  const void* v_own = nullptr;
  int own_key_start = 0;
  // Mainloop variant under measurement (AttnTraits::kVariant, attention_variants_*.cu): 0 = the
  // default kernels; attention_dispatch.cu kVariants lists the built ones (bf16, d = 128,
  // 128x128, plain kernels only — run_hooked rejects a nonzero variant).
  int variant = 0;
  // L2 section budget of the tile order (tile_scheduler.hpp make_params): the K/V bytes of the
  // (batch, head) pairs whose tiles the grid runs together, in MiB; 0: the default
  // (tile_scheduler.hpp: 4 MiB non-causal, 24 causal).
  int l2_section_mb = 0;
  // Workspace of a kernel that splits its last, partial wave of tiles along the KV blocks
  // (variant bit 11, kSplitTailBit; uses_split_tail): fp32, split_ws_pieces pieces of
  // split_ws_floats_per_piece(head_dim) floats each (the caller allocates, any contents). With
  // fewer pieces than the grid needs the kernel does not split (same result, slower tail).
  float* split_ws = nullptr;
  int split_ws_pieces = 0;
  // Claim counter of a kernel with claimed tiles (variant bit 12, kClaimTilesBit;
  // uses_tile_counter): one device int the caller allocates (any contents: the launch zeroes it
  // on its stream first). Calls running at the same time need counters of their own.
  int* tile_counter = nullptr;
};

// The built mainloop variants: attention_dispatch.cu kVariants (there, not here: a new variant
// then rebuilds the dispatcher alone, not every kernel TU that includes this header).

// The mainloop variant bits (AttnTraits::kVariant) of the bf16 d=128 128x128 plain kernels
// (attention_launch.cuh says why; benchmarks/NOTES.md has the measurements). Flipping a default
// is a one-line change here (and the documented variant in tests/attention/
// test_attention_engine.py test_default_is_the_documented_variant).
// Non-causal: 2184 (136 + bit 11, split tail) since s10 run 2 (8192 / 16384: +2.6 / +3.5% over
// 136 pinned, GPU time; its variant and split-tail tests passed there; S = 4096 not timed).
// Back to 136 is this one line.
inline constexpr int kDefaultVariantNonCausal = 2184;
// Causal: 6280 since s11 run 2 (attn12), i.e. its causal form, 136 with claimed tiles (bit 12;
// bit 11 is non-causal only): +2.5 / +5.0 / +4.6% over 9 at S = 4096 / 8192 / 16384 (pinned, GPU
// time; 1.014 / 1.015 / 1.004x cuDNN in that run; its fp64-reference and bit-for-bit-136 tests
// passed there). Default calls need Problem::tile_counter (the torch glue allocates it); without
// one they run 9 statically (attention_launch.cuh kDefaultBitsCausal). Back to 9 is this line.
// Since session 43 (s43b, H100, pinned, GPU time): 137352 = 6280 + bit 17 (the lazy O rescale,
// attention_variants_claimed_lazy.cu), +2.5 / +2.0 / +2.3 / +3.2% over 6280 at S = 4k / 8k /
// 16k / 32k (1.020 / 1.020 / 1.014 / 0.984x cuDNN in that run; its fp64-reference tests passed
// there). Back to 6280 is this line.
inline constexpr int kDefaultVariantCausal = 137352;
// Variant bit 11 (attn11): the persistent grid's last, partial round of tiles runs split along
// the KV blocks (each tail tile in up to grid / tail pieces, one per CTA), partial O / LSE in
// fp32 to Problem::split_ws, merged by a second kernel. Non-causal only (causal calls with the
// bit run the variant without it: the longest-first order already leaves a light tail).
// Built as variant 2184 = 136 + bit 11: the non-causal default since s10 run 2.
inline constexpr int kSplitTailBit = 2048;
inline constexpr int split_ws_floats_per_piece(int head_dim) { return 128 * (head_dim + 1); }

// Variant bit 12 (attn12): claimed tiles. The persistent CTAs take their work tiles from a
// per-call counter (Problem::tile_counter) in the scheduler's order, each claiming its next tile
// once its load lane has issued the current tile's last load (FA3's dynamic scheduler), instead
// of each running the static list c, c + G, c + 2G, ... Causal tiles differ in length, and the
// static list over L2 sections leaves the busiest CTA 1.6% / 2.4% above the mean at S = 8192 /
// 16384 (b*S = 16k, 32 heads; NOTES attn12). The tiles' arithmetic is unchanged (bit for bit
// the base variant's). Built as 4105 = 9 + bit 12 (causal; a non-causal call runs 9 claimed)
// and 6280 = 2184 + bit 12 (non-causal, with the split tail; a causal call runs 136 claimed).
// Opt-in until measured.
inline constexpr int kClaimTilesBit = 4096;
// Whether run(p) launches a kernel with variant bit 12 (then it wants Problem::tile_counter; a
// default call without one runs the static kernel of the same mainloop, as bit 11 without
// split_ws).
bool uses_tile_counter(const Problem& p);
// Variant bit 13 (attn12): the load lane prefetches the next static tile's Q into L2 after
// the current tile's last K/V load (AttnTraits::kPrefetchNextQ). Built as 8201 = 9 + bit 13 and
// 10376 = 2184 + bit 13 (a causal call runs 136 + bit 13); bit for bit the base's output.
// Opt-in until measured.
inline constexpr int kPrefetchNextQBit = 8192;
// Variant bit 14 (attn13): O stored from registers to global (AttnTraits::kODirect) instead of
// through the V stage of the tile's last block and a TMA store: no cross-warpgroup meet at the
// tile boundary, the stage free right after the last PV GEMM. Built as 18568 = 2184 + bit 14 (a
// causal call runs 136 + bit 14) and 22664 = 6280 + bit 14 (claimed tiles: causal 136 + bit 14, the
// causal default's mainloop with it); bit for bit the base's output. Opt-in until measured.
inline constexpr int kODirectBit = 16384;
// Variant bits 15-16 (attn14): a longer KV block for the non-causal kernel, 2184's mainloop
// (O in a V stage, split tail) on a 128 x kBlockN tile: field 1 = 144 keys (K 2 + V 3 stages of
// 36 KiB beside Q), 2 = 160 (K 2 + V 2 of 40 KiB), 3 = 176 (K 2 + V 2 of 44 KiB; FA3's tile for
// d = 128 non-causal). Fewer, longer KV iterations: the per-block costs (pipeline waits,
// warp-scheduler barriers, row-max shuffles and factor, O's 64-FMUL rescale, the wgmma issue and
// waits) spread over more keys, and the S GEMM's wgmma reads Q's slice once per 144-176 keys.
// Built as 34952 / 67720 / 100488 = 2184 + field << 15 (attention_variants_widekv.cu); a causal
// call runs 136 (the 128x128 tile: causal stays on its own default). Another block partition:
// another summation order than 2184 (tested against the fp64 reference, not bit for bit).
// Opt-in until measured.
inline constexpr int kWideKvShift = 15;
inline constexpr int kWideKvMask = 3 << kWideKvShift;
inline constexpr int wide_kv_block_n(int variant) {
  return 128 + 16 * ((variant & kWideKvMask) >> kWideKvShift);
}
// Variant bits 17-18 (attn15; AttnTraits kLazyRescale, kLeadWaitsOnly), non-causal, on 2184's
// mainloop (attention_variants_lazy.cu): bit 17 = lazy O rescale (FA4's conditional rescaling:
// a row's running max moves only when a block raises it by more than 2^8 in the exponent, and a
// warp whose rows all kept theirs skips O's 64 FMULs per block; another rounding than 2184, P up
// to 256), bit 18 = only consumer warpgroup 0 waits on the K / V full barriers (FA3: the
// ping-pong orders the other's GEMM issues after its waits; bit for bit 2184). Built as
// 133256 = 2184 + bit 17, 264328 = 2184 + bit 18, 395400 = both, and 166024 = 34952 + bit 17
// (the lazy rescale on the 128x144 tile); a causal call runs 136. Opt-in until measured.
inline constexpr int kLazyRescaleBit = 1 << 17;
inline constexpr int kLeadWaitsBit = 1 << 18;
inline constexpr int kAttn15Mask = kLazyRescaleBit | kLeadWaitsBit;
// Variant bits 19-20 (attn16; AttnTraits kNarrowTop / kNarrowS), non-causal, on attn15's 128x144
// tile (attention_variants_narrow.cu): when a tile's top (ragged last) KV block holds at most 64
// keys, its PV GEMM runs 4 k-steps instead of 9 (bit 19), and with bit 20 its S GEMM runs as
// wgmmas of N = 64 (4096 keys = 28 x 144 + 64: 166024 computes that block whole, 1.9% of its
// tensor work). Built as 690312 = 166024 + bit 19, 952456 = 690312 + bit 18, 1738888 = 690312 +
// bit 20; a causal call runs 136. 1738888 is the default from 4096 keys (session 17, attn16's rules).
inline constexpr int kNarrowTopBit = 1 << 19;
inline constexpr int kNarrowSBit = 1 << 20;
// Variant bits 21-22 (attn17; AttnTraits kCrossTile, kCrossTileOneQ), non-causal, with bit 7:
// cross-tile overlap — a tile's last PV GEMM shares its turn with the next tile's first S GEMM,
// whose softmax runs under it. Bit 21 alone double-buffers Q (K 2 + V 3 stages beside it at
// 128x128); with bit 22 Q keeps one stage (K 3 + V 3), released in the tile's last block step.
// Built as 2492552 = 395400 + bit 21 and 6686856 = 2492552 + bit 22, and both with bit 14 (O
// from registers: no meet in the epilogue), 2508936 and 6703240 (attention_variants_cross.cu);
// bit for bit 395400's output; a causal call runs 136. Opt-in until measured.
inline constexpr int kCrossTileBit = 1 << 21;
inline constexpr int kCrossTileOneQBit = 1 << 22;
// Variant bit 23 (AttnTraits kTimeline; attention_variants_timeline.cu): a measurement build —
// the kernel prints its per-tile phase cycle sums (benchmarks/attention_timeline.py). Built as
// 8784008 = 395400 + bit 23, 10127496 = 1738888 + bit 23, and on the cross-tile walks 10897544 =
// 2508936 + bit 23 and 15075464 = 6686856 + bit 23; non-causal (a causal call runs 136).
inline constexpr int kTimelineBit = 1 << 23;
// Variant bit 24 (AttnTraits kEarlyNextTile; attention_variants_early.cu): the next static
// tile's coordinates worked out right after a tile's last PV GEMM, not after its epilogue. Built
// as 17172616 = 395400 + bit 24 and 18516104 = 1738888 + bit 24 (timeline builds: + bit 23,
// 25561224 and 26904712); bit for bit the bases; non-causal (a causal call runs 136). Opt-in
// until measured.
inline constexpr int kEarlyNextTileBit = 1 << 24;
// Variant bit 25 (AttnTraits kTileMailbox; attention_variants_mailbox.cu): the producer
// warpgroup's warp 2 decodes the static tile sequence and hands each tile to the consumers
// through shared memory (tile_handoff.cuh TileMailbox): the scheduler's divisions leave the
// consumers' path. Built as 33949832 = 395400 + bit 25 and 35293320 = 1738888 + bit 25
// (timeline builds: + bit 23, 42338440 and 43681928); bit for bit the bases; non-causal (a causal
// call runs 136). Opt-in until measured.
inline constexpr int kTileMailboxBit = 1 << 25;
// The non-causal default on a longer KV block from kDefaultWideKvMinSeqKv keys on (a default
// call of the bf16 d=128 plain kernel, no tile chosen by the caller): one of 34952 / 67720 /
// 100488, or 0 (none: 2184 on 128x128 everywhere). A ragged top block costs a whole block's
// work (4096 keys = 23.3 blocks of 176: 3.1% more; 8192: 1.0%), hence the threshold. Flipping
// it is this line (rule in benchmarks/NOTES.md, attn14); the dispatcher routes such calls to
// the variant's kernel (attention_dispatch.cu), the glue's split workspace is 2184's. Also
// 166024 (attn15: 34952 + bit 17, the lazy O rescale on the 128x144 tile), 690312 / 952456 /
// 1738888 (attn16: + the narrow top block, bits 19-20; 952456 with bit 18 too).
inline constexpr int kDefaultWideKvNonCausal = 1738888;  // s17 run B: attn16 rule B (NOTES "attn16")
inline constexpr int kDefaultWideKvMinSeqKv = 4096;      // s17 run B: attn16 rule A

// Whether run(p) launches a kernel with variant bit 11 (then it wants Problem::split_ws: one
// piece per CTA of the grid, i.e. the SM count).
bool uses_split_tail(const Problem& p);

struct Launch {
  cudaStream_t stream = nullptr;
  int sm_count = 0;  // CTAs of the persistent grid; 0: the device's SM count (shrinks under MPS)
};

// Communication hooks of the kernel (ring attention): before the producer loads KV block n
// (kBlockN keys) of head group (batch, head_kv), it waits until
//   kv_ready[batch * flag_batch_stride + head_kv * flag_head_stride + n / blocks_per_flag]
//     >= kv_ready_value + kv_ready_epoch_scale * *kv_ready_epoch
// (acquire, system scope; bounded: on a timeout the kernel writes a comm::WaitDiagnostic into
// *diag and traps). Null kv_ready: the plain kernel (no wait is compiled in). The strides
// default (-1) to one flag row per (batch, head_kv): flag_head_stride = flags_per_head,
// flag_batch_stride = heads_kv * flags_per_head; ring attention passes head stride 0 (one flag
// per (batch, key chunk), all heads). kv_ready_epoch (device memory, may be null) makes the
// expected value a function of a device counter, so a CUDA graph replay waits for the new
// call's flags without a host step.
struct HookArgs {
  const uint64_t* kv_ready = nullptr;
  int blocks_per_flag = 1 << 30;  // default: one flag per (batch, head_kv)
  int flags_per_head = 1;
  int flag_batch_stride = -1;
  int flag_head_stride = -1;
  uint64_t kv_ready_value = 1;
  const uint64_t* kv_ready_epoch = nullptr;
  uint64_t kv_ready_epoch_scale = 0;
  double timeout_s = 10.0;
  void* diag = nullptr;  // comm::WaitDiagnostic in host-mapped memory
  // For the diagnostic record: the waiting rank, its group, and the peer that releases the
  // flags (-1: unknown).
  int rank = -1;
  int group = -1;
  int peer = -1;
  // Forwarding inside the engine (ring attention's whole-sequence mode, MKERNEL_RING_SEND=engine;
  // kv_forward_hooks.cuh): with fwd_dst set, an idle producer warp of every CTA copies the K/V
  // chunks of ring steps 0 .. fwd_world-2 from this rank's virtual K/V (fwd_src; the layout of
  // ring_kv_api.h's whole mode, v at fwd_v_off) to the next rank's (fwd_dst), each once its
  // kv_ready flag holds the expected value, and releases the next rank's flag (fwd_flags:
  // kv_ready's layout there); CTAs claim the items through fwd_counter. Built for the bf16
  // 128x128 tile only (other cases:
  // cudaErrorNotSupported; the caller pins that tile).
  const void* fwd_src = nullptr;
  // Non-null: step 0's chunks (the own shard, position fwd_world - 1) come from here instead
  // ([fwd_batch, fwd_seq] rows of fwd_row_bytes, dense; v at fwd_own_v), the op's inputs that
  // Problem::k_own / v_own name.
  const void* fwd_own_k = nullptr;
  const void* fwd_own_v = nullptr;
  void* fwd_dst = nullptr;
  uint64_t* fwd_flags = nullptr;
  uint64_t fwd_v_off = 0;
  uint64_t fwd_row_bytes = 0;
  int fwd_world = 0, fwd_rank = 0, fwd_batch = 0, fwd_seq = 0, fwd_chunk_rows = 0, fwd_chunks = 0;
  bool fwd_causal = false;
  int* fwd_counter = nullptr;  // device int, zero at launch (stream order): the items' claim counter
  // Non-null (device int, zero at launch): the persistent CTAs claim work tiles from it, longest
  // first, instead of each running a static list (tile_handoff.cuh: a CTA that starts late, e.g.
  // under MPS, then finds only the tiles left).
  int* tile_counter = nullptr;
  // The causal bf16 d=128 128x128 hooked kernels (both policies) with their mainloop's masked
  // and wholly visible KV blocks in two loops (AttnTraits variant bit 10: the default variant +
  // 1024; the same result bit for bit). Opt-in until measured (ring attention:
  // MKERNEL_RING_SPLIT_MASK=1); other tiles, dtypes and non-causal calls ignore it.
  bool split_masked = false;
  // The load lane acquires a KV flag only for the first block of each flag it meets in a tile's
  // walk (the blocks are walked downwards, so the next ones down to the flag's first block were
  // released with it), instead of one system-scope acquire + proxy fence per block. The same
  // loads of the same data. The ring turns it on by default (MKERNEL_RING_FLAG_SKIP=0: off).
  bool skip_seen_flags = false;
  // ... and not again in any later tile of the launch: the load lane remembers the flags it
  // acquired (flag slots below 512, in shared memory; attention_hooks.cuh SeenFlags). The ring
  // turns it on by default (MKERNEL_RING_FLAG_CACHE=0: off).
  bool remember_flags = false;
  // With tile_counter: each CTA claims its next tile only once its load lane has issued the
  // current tile's last load (the plain kernels' claimed variants do so), not when the consumers
  // start the current tile. The ring turns it on by default (MKERNEL_RING_LATE_CLAIM=0: off).
  bool late_claim = false;
  // Measurement only, for launches whose flags are all released before the launch (the ring's
  // compute-alone ceiling under MKERNEL_RING_MEASURE_NO_WAIT=1): the hooked kernel with its KV
  // waits skipped, to tell their cost from the rest of the hooked kernel's.
  bool measure_no_wait = false;
  // The 128x144 hooked kernel (bf16, d = 128, non-causal, KV-wait policy only; Problem::block_n =
  // 144): its 144-key blocks do not line up with flags of whole 128-key blocks, so it counts
  // flags by keys: flag i of a row covers keys [i * keys_per_flag, (i + 1) * keys_per_flag),
  // flags_per_head of them per row; a block may wait for two. Required (> 0) there, unused by
  // the other kernels.
  int keys_per_flag = 0;
  // The own-shard-first split (ring attention's whole mode; needs tile_counter; KV-wait
  // policies): > 0, a multiple of the kernel's key block: every tile runs as two items, its
  // keys [phase_split_keys, seq_kv) first (the top of the walk: the rank's own shard), all
  // tiles' first phases claimed before any second phase ([0, phase_split_keys), the peers'
  // shards), which resumes its first phase's unrounded softmax state from phase_ws (the same
  // output bit for bit). phase_ws: phase_ws_floats(p) floats (any contents), phase_flags:
  // phase_flag_words(p) words, zero at launch (stream order; the caller zeroes them, as it does
  // tile_counter).
  //
  // Launches of the same problem and hooks that share tile_counter (and the split's workspace and
  // flags) share the work: every CTA of either claims items from the one counter, so a second
  // launch on another stream (the ring's refill: a few CTAs on the SMs a send kernel held, once it
  // ended) joins the first wherever it has got to.
  int phase_split_keys = 0;
  float* phase_ws = nullptr;
  uint64_t* phase_flags = nullptr;
};

// Workspace of HookArgs::phase_split_keys for problem p, any tile the dispatch may pick (query
// tiles of 64 rows per consumer warpgroup, up to 192 rows): per tile kBlockM * (d + 8) floats
// (each consumer thread's O accumulator, d / 2 floats, and its two rows' max and sum) and one
// flag word.
inline int64_t phase_ws_floats(const Problem& p) {
  return static_cast<int64_t>(p.seq_q + 191) * (p.head_dim + 8) * p.heads * p.batch;
}
inline int64_t phase_flag_words(const Problem& p) {
  return static_cast<int64_t>(p.seq_q + 63) / 64 * p.heads * p.batch;
}

// The default kernel's tile for a problem (block_n: for HookArgs::blocks_per_flag).
int block_m(int head_dim, bool causal, int seq_q);
int block_n(int head_dim);

// Why a problem can't run (nullptr if it can): shapes, head dim, alignment; `hooked`: through
// run_hooked (some tiles have no hooked kernel).
const char* can_implement(const Problem& p);
const char* can_implement(const Problem& p, bool hooked);

// Launches on l.stream. Returns cudaSuccess or the launch error; cudaErrorInvalidValue with the
// reason in *reason when can_implement refuses.
cudaError_t run(const Problem& p, const Launch& l, const char** reason = nullptr);
cudaError_t run_hooked(const Problem& p, const Launch& l, const HookArgs& h,
                       const char** reason = nullptr);

// Merge of a partial attention result into a running one (ring attention: each KV block adds
// one partial), in fp32:
//   lse = log(exp(lse_acc) + exp(lse_part))
//   out_acc = out_acc * exp(lse_acc - lse) + out_part * exp(lse_part - lse)
// out_acc [b, s, h, d] fp32, lse_acc [b, h, s] fp32 (updated in place; -inf rows are empty);
// out_part [b, s, h, d] in `part_dtype`, lse_part [b, h, s] fp32.
// Strides (elements, 0: dense) let it merge rows [s0, s0 + seq) of [b, S, h, d] buffers (the
// pointers then point at row s0): out_batch_stride (S * h * d) for out_acc and out_part,
// lse_head_stride (S) for lse_acc and lse_part.
struct Merge {
  float* out_acc;
  float* lse_acc;
  const void* out_part;
  const float* lse_part;
  int batch, seq, heads, head_dim;
  DType part_dtype;
  int64_t out_batch_stride = 0;
  int64_t lse_head_stride = 0;
  // Zigzag ring mode (causal only; ring attention in one launch): q is rank zz_rank's zigzag
  // shard (global chunks zz_rank and 2W-1-zz_rank of zz_chunk rows each) and k/v hold the W
  // shards by ring step (rank (zz_rank + 1 + pos) mod W's at position pos); a key is seen iff
  // its global position <= the query's. zz_world = 0: plain bottom-right causal. zz_chunk must
  // be a multiple of 128.
  int zz_world = 0;
  int zz_rank = 0;
  int zz_chunk = 0;
};
cudaError_t merge_partial(const Merge& m, cudaStream_t stream);

}  // namespace mkernel::attention
