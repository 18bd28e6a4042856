// Host API of the MoE routing kernels (plain C++, no torch): the per-choice routing of one
// rank's topk_idx that the dispatch kernel reads (moe_ep_api.h DispatchArgs expert/pos/cnt/
// slot), computed on the device in two launches instead of ~30 small ATen ops.
//
// The arrays equal csrc/moe_ep.cpp's ATen routing (route_on_device) entry for entry:
//   expert[i]  = topk_idx[i] if in [0, E) else -1                            (i = t * k + j)
//   pos[i]     = index of choice i among this rank's choices of the same id, in i order
//                (out-of-range ids count as one extra id E, as the ATen sort puts them last)
//   cnt[x]     = choices of expert x                                         [E]
//   slot[t, d] = index of token t among this rank's tokens with a choice at rank d (in token
//                order), -1 if none                                          [T, W]
// Both kernels split the tokens into segments (one CTA each; routing_segment_tokens):
//   1. count: each CTA's histogram over the ids (+1 out-of-range bucket) and over the
//      destination ranks -> scratch; also writes expert[].
//   2. rank: each CTA sums the histograms of the CTAs before it (its bases; the last CTA also
//      writes cnt), then one warp walks its choices in order (ranks among equal ids from
//      __match_any_sync) and another its tokens (ranks per destination from __ballot_sync).
// Deterministic (no order-dependent atomics), no grid barrier, no spin-wait, no residency
// assumption: every CTA of launch 2 reads only what launch 1 wrote.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace mkernel::moe_ep {

// Tokens per CTA: at least 128, more when T is large so that at most 256 CTAs' histograms
// are summed by the last CTA.
int64_t routing_segment_tokens(int64_t tokens);

struct RoutingArgs {
  const void* topk_idx = nullptr;  // [T, k] int32 or int64 (idx_is_64)
  bool idx_is_64 = true;
  // Elements of topk_idx's type from one choice to the next: 1, or 2 for pad_ids' packed words
  // ([T, k] int64 read as int32 pairs: the id is the low word; idx_is_64 false).
  int idx_stride = 1;
  int64_t tokens = 0;              // T
  int k = 1;
  int experts = 1;                 // E (<= kMaxExperts, a multiple of world)
  int world = 1;                   // W (<= comm::kMaxRanks)
  int32_t* scratch = nullptr;      // routing_scratch_ints(tokens, experts, world) int32
  int32_t* expert = nullptr;       // out [T*k]
  int32_t* pos = nullptr;          // out [T*k]
  int32_t* cnt = nullptr;          // out [E]
  int32_t* slot = nullptr;         // out [T, W]
  cudaStream_t stream = nullptr;
};

// int32 words of scratch the two launches need (the per-CTA histograms).
int64_t routing_scratch_ints(int64_t tokens, int experts, int world);

cudaError_t route(const RoutingArgs& a, const char** reason = nullptr);


// moe14: the several-node dispatch's packed layout (capacity 0) from route()'s expert / pos /
// cnt of EVERY rank's choices (route() over idx_all [W*Tm, k], choices in (source, token,
// choice) order), in one launch instead of moe_nodes.cpp's ~30 ATen ops (sort, searchsorted,
// index ops). Equal entry for entry to that ATen sequence (tests/host/moe_nodes_layout.py is
// its CPU twin, checked against it):
//   base[g]        = choices of the experts of g's owner before g (g's first packed row there)
//   row(c)         = base[expert[c]] + pos[c]; kept iff expert[c] >= 0 and row(c) < rows_out
//   route[t, j]    = (owner << 32) | row(c) if kept else -1, for this rank's choices
//                    c = (me*Tm + t)*k + j, t < tokens
//   token[q]       = c / k (a row of idx_all's [W*Tm] token space) for the kept c of this
//                    rank's experts with row(c) = q; -1 for q >= min(sum of its counts, rows_out)
//   counts[e]      = min(base + cnt, rows_out) - min(base, rows_out) of local expert e
//   recv_counts[s, e] += 1 per kept c of source s and local expert e (must be zero on entry;
//                    integer atomics: the result does not depend on their order)
struct NodesLayoutArgs {
  const int32_t* expert = nullptr;  // [n] route()'s (n = world * max_tokens * k)
  const int32_t* pos = nullptr;     // [n]
  const int32_t* cnt = nullptr;     // [experts]
  int64_t max_tokens = 0;           // Tm (every rank's padded token count)
  int64_t tokens = 0;               // T of this rank (<= Tm)
  int k = 1;
  int experts = 1;                  // E (<= kMaxExperts, a multiple of world)
  int world = 1;
  int me = 0;
  int64_t rows_out = 0;             // the packed layout's static row bound
  int64_t* route = nullptr;         // out [tokens, k]
  int64_t* token = nullptr;         // out [rows_out]
  int32_t* counts = nullptr;        // out [E / world]
  int32_t* recv_counts = nullptr;   // in/out [world, E / world], zero on entry
  // Optional (both or neither): every rank's choices as pad_ids' packed words ([n] int64 as
  // int32 pairs: id, weight bits) in, and the combine's routes out: words [world * max_tokens,
  // 3k] uint32, slot s*Tm + t = (code(c) low, high) for j < k, then the k weights' bits (0 where
  // code(c) = -1), c = (s*Tm + t)*k + j — what moe_partial::launch_pack_routes writes for each
  // rank's (route, topk_weights), so the combine need not all-gather them.
  const int32_t* packed = nullptr;
  uint32_t* words = nullptr;
  cudaStream_t stream = nullptr;
};

cudaError_t nodes_layout(const NodesLayoutArgs& a, const char** reason = nullptr);


// moe14: the several-node dispatch's routing head in one launch instead of six ATen ops (the
// host's issue time before the rows can move): out [max_tokens, k] int32 = topk_idx [tokens, k]
// (int32 or int64) where in [0, experts), -1 where out of range and on the padding rows
// tokens .. max_tokens - 1.
cudaError_t pad_ids(const void* topk_idx, bool idx_is_64, int64_t tokens, int64_t max_tokens, int k,
                    int experts, int32_t* out, cudaStream_t stream);

// The same head with the routing weights beside the ids (session 22: the combine's routes travel
// with the dispatch): out [max_tokens, k] int64 = (bits(topk_weights[t, j]) << 32) | uint32(id),
// the id as pad_ids writes it, the weight 0 on the padding rows.
cudaError_t pad_ids_weighted(const void* topk_idx, bool idx_is_64, const float* topk_weights,
                             int64_t tokens, int64_t max_tokens, int k, int experts, int64_t* out,
                             cudaStream_t stream);

}  // namespace mkernel::moe_ep
