// Runtime dispatch of the swapped-operand GEMM (gemm_swap_api.h): variant
// index to the instantiation (gemm_swap_*.cu) that implements it.
#include <cuda_runtime.h>

#include "gemm_swap_api.h"

namespace mkernel::gemm_swap {
namespace detail {
// Weak: a dev build (setup.py, MKERNEL_DEV_BUILD=1) leaves the variants' translation units out
// (a third of a full build's compile time) and their entries resolve to null: such a variant
// is "not built", never a candidate, and the engine's own plan covers every shape.
#define MKERNEL_GEMM_SWAP_VARIANT(SUFFIX)                                                         \
  __attribute__((weak))                                                                           \
  const char* can_implement_##SUFFIX(const gemm::Problem&, int, Decomposition);                   \
  __attribute__((weak)) size_t workspace_size_##SUFFIX(const gemm::Problem&, int, Decomposition); \
  __attribute__((weak)) cudaError_t run_##SUFFIX(const gemm::Problem&, int, Decomposition, void*, \
                                                 cudaStream_t, const char**);
MKERNEL_GEMM_SWAP_VARIANT(swap_128x176_c2x1)
MKERNEL_GEMM_SWAP_VARIANT(swap_128x176_streamk)
MKERNEL_GEMM_SWAP_VARIANT(swap_128x64_streamk)
MKERNEL_GEMM_SWAP_VARIANT(swap_128x128_streamk)
MKERNEL_GEMM_SWAP_VARIANT(swap_128x176_c2x2)
MKERNEL_GEMM_SWAP_VARIANT(swap_128x192_c2x1)
MKERNEL_GEMM_SWAP_VARIANT(swap_64x64_ping)
MKERNEL_GEMM_SWAP_VARIANT(swap_64x16_ping)
MKERNEL_GEMM_SWAP_VARIANT(swap_128x16_streamk)
MKERNEL_GEMM_SWAP_VARIANT(swap_128x112_streamk)
MKERNEL_GEMM_SWAP_VARIANT(swap_64x176_ping)
MKERNEL_GEMM_SWAP_VARIANT(swap_256x176_streamk)
MKERNEL_GEMM_SWAP_VARIANT(swap_64x16k256_ping)
MKERNEL_GEMM_SWAP_VARIANT(swap_128x176_tk)
MKERNEL_GEMM_SWAP_VARIANT(swap_128x112_tk)
MKERNEL_GEMM_SWAP_VARIANT(swap_128x112k128_tk)
MKERNEL_GEMM_SWAP_VARIANT(swap_256x112_tk)
MKERNEL_GEMM_SWAP_VARIANT(swap_128x336_wide)
MKERNEL_GEMM_SWAP_VARIANT(swap_128x176_c1x2)
MKERNEL_GEMM_SWAP_VARIANT(swap_64x176_c4x2)
MKERNEL_GEMM_SWAP_VARIANT(swap_128x168)
MKERNEL_GEMM_SWAP_VARIANT(swap_128x168_c1x2)
MKERNEL_GEMM_SWAP_VARIANT(swap_128x168_c2x1)
MKERNEL_GEMM_SWAP_VARIANT(swap_64x168_c4x2)
MKERNEL_GEMM_SWAP_VARIANT(swap_64x168_c1x2)
MKERNEL_GEMM_SWAP_VARIANT(swap_128x176_ds)
MKERNEL_GEMM_SWAP_VARIANT(swap_64x176_c4x2_ds)
MKERNEL_GEMM_SWAP_VARIANT(swap_128x168_c1x2_h)
MKERNEL_GEMM_SWAP_VARIANT(swap_64x168_c4x2_h)
#undef MKERNEL_GEMM_SWAP_VARIANT

struct Entry {
  const char* name;
  int tile_tokens;  // the swapped tile's N: rows of A per tile
  int cluster_m;    // CTAs of a cluster along the weights rows
  int cluster_n;    // and along the tokens
  Decomposition decomposition;  // a launch argument of the stream-K kernels
  const char* (*can_implement)(const gemm::Problem&, int, Decomposition);
  size_t (*workspace_size)(const gemm::Problem&, int, Decomposition);
  cudaError_t (*run)(const gemm::Problem&, int, Decomposition, void*, cudaStream_t, const char**);
  bool zeroed_workspace = false;  // ticketed kernels: tickets at zero before the launch
};

constexpr Decomposition kHeuristic{Decomposition::kHeuristic, 1};
#define MKERNEL_GEMM_SWAP_ENTRY_AS(NAME, SUFFIX, TOKENS, CM, CN, DEC)                            \
  {NAME, TOKENS, CM, CN, DEC, can_implement_##SUFFIX, workspace_size_##SUFFIX, run_##SUFFIX}
#define MKERNEL_GEMM_SWAP_ENTRY(SUFFIX, TOKENS, CM, CN) \
  MKERNEL_GEMM_SWAP_ENTRY_AS(#SUFFIX, SUFFIX, TOKENS, CM, CN, kHeuristic)
#define MKERNEL_GEMM_SWAP_TICKET_ENTRY(SUFFIX, TOKENS)                                              \
  {#SUFFIX, TOKENS, 1, 1, kHeuristic, can_implement_##SUFFIX, workspace_size_##SUFFIX,          \
   run_##SUFFIX, true}
// const, not constexpr: a weak function's address is only known at load time.
const Entry kEntries[kNumVariants] = {
    MKERNEL_GEMM_SWAP_ENTRY(swap_128x176_c2x1, 176, 2, 1),
    MKERNEL_GEMM_SWAP_ENTRY(swap_128x176_streamk, 176, 1, 1),
    MKERNEL_GEMM_SWAP_ENTRY(swap_128x64_streamk, 64, 1, 1),
    MKERNEL_GEMM_SWAP_ENTRY(swap_128x128_streamk, 128, 1, 1),
    MKERNEL_GEMM_SWAP_ENTRY(swap_128x176_c2x2, 176, 2, 2),
    MKERNEL_GEMM_SWAP_ENTRY(swap_128x192_c2x1, 192, 2, 1),
    MKERNEL_GEMM_SWAP_ENTRY(swap_64x64_ping, 64, 1, 1),
    // session 9: 9-16 tokens without padding to 64; 333 tokens in 3 x 112 (0.9% padding) or
    // ping-pong 64x176
    MKERNEL_GEMM_SWAP_ENTRY(swap_64x16_ping, 16, 1, 1),
    MKERNEL_GEMM_SWAP_ENTRY(swap_128x16_streamk, 16, 1, 1),
    MKERNEL_GEMM_SWAP_ENTRY(swap_128x112_streamk, 112, 1, 1),
    MKERNEL_GEMM_SWAP_ENTRY(swap_64x176_ping, 176, 1, 1),
    // session 10: 256x176 (fewer shared-memory bytes per FMA than 128x176; 64 tiles at 8192
    // weight rows) by CUTLASS's heuristic (stream-K there: the tiles fill under half a wave)
    // and split-K in two (128 units); 128x176 with stream-K forced (the heuristic runs its 128
    // tiles data-parallel: 132 units of ~124 k-blocks instead of 128 SMs x 128).
    MKERNEL_GEMM_SWAP_ENTRY(swap_256x176_streamk, 176, 1, 1),
    MKERNEL_GEMM_SWAP_ENTRY_AS("swap_256x176_k2", swap_256x176_streamk, 176, 1, 1,
                               (Decomposition{Decomposition::kSplitK, 2})),
    MKERNEL_GEMM_SWAP_ENTRY_AS("swap_128x176_sk", swap_128x176_streamk, 176, 1, 1,
                               (Decomposition{Decomposition::kStreamK, 1})),
    // 3584 weight rows: 28 tiles of 256x176, split-K in four = 112 units of 32 k-blocks (no
    // partial tile shared by more than four CTAs, where stream-K's 132 units share ~4.7 each)
    MKERNEL_GEMM_SWAP_ENTRY_AS("swap_256x176_k4", swap_256x176_streamk, 176, 1, 1,
                               (Decomposition{Decomposition::kSplitK, 4})),
    // 9-16 tokens: swap_64x16_ping with 512 B of each weight row per TMA box (256 B there)
    MKERNEL_GEMM_SWAP_ENTRY(swap_64x16k256_ping, 16, 1, 1),
    // session 11: 3584 weight rows at 177-352 tokens make 28 x 2 = 56 tiles of 128x176; split-K
    // in two gives 112 units of 64 k-blocks, each tile's two halves running side by side (one
    // partial of 90 KB per tile), where stream-K (the heuristic there) shares each tile ~2.4 ways
    // in a turnstile chain and ran 46.6 us against cuBLAS's 31.7 (s11 run 1, graph replay).
    MKERNEL_GEMM_SWAP_ENTRY_AS("swap_128x176_k2", swap_128x176_streamk, 176, 1, 1,
                               (Decomposition{Decomposition::kSplitK, 2})),
    // session 12 (gemm_swap_ticket_sm90.cuh): every SM takes an equal range of (tile, k-block)
    // iterations, split tiles summed through tickets (no CTA waits for another; CUTLASS's
    // deterministic stream-K fixup made finishing CTAs wait). 128x176 (3584 weight rows: 56
    // tiles for 132 SMs) and 128x112 (333 tokens in 336: 0.9% padding where 2 x 176 pads 5.7%).
    MKERNEL_GEMM_SWAP_TICKET_ENTRY(swap_128x176_tk, 176),
    MKERNEL_GEMM_SWAP_TICKET_ENTRY(swap_128x112_tk, 112),
    // the same with 128-deep k-blocks (3 stages of 61 KB): twice the MMAs per barrier round trip
    MKERNEL_GEMM_SWAP_TICKET_ENTRY(swap_128x112k128_tk, 112),
    // each warpgroup 128 weight rows: fewer TMA and L2 bytes per FMA than 128x112
    MKERNEL_GEMM_SWAP_TICKET_ENTRY(swap_256x112_tk, 112),
    // session 13 (gemm_swap_wide_sm90.cuh): all tokens in one tile, 128 weight rows x 336 (3 TMA
    // boxes / wgmmas of 112): 333 tokens pad to 336, one CTA reads each weight k-block, the
    // weight blocks' k-blocks spread over every SM (BalancedK with one CTA per group), split
    // tiles summed through tickets; 256 threads, thread 0 issuing the loads
    MKERNEL_GEMM_SWAP_TICKET_ENTRY(swap_128x336_wide, 336),
    // gemm14: the structure of cuBLAS's kernels at 333 tokens (nvjet_sm90_tst_128x168_64x5_2x1 at
    // 8192 weight rows, _64x168_64x7_4x2 at 3584) with 176-wide token tiles (168 does not build
    // in CUTLASS's mainloop), one tile per CTA: 128x176 in 1x2 clusters (the two token tiles of
    // a weight block together, the weight tile multicast), 5 stages; 64x176 in 4x2 clusters, 7
    // stages, CUTLASS's non-persistent kernel (one consumer warpgroup).
    MKERNEL_GEMM_SWAP_ENTRY(swap_128x176_c1x2, 176, 1, 2),
    MKERNEL_GEMM_SWAP_ENTRY(swap_64x176_c4x2, 176, 4, 2),
    // gemm15: 168-wide token tiles (333 tokens in 336), cuBLAS's tile, built with the Stage2D
    // mainloop (sm90_mma_stage2d.hpp), epilogue stored from the registers; one tile per CTA.
    // 128x168 without a cluster, in 1x2 (weight tile multicast) and 2x1 (token tile multicast)
    // clusters; 64x168 non-persistent in 4x2 (cuBLAS's 3584-row kernel) and 1x2 clusters; and
    // the controls: swap:1's 128x176 tile and 23's 64x176 4x2 kernel with the same
    // register-stored epilogue.
    MKERNEL_GEMM_SWAP_ENTRY(swap_128x168, 168, 1, 1),
    MKERNEL_GEMM_SWAP_ENTRY(swap_128x168_c1x2, 168, 1, 2),
    MKERNEL_GEMM_SWAP_ENTRY(swap_128x168_c2x1, 168, 2, 1),
    MKERNEL_GEMM_SWAP_ENTRY(swap_64x168_c4x2, 168, 4, 2),
    MKERNEL_GEMM_SWAP_ENTRY(swap_64x168_c1x2, 168, 1, 2),
    MKERNEL_GEMM_SWAP_ENTRY(swap_128x176_ds, 176, 1, 1),
    MKERNEL_GEMM_SWAP_ENTRY(swap_64x176_c4x2_ds, 176, 4, 2),
    // 25 and 27 with TMA cache hints: weights evict-first, tokens evict-last
    MKERNEL_GEMM_SWAP_ENTRY(swap_128x168_c1x2_h, 168, 1, 2),
    MKERNEL_GEMM_SWAP_ENTRY(swap_64x168_c4x2_h, 168, 4, 2),
};

inline bool built(const Entry& e) {
  return e.can_implement != nullptr && e.workspace_size != nullptr && e.run != nullptr;
}
#undef MKERNEL_GEMM_SWAP_TICKET_ENTRY
#undef MKERNEL_GEMM_SWAP_ENTRY
#undef MKERNEL_GEMM_SWAP_ENTRY_AS
}  // namespace detail

const char* variant_name(int variant) {
  return variant >= 0 && variant < kNumVariants ? detail::kEntries[variant].name : "unknown";
}

const char* can_implement(const gemm::Problem& p, int variant, int sm_count) {
  if (variant < 0 || variant >= kNumVariants) return "no such swapped-GEMM variant";
  if (p.m < 1 || p.n < 1 || p.k < 1) return "m, n and k must be >= 1";
  if (p.n % 8 || p.k % 8) return "n and k must be multiples of 8 (16-byte TMA alignment)";
  if (p.batches != 1 || p.batch_rows != nullptr || p.group_end != nullptr)
    return "the swapped GEMM runs plain (not grouped) problems";
  const detail::Entry& e = detail::kEntries[variant];
  if (!detail::built(e)) return "not built (a dev build: MKERNEL_DEV_BUILD=1 leaves it out)";
  if (sm_count < e.cluster_m * e.cluster_n) return "fewer SMs than the cluster needs";
  return e.can_implement(p, sm_count, e.decomposition);
}

bool zeroed_workspace(int variant) {
  return variant >= 0 && variant < kNumVariants && detail::kEntries[variant].zeroed_workspace;
}

size_t workspace_size(const gemm::Problem& p, int variant, int sm_count) {
  if (variant < 0 || variant >= kNumVariants) return 0;
  const detail::Entry& e = detail::kEntries[variant];
  return detail::built(e) ? e.workspace_size(p, sm_count, e.decomposition) : 0;
}

cudaError_t run(const gemm::Problem& p, int variant, int sm_count, void* workspace,
                cudaStream_t stream, const char** reason) {
  if (const char* why = can_implement(p, variant, sm_count)) {
    if (reason) *reason = why;
    return cudaErrorInvalidValue;
  }
  const detail::Entry& e = detail::kEntries[variant];
  return e.run(p, sm_count, e.decomposition, workspace, stream, reason);
}

int candidates(int m, int n, int k, int sm_count, int* out, int capacity) {
  (void)n, (void)k;
  int count = 0;
  if (m < 1 || m > 512) return 0;
  for (int v = 0; v < kNumVariants && count < capacity; ++v) {
    const detail::Entry& e = detail::kEntries[v];
    if (!detail::built(e)) continue;
    if (sm_count < e.cluster_m * e.cluster_n) continue;
    // A cluster along the tokens needs as many token tiles (else half of it idles).
    if ((m + e.tile_tokens - 1) / e.tile_tokens < e.cluster_n) continue;
    // A tile more than twice as wide as the tokens wastes most of its MMAs (memory-bound
    // from 9 rows on, the 64-wide one still competes with the GEMV: it reads A once per SM).
    if (e.tile_tokens > (2 * m > 64 ? 2 * m : 64)) continue;
    // Narrow token tiles past twice their width: compute-bound by then, and many narrow tiles
    // run far below a wide one's rate (s6 run 3, 333x8192x8192: 64-wide 178-208 us, 128-wide
    // 121 us, 176-wide 75 us).
    // (Session 9: unless they pad by 2% at most: 333 tokens in 3 x 112 = 336.)
    const int tiles = (m + e.tile_tokens - 1) / e.tile_tokens;
    if (m > 2 * e.tile_tokens && e.tile_tokens < 176 && tiles * e.tile_tokens * 50 > m * 51) continue;
    // Tokens padded past 25% of the work: another variant fits better.
    if (m >= e.tile_tokens && tiles * e.tile_tokens * 4 > m * 5) continue;
    out[count++] = v;
  }
  return count;
}

}  // namespace mkernel::gemm_swap
