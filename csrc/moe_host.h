// The host reference of the expert-parallel MoE ops (moe_dispatch_gemm, moe_combine and the
// gather/scatter their backward passes use), on CPU tensors at any world size, moving data
// through the host reference data path (host_reference.h) like the other host ops.
//
// The layout every MoE op shares (the GPU kernels produce the same one, bit for bit):
//
//   Rank r holds experts r*E_local .. (r+1)*E_local - 1. Local expert e's rows are ordered by
//   (source rank, token, choice j); with `capacity` C > 0 the first C of them are kept (the
//   rest are dropped, deterministically) and expert e owns rows e*C .. e*C + C - 1 of an
//   [E_local * C] row space; with C == 0 (capacity-free) every row is kept and the experts'
//   rows are packed back to back (expert e from offs[e-1] to offs[e], torch._grouped_mm's
//   layout).
//
//   route [T, k] int64 (on the source rank): (dest_rank << 32) | row for each kept (token,
//   choice), -1 for a dropped one.
//   recv_counts [W, E_local] int32 (on the destination rank): rows local expert e holds from
//   source rank s. With the destination's capacity C, the two determine every row's origin:
//   source s's rows of expert e start at base(e) + sum_{s' < s} recv_counts[s', e].
#pragma once

#include <ATen/ATen.h>

#include <cstdint>

namespace mkernel {
namespace moe {

// What moe_dispatch_gemm's host reference returns.
struct DispatchResult {
  at::Tensor out;          // [R, F] packed or [E_local, C, F] padded; unwritten rows are zero
  at::Tensor counts;       // [E_local] int32, rows each local expert holds
  at::Tensor route;        // [T, k] int64
  at::Tensor recv_counts;  // [W, E_local] int32
  at::Tensor recv_x;       // the received rows [R, H] / [E_local, C, H], or 0 elements
  // Across nodes, when the dispatch was given topk_weights: every rank's routes and weights as
  // the combine's words [W*max_T, 3k] int32 (moe_nodes.h), else 0 elements.
  at::Tensor peer_routes;
};

// Routes x's tokens to their experts' ranks (each token once per destination rank), then
// out = rows @ w1[e].T per local expert (fp32 accumulation). Raises on every rank alike when
// some rank's topk_idx holds an id outside [0, num_experts). With run_gemm false only the rows
// move (out is a 0-element tensor, recv_x is returned; w1 is read for its F only).
DispatchResult dispatch(const char* op, const at::Tensor& x, const at::Tensor& topk_idx,
                        const at::Tensor& w1, int64_t group, int64_t world_size,
                        int64_t num_experts, int64_t capacity, bool return_recv,
                        bool run_gemm = true);

// Raises ValueError naming the first entry of topk_idx (a CPU tensor) outside [0, num_experts).
void check_expert_ids(const char* op, const at::Tensor& topk_idx, int64_t num_experts);

// The rows each kept (token, choice) of this rank landed in: y [R, D] (or [E_local, C, D])
// on the destinations -> [T, k, D] in y's dtype, zero for dropped choices.
at::Tensor gather(const char* op, const at::Tensor& y, const at::Tensor& route,
                  const at::Tensor& recv_counts, int64_t group, int64_t world_size);

// The reverse: rows [T, k, D] (one per choice) to the rows their choices landed in, on the
// destinations: -> [out_rows, D] (capacity 0) or [E_local, capacity, D]; rows nobody wrote
// are zero. out_rows must be the packed row count the matching dispatch returned.
at::Tensor scatter(const char* op, const at::Tensor& rows, const at::Tensor& route,
                   const at::Tensor& recv_counts, int64_t group, int64_t world_size,
                   int64_t capacity, int64_t out_rows);

// out[t] = sum_j topk_weights[t, j] * gathered[t, j] in fp32 over j in order, rounded once to
// gathered's dtype: [T, k, H] -> [T, H]. Dropped choices (route -1) add nothing.
at::Tensor weighted_sum(const at::Tensor& gathered, const at::Tensor& route,
                        const at::Tensor& topk_weights);

}  // namespace moe
}  // namespace mkernel
