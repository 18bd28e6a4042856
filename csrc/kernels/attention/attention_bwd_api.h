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
enum class BwdKernel { kWgmma = 0, kMmaSync = 1, kWgmmaBulkDq = 2, kWgmmaWs = 3 };

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
  int batch, seq_q, seq_kv, heads, heads_kv, head_dim;
  float softmax_scale;
  bool causal;
  DType dtype;
  BwdKernel kernel;
};

// Why a backward problem can't run (nullptr if it can): dtype, head dim (64, 128), shapes,
// 16-byte alignment of every pointer.
const char* can_implement_backward(const BwdProblem& p);

// Launches the three kernels on `stream`. cudaErrorInvalidValue with the reason in *reason when
// can_implement_backward refuses; else the first launch error (or cudaSuccess).
cudaError_t run_backward(const BwdProblem& p, cudaStream_t stream, const char** reason = nullptr);

}  // namespace mkernel::attention
