// The MoE ops on CUDA at world size > 1 when every rank of the group shares one node: the
// kernels of kernels/moe/moe_ep_api.h on the group's peer memory, the routing computed on the
// device (no host sync on data), then the engine's grouped GEMM on the received rows.
//
// Sizes: the token areas hold max T over the ranks — the group's bound set by _moe_reserve
// (mkernel.moe.reserve_tokens), else all-gathered on the host at each call (T is a shape, not
// data; a few tens of microseconds of host time); with capacity 0 the packed outputs (out, recv_x) hold W * max_T * min(k, E_local) rows
// (every row a source could send here), the first sum(counts) meaningful and the rest
// unspecified — the price of a static shape (CUDA graphs) without a host sync.
#pragma once

#ifdef MKERNEL_WITH_CUDA

#include <ATen/ATen.h>

#include <cstdint>
#include <optional>

#include "moe_host.h"

namespace mkernel {
namespace moe {

// The group's token bound: its reserve (mkernel.moe.reserve_tokens; T must fit) or, without one,
// max T over the ranks all-gathered on the host (T is a shape, not data; a collective).
int64_t token_bound(const char* op, int64_t group, int64_t tokens);

// _moe_reserve's bound of the group (0: none; moe_dispatch_gemm.cpp).
int64_t reserved_tokens(int64_t group);

// nullopt: the group spans several nodes (the caller takes moe_nodes.h's path).
// reserved_tokens: the group's token bound (mkernel._moe_reserve), 0: all-gather the ranks' T.
std::optional<DispatchResult> dispatch_ep(const char* op, const at::Tensor& x,
                                          const at::Tensor& topk_idx, const at::Tensor& w1,
                                          int64_t group, int64_t world_size, int64_t num_experts,
                                          int64_t capacity, bool return_recv,
                                          int64_t reserved_tokens);

// moe_combine's [T, H]; nullopt: the group spans several nodes (moe_nodes.h).
std::optional<at::Tensor> combine_ep(const char* op, const at::Tensor& y, const at::Tensor& route,
                                     const at::Tensor& recv_counts,
                                     const at::Tensor& topk_weights, int64_t group,
                                     int64_t world_size, int64_t num_tokens);

// The backward's moves (moe_combine.cpp's _moe_gather / _moe_scatter); nullopt: several nodes.
std::optional<at::Tensor> gather_ep(const char* op, const at::Tensor& y, const at::Tensor& route,
                                    const at::Tensor& recv_counts, int64_t group,
                                    int64_t world_size);
std::optional<at::Tensor> scatter_ep(const char* op, const at::Tensor& rows,
                                     const at::Tensor& route, const at::Tensor& recv_counts,
                                     int64_t group, int64_t world_size, int64_t capacity,
                                     int64_t out_rows);

}  // namespace moe
}  // namespace mkernel

#endif  // MKERNEL_WITH_CUDA
