// Host API of the attention engine's native backward (opt-in: MKERNEL_ATTN_BWD=native).
//
// Given the forward's q, k, v, out, its natural-log lse and the gradient dout, computes
//   P  = exp(scale * Q·Kᵀ - lse)                 (recomputed, masked as the forward)
//   dV = Pᵀ·dO,  dP = dO·Vᵀ,  D = rowsum(dO ∘ O),  dS = P ∘ (dP - D)
//   dQ = scale * dS·K,  dK = scale * dSᵀ·Q
// per (batch, head); GQA/MQA: dK/dV of kv head j sum over query heads j*g .. j*g+g-1.
//
// Three kernels on one stream (attention_bwd.cu): preprocess (D in fp32, dq_accum zeroed), the
// main kernel (one CTA per (K/V block, kv head, batch) loops over the query blocks of every query
// head of its group; dK/dV in registers, dQ added to dq_accum by fp32 atomics), then dQ's
// conversion (scale, fp32 -> q's dtype); the main kernel as BwdProblem::kernel says.
//
// Layouts (dense, last dim contiguous): q, out, dout, dq [b, s, h, d]; k, v, dk, dv
// [b, s_kv, h_kv, d]; lse [b, h, s] fp32 (-inf: a row that sees no key). Causal masking as the
// forward's (bottom-right: query i sees keys j <= i + s_kv - s). Workspaces (caller-allocated,
// any contents): dq_accum of dq_accum_floats(b, h, s, d) fp32 (rows padded to a multiple of 64:
// [b, h, s, d] for the atomics kernels, 64 x 64 tiles for kWgmmaBulkDq / kWgmmaWs,
// dq_tiled_offset), delta [b, h, s] fp32, and for kWgmmaWs lse_log2_pad / delta_pad.
//
// Plain C++ (no torch, no CUTLASS): csrc/attention_backward.cpp is the torch glue.
#pragma once

#include <cuda_runtime.h>

#include "attention_api.h"

