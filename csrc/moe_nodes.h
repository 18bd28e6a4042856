// The MoE ops on CUDA when the group spans several (emulated) nodes: the rows move through the
// substrate's all_gather, whose inter-node half is the GPU path (kernel -> NetPath FIFO -> Go
// proxy -> transport), and every rank derives the layout (moe_host.h's, bit for bit) from every
// rank's routing on the device: no host sync on data, so the ops capture in CUDA graphs (after
// one eager call sized the group's areas, like the collectives).
//
// Each rank receives every rank's tokens and routing (at one rank per node with top-8 of 256
// experts that is the deduplicated traffic; with several ranks per node it is up to W x the
// rows an all-to-all would move). With every rank alone on its (emulated) node and host staging,
// the tokens and the combine's partial sums take the MoE's own exchange (moe_net.h: copy engines
// + FIFO pieces; MKERNEL_MOE_NODES_PATH=substrate opts out) instead of the substrate's
// collectives (kernels/moe/README.md).
//
// The dispatch with every rank alone on its node (the MoE's own exchange) is pipelined (moe10;
// MKERNEL_MOE_DISPATCH_PIPELINE=0 restores the previous sequence): the routing travels as the
// head of the rows' exchange (no collective before the rows move), the layout runs while the
// rows are on the link, and each landed piece's rows are gathered into the layout on the
// exchange's receive stream (moe_net.h gather_headed_*); on every path only the rows the counts
// cover are gathered (rows past them stay unwritten). MKERNEL_MOE_PHASES=1 records its phase
// times (mkernel._moe_phases).
//
// Sizes: T is padded to the group's token bound max_T (mkernel.moe.reserve_tokens, else the
// ranks' T all-gathered on the host: a shape, not data); the packed outputs hold the same static
// bound of rows as on one node (moe_ep.h), rows past the counts unspecified.
#pragma once

#ifdef MKERNEL_WITH_CUDA

#include <ATen/ATen.h>

#include <cstdint>

#include "moe_host.h"

namespace mkernel {
namespace moe {

// moe_dispatch_gemm: the rows each local expert receives (packed or [E_local, C]), then the
// engine's grouped GEMM on them. `max_tokens`: max T over the ranks (token_bound).
// `topk_weights` ([T, k] fp32, optional; every rank gives them or none does): they travel beside
// the ids in the routing head, and r.peer_routes holds every rank's routes and weights as the
// pipelined combine reads them ([W*max_T, 3k] int32 words: moe_partial::launch_pack_routes'
// layout), so combine_nodes given them skips its all_gather of (route, topk_weights). Only where
// the layout kernel runs (capacity 0); elsewhere r.peer_routes has 0 elements.
DispatchResult dispatch_nodes(const char* op, const at::Tensor& x, const at::Tensor& topk_idx,
                              const at::Tensor& w1, int64_t group, int64_t world_size,
                              int64_t num_experts, int64_t capacity, bool return_recv,
                              int64_t max_tokens, const c10::optional<at::Tensor>& topk_weights);

// The row each (token, choice) of this rank landed in, from y in the dispatch layout on its
// owner: [T, k, H], zero for dropped choices (moe_combine then sums them, _moe_gather returns
// them).
at::Tensor gather_nodes(const char* op, const at::Tensor& y, const at::Tensor& route,
                        int64_t group, int64_t world_size);

// moe_combine across nodes as partial sums at the owners plus one reduce_scatter (the default:
// s9run1 passed it at W=2 and W=4 over 2 nodes), or with MKERNEL_MOE_NODES_COMBINE=allgather as
// gather_nodes + weighted_sum (every rank's whole layout of y all-gathered).
bool combine_by_reduce_scatter();
// Whether combine_nodes' partials travel in y's dtype (bf16: half the link bytes of fp32; one more
// rounding per owner before the fp32 sum over owners): MKERNEL_MOE_NODES_COMBINE=reduce16, or
// unset where the combine is pipelined (moe17); "reduce" keeps fp32 partials.
bool combine_partials_narrow(bool pipelined);

// moe_combine across nodes, owner side: each rank sums, in fp32 and choice order, the weighted
// rows it holds of every rank's tokens ([W*max_T, H] partials, the routes and weights
// all-gathered: [W*max_T, k]), then the substrate's reduce_scatter adds the owners' partials in
// fp32 and rank order and hands each rank its tokens' sums, rounded once to y's dtype: [T, H].
// Moves W*max_T*H fp32 per rank through the collective instead of every rank's whole layout
// (W*max_T*min(k, E_local) rows of y): 8x fewer bytes at the seed's top-8 shape in bf16.
// `peer_routes`: a dispatch's r.peer_routes of these (route, topk_weights) (the caller vouches
// for it: python/mkernel/ops.py passes them only for the very weights tensor the dispatch was
// given, unchanged since), used by the pipelined combine instead of its all_gather; every rank
// passes them or none does (else the ranks' collectives no longer pair: a timeout naming the peer).
at::Tensor combine_nodes(const char* op, const at::Tensor& y, const at::Tensor& route,
                         const at::Tensor& topk_weights, int64_t group, int64_t world_size,
                         int64_t max_tokens, const c10::optional<at::Tensor>& peer_routes);

// _moe_scatter: every kept choice's row [T, k, H] written where it was dispatched, on its owner:
// [out_rows, H] (capacity 0) or [E_local, C, H]; other rows zero.
at::Tensor scatter_nodes(const char* op, const at::Tensor& rows, const at::Tensor& route,
                         int64_t group, int64_t world_size, int64_t e_local, int64_t capacity,
                         int64_t out_rows, int64_t max_tokens);

}  // namespace moe
}  // namespace mkernel

#endif  // MKERNEL_WITH_CUDA