namespace mkernel::attention {

// The main kernel: wgmma (attention_bwd_sm90.cuh: 128 keys per CTA, two consumer warpgroups)
// or the first version on warp-level mma.sync (attention_bwd_kernel.cuh: 64 keys per CTA).
// kWgmmaBulkDq: the wgmma kernel with dQ's partial staged in shared memory and added to
// dq_accum by one bulk reduce-add (cp.reduce.async.bulk) per warpgroup and step instead of
// float2 atomics.
// kWgmmaWs: warp-specialized (a TMA producer warpgroup, an mbarrier pipeline) with the bulk
// reduce-add dQ; needs the padded lse_log2_pad / delta_pad workspaces.
// kWgmmaWsDqWarp: kWgmmaWs with FA3's step order and dQ path: a warp of the producer warpgroup
// issues dQ's bulk reduce-adds (the consumers store the partial and go on), and dK's GEMM is
// issued after dQ's so that it runs while dQ's partial is stored; the same workspaces. Causal
// problems take their CTAs in the longest-first order of bwd_tile_coord (BwdProblem::
// tile_sections).
enum class BwdKernel {
  kWgmma = 0,
  kMmaSync = 1,
  kWgmmaBulkDq = 2,
  kWgmmaWs = 3,
  kWgmmaWsDqWarp = 4
};

// True for the kernels that read the padded lse·log2 e / D workspaces (a TMA producer).
__host__ __device__ inline bool bwd_kernel_warp_specialized(BwdKernel k) {
  return k == BwdKernel::kWgmmaWs || k == BwdKernel::kWgmmaWsDqWarp;
}

// The ring mode's rule for the keys of source `src` seen by the queries of `rank` (shard length
// s): keys below key_end, queries from query_begin, and (causal) key j <= query i — the zigzag
// layout's causal mask (tests/attention/bwd_sm90_layouts_check.cpp checks it against the global
// positions).
struct RingRule {
  int key_end, query_begin;
  bool causal;
};
__host__ __device__ inline RingRule ring_rule(int src, int rank, bool causal, int s) {
  if (!causal) return {s, 0, false};
  if (src == rank) return {s, 0, true};      // the own shard: plain causal
  if (src < rank) return {s / 2, 0, false};  // its first chunk, seen by every query
  return {s, s / 2, false};                  // all of it, by the second query chunk
}

// dq_accum's size in floats: rows padded to a multiple of 64 (the bulk kernel adds whole tiles).
inline long long dq_accum_floats(long long b, long long h, long long s, long long d) {
  return b * h * ((s + 63) / 64 * 64) * d;
}

// kWgmmaBulkDq's dq_accum layout: one 64 x 64 fp32 tile per (batch * heads + head, 64-row
// block, 64-column block), in that order; a tile's rows row-major with their 8-float chunks
// XOR-swizzled by row % 8 (the staging stores of one half-warp then hit distinct banks).
__host__ __device__ inline long long dq_tiled_offset(long long bh, int row, int col, int s, int d) {
  const long long tile = (bh * ((s + 63) / 64) + row / 64) * (d / 64) + col / 64;
  const int r = row % 64;
  return tile * 4096 + r * 64 + ((col % 64) ^ ((r % 8) * 8));
}

// The CTA order of a causal problem (BwdProblem::tile_sections > 0, a 1-D grid of n_blocks x
// hb_count CTAs, hb = kv head + heads_kv x (grid z's index)): the (kv head, batch) pairs in
// sections of `sections` pairs, and inside a section every pair's key block 0 (the heaviest: all
// query blocks see it) before any pair's block 1, and so on — the longest CTAs start first, and a
// section's Q / dO / dq_accum rows stay in L2 while its CTAs run (FA3's backward LPT order). The
// last section holds the remainder. Returns {key block, hb} of CTA `lin`.
struct BwdTileCoord {
  int n_block, hb;
};
__host__ __device__ inline BwdTileCoord bwd_tile_coord(int lin, int n_blocks, int hb_count,
                                                       int sections) {
  const int per_section = sections * n_blocks;
  const int section = lin / per_section;
  const int in_section = lin - section * per_section;
  const int first = section * sections;
  const int width = hb_count - first < sections ? hb_count - first : sections;
  const int n_block = in_section / width;
  return {n_block, first + (in_section - n_block * width)};
}

// The section size of bwd_tile_coord: as many (kv head, batch) pairs as keep their query heads'
// Q, dO (element_bytes each) and fp32 dq_accum rows within `budget` bytes of L2 (~40 MB by
// default; MKERNEL_ATTN_BWD_L2_SECTION_MB for measurement: the forward's sections measured
// faster at 4 than at 24 MiB, session 51), rounded down to a power of 2, at least 1.
inline constexpr long long kBwdL2SectionBytes = 40LL * 1024 * 1024;
inline int bwd_tile_sections(long long seq_q, int head_dim, int group, int element_bytes,
                             int hb_count, long long budget = kBwdL2SectionBytes) {
  const long long per_pair =
      seq_q * head_dim * (2LL * element_bytes + 4LL) * (group > 0 ? group : 1);
  int sections = 1;
  while (2LL * sections * per_pair <= budget && 2 * sections <= hb_count) sections *= 2;
  return sections;
}

// dK/dV travelling (BwdProblem::ring_dk_dst): ring sizes it serves, and the key rows one flag
// covers — a consumer warpgroup's half of a 128-key block.
constexpr int kRingTravelMaxWorld = 8;
constexpr int kRingTravelRows = 64;

// Per writing rank, the flags of one source's receive area: one per (batch, kv head, 64 keys).
__host__ __device__ inline long long ring_travel_flags(int batch, int heads_kv, int seq_kv) {
  return (long long)batch * heads_kv * ((seq_kv + kRingTravelRows - 1) / kRingTravelRows);
}
// The flag of the tile holding key `key` of (bi, hkv) among one writer's.
__host__ __device__ inline long long ring_travel_flag(int bi, int hkv, int key, int heads_kv,
                                                      int seq_kv) {
  return ((long long)bi * heads_kv + hkv) * ((seq_kv + kRingTravelRows - 1) / kRingTravelRows) +
         key / kRingTravelRows;
}
// The inverse of ring_travel_flag over one writer's flags: flag t's (bi, hkv, first key).
struct RingTravelTile {
  int bi, hkv, key0;
};
__host__ __device__ inline RingTravelTile ring_travel_tile(long long t, int heads_kv, int seq_kv) {
  const int tiles = (seq_kv + kRingTravelRows - 1) / kRingTravelRows;
  const long long bh = t / tiles;
  return {int(bh / heads_kv), int(bh % heads_kv), int(t - bh * tiles) * kRingTravelRows};
}
// Floats from a receive area's start to writer w's slot ([w][batch][s][h_kv][d]); the dV slots
// follow every writer's dK slots (world x one slot further).
__host__ __device__ inline long long ring_travel_offset(int writer, int batch, int seq_kv,
                                                        int heads_kv, int head_dim) {
  return (long long)writer * batch * seq_kv * heads_kv * head_dim;
}

struct BwdProblem {
  const void* q;
  const void* k;
  const void* v;
  const void* out;
  const void* dout;
  const float* lse;
  void* dq;
  void* dk;
  void* dv;
  float* dq_accum;
  float* delta;
  // kWgmmaWs only (else nullptr): [b, h, s padded to 64] fp32, written by the preprocess:
  // lse·log2 e (+inf where a row sees no key or is past s) and D (0 past s).
  float* lse_log2_pad;
  float* delta_pad;
  // k / v / dk / dv's batch: `batch`, or in the ring mode ring_world * batch.
  int kv_batch;
  // Ring mode (ring_world > 0, the wgmma kernels only): the ring attention backward over K/V
  // all-gathered from the ring's ranks in one launch. k, v, dk, dv hold source src's sequence bi
  // at src * batch + bi; s == s_kv (a shard each). Query i of this rank (ring_rank) sees key j
  // of source src: non-causal, every one; causal (the zigzag layout: a shard is global chunks
  // ring_rank and 2 ring_world - 1 - ring_rank of c = s / 2 rows), j <= i for src == ring_rank,
  // j < c for src < ring_rank, and for src > ring_rank every key if i >= c, none below.
  // dq sums every source; dk and dv are fp32 (each source's partial, summed over the ranks in
  // fp32 next).
  int ring_world, ring_rank;
  // kWgmmaWsDqWarp: 0, the grid (key block, kv head, z) order; > 0, a 1-D grid in
  // bwd_tile_coord's order with sections of this many (kv head, z) pairs (run_native_backward
  // sets it for causal problems, bwd_tile_sections; MKERNEL_ATTN_BWD_TILE_ORDER=grid pins 0).
  int tile_sections;
  int batch, seq_q, seq_kv, heads, heads_kv, head_dim;
  float softmax_scale;
  bool causal;
  DType dtype;
  BwdKernel kernel;
  // Ring mode, K/V consumed on arrival (ring_kv_ready non-null: the fused ring backward,
  // csrc/ring_attention.cpp; kWgmmaWsDqWarp only). k / v are ring attention's whole-mode virtual
  // K/V (ring_kv_api.h: [batch][ring_world positions][s][h_kv][d], position pos holding source
  // (ring_rank + 1 + pos) mod ring_world, the own shard last), so the K/V batch index of source
  // src and batch bi is bi * ring_world + pos (ring_kv_index); dk / dv keep src * batch + bi.
  // Before its K/V loads a CTA waits (bounded by ring_timeout_ns; a timeout records into
  // ring_diag, a comm::WaitDiagnostic*, naming ring_peer, and traps) until the arrival flag of
  // every key chunk it reads is >= *ring_kv_epoch + 1: ring_kv_ready[(bi * ring_world + pos) *
  // ring_chunks + key / ring_chunk_rows] (ring_kv_api.h whole_slot). CTAs take the positions
  // from the last (the own shard) down — the order the shards arrive in (ring_arrival_z).
  const uint64_t* ring_kv_ready;
  const uint64_t* ring_kv_epoch;
  int ring_chunk_rows, ring_chunks;
  unsigned long long ring_timeout_ns;
  void* ring_diag;
  int ring_group, ring_peer;
  // dK/dV travelling (ring_dk_dst[0] non-null; the ring mode of kWgmmaWsDqWarp, on arrival or
  // not; ring_kv_epoch the group's op counter). A consumer warpgroup stores its fp32 dK/dV partial
  // of source src's rows not into dk / dv but straight into src's receive area (peer memory):
  // ring_dk_dst[src] is this rank's slot there, [batch][s][h_kv][d] (ring_travel_offset), dV at +
  // ring_dv_offset floats; then it releases ring_dkv_flag[src][ring_travel_flag(...)] =
  // *ring_kv_epoch + 1. The owner sums the ranks' slots once every flag of a 64-row tile is up
  // (ring_kv_api.h sum_key_grads).
  float* ring_dk_dst[kRingTravelMaxWorld];
  uint64_t* ring_dkv_flag[kRingTravelMaxWorld];
  long long ring_dv_offset;
};

// The K/V batch index a ring-mode CTA of batch index z = src * batch + bi loads from: z, or on
// arrival (BwdProblem::ring_kv_ready) its whole-mode virtual K/V's bi * world + pos.
__host__ __device__ inline int ring_kv_index(int z, int batch, int world, int rank, bool arrival) {
  if (!arrival) return z;
  const int src = z / batch, bi = z - src * batch;
  return bi * world + (src - rank - 1 + 2 * world) % world;
}

// On arrival: the CTA order's z (the grid's, or bwd_tile_coord's) mapped to the source order the
// shards arrive in — position world - 1 (the own shard) first, then world - 2, ... — as
// src * batch + bi.
__host__ __device__ inline int ring_arrival_z(int z_order, int batch, int world, int rank) {
  const int pos = world - 1 - z_order / batch, bi = z_order % batch;
  return ((rank + 1 + pos) % world) * batch + bi;
}

// Why a backward problem can't run (nullptr if it can): dtype, head dim (64, 128), shapes,
// 16-byte alignment of every pointer.
const char* can_implement_backward(const BwdProblem& p);

// Launches the three kernels on `stream`. cudaErrorInvalidValue with the reason in *reason when
// can_implement_backward refuses; else the first launch error (or cudaSuccess).
cudaError_t run_backward(const BwdProblem& p, cudaStream_t stream, const char** reason = nullptr);

}  // namespace mkernel::attention
