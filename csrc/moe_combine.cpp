// mkernel.moe_combine: the reverse of moe_dispatch_gemm: the experts' outputs travel back to
// their tokens' ranks and are summed with the routing weights.
//
//   y [R, H] (packed) or [E_local, capacity, H] expert outputs in moe_dispatch_gemm's layout,
//   route [T, k] int64 and recv_counts [world_size, E_local] int32 from moe_dispatch_gemm,
//   topk_weights [T, k] fp32
//     ->  out [T, H] = sum_j topk_weights[t, j] * y[the row route[t, j] names], in fp32 over j
//         in order, rounded once to y's dtype; dropped choices (route -1) add nothing.
//
// Also the two moves its autograd needs (python/mkernel/_moe_registry.py):
//   _moe_gather(y, route, recv_counts) -> [T, k, H]: the row of every choice, zero if dropped
//   _moe_scatter(rows [T, k, H], route, recv_counts, capacity, out_rows) -> y's layout:
//     every kept choice's row written where it was dispatched, other rows zero.
//
// Holds the validators and the Meta, CPU-reference and CUDA kernels of the three ops.
#include <ATen/ATen.h>
#include <torch/library.h>

#include "moe_host.h"
#include "moe_local.h"
#ifdef MKERNEL_WITH_CUDA
#include "moe_ep.h"
#include "moe_nodes.h"
#endif
#include "ops_validation.h"

namespace mkernel {
namespace {
constexpr const char* kOp = "mkernel.moe_combine";
constexpr const char* kGatherOp = "mkernel._moe_gather";
constexpr const char* kScatterOp = "mkernel._moe_scatter";

// What the three ops check of (route, recv_counts) and of the rows' tensor `y`
// ([R, H] or [E_local, C, H]; `y_name` names it).
void check_route(const char* op, const char* y_name, const at::Tensor& y, const at::Tensor& route,
                 const at::Tensor& recv_counts, int64_t world_size) {
  using namespace validation;
  check_dim(op, "route", route, 2, "[T, k]");
  check_dim(op, "recv_counts", recv_counts, 2, "[world_size, E_local]");
  check_dtype_in(op, "route", route, {at::kLong}, "the route moe_dispatch_gemm returned");
  check_dtype_in(op, "recv_counts", recv_counts, {at::kInt},
                 "the recv_counts moe_dispatch_gemm returned");
  check_same_device(op, "route", route, y_name, y);
  check_same_device(op, "recv_counts", recv_counts, y_name, y);
  TORCH_SYM_CHECK(recv_counts.sym_size(0).sym_eq(world_size), op,
                  ": recv_counts must have world_size = ", world_size,
                  " rows (recv_counts: ", recv_counts.sym_sizes(), ")");
  check_contiguous(op, "route", route);
  check_contiguous(op, "recv_counts", recv_counts);
}

// y: [R, H] packed or [E_local, C, H] padded, E_local matching recv_counts.
void check_rows(const char* op, const char* y_name, const at::Tensor& y,
                const at::Tensor& recv_counts) {
  TORCH_CHECK(y.dim() == 2 || y.dim() == 3, op, ": ", y_name,
              " must be a 2-D tensor [R, H] (packed) or a 3-D tensor [E_local, capacity, H], got ",
              y.dim(), "-D ", y.sym_sizes());
  validation::check_float_dtype(op, y_name, y);
  if (y.dim() == 3) {
    TORCH_SYM_CHECK(y.sym_size(0).sym_eq(recv_counts.sym_size(1)), op, ": ", y_name,
                    " [E_local, capacity, H] must hold recv_counts' E_local experts (", y_name,
                    ": ", y.sym_sizes(), ", recv_counts: ", recv_counts.sym_sizes(), ")");
  }
  validation::check_contiguous(op, y_name, y);
}

}  // namespace

MoeCombineSizes validate_moe_combine(const at::Tensor& y, const at::Tensor& route,
                                     const at::Tensor& recv_counts,
                                     const at::Tensor& topk_weights, int64_t group,
                                     int64_t world_size, const c10::SymInt& num_tokens) {
  using namespace validation;
  check_group(kOp, group, world_size);
  check_rows(kOp, "y", y, recv_counts);
  check_route(kOp, "y", y, route, recv_counts, world_size);
  check_dim(kOp, "topk_weights", topk_weights, 2, "[T, k]");
  check_dtype_in(kOp, "topk_weights", topk_weights, {at::kFloat}, "routing weights");
  check_same_device(kOp, "topk_weights", topk_weights, "y", y);
  TORCH_SYM_CHECK(route.sym_size(0).sym_eq(num_tokens), kOp,
                  ": num_tokens must equal the token count T of route [T, k] (num_tokens: ",
                  num_tokens, ", route: ", route.sym_sizes(), ")");
  TORCH_SYM_CHECK(same_sizes(topk_weights, route), kOp,
                  ": topk_weights must have the shape of route [T, k] (route: ",
                  route.sym_sizes(), ", topk_weights: ", topk_weights.sym_sizes(), ")");
  check_contiguous(kOp, "topk_weights", topk_weights);
  return {num_tokens, y.sym_size(-1)};
}

namespace {

// peer_routes (optional): the dispatch's carried routes, int32 words on y's device (their
// shape is checked where they are read: moe_nodes.cpp).
void check_peer_routes(const c10::optional<at::Tensor>& peer_routes, const at::Tensor& y) {
  if (!peer_routes.has_value()) return;
  validation::check_dtype_in(kOp, "peer_routes", *peer_routes, {at::kInt},
                             "the peer_routes moe_dispatch_gemm returned");
  validation::check_same_device(kOp, "peer_routes", *peer_routes, "y", y);
}

at::Tensor moe_combine_meta(const at::Tensor& y, const at::Tensor& route,
                            const at::Tensor& recv_counts, const at::Tensor& topk_weights,
                            int64_t group, int64_t world_size, c10::SymInt num_tokens,
                            const c10::optional<at::Tensor>& peer_routes) {
  const MoeCombineSizes sizes =
      validate_moe_combine(y, route, recv_counts, topk_weights, group, world_size, num_tokens);
  check_peer_routes(peer_routes, y);
  return y.new_empty_symint({sizes.tokens, sizes.h});
}

at::Tensor moe_combine_cpu(const at::Tensor& y, const at::Tensor& route,
                           const at::Tensor& recv_counts, const at::Tensor& topk_weights,
                           int64_t group, int64_t world_size, int64_t num_tokens,
                           const c10::optional<at::Tensor>& peer_routes) {
  validate_moe_combine(y, route, recv_counts, topk_weights, group, world_size, num_tokens);
  check_peer_routes(peer_routes, y);  // (the host reference reads route and weights only)
  const at::Tensor g = world_size == 1
                           ? moe::gather_local(y, route)
                           : moe::gather(kOp, y, route, recv_counts, group, world_size);
  return moe::weighted_sum(g, route, topk_weights);
}

// _moe_gather ------------------------------------------------------------------------------

void validate_gather(const at::Tensor& y, const at::Tensor& route, const at::Tensor& recv_counts,
                     int64_t group, int64_t world_size) {
  validation::check_group(kGatherOp, group, world_size);
  check_rows(kGatherOp, "y", y, recv_counts);
  check_route(kGatherOp, "y", y, route, recv_counts, world_size);
}

at::Tensor gather_meta(const at::Tensor& y, const at::Tensor& route, const at::Tensor& recv_counts,
                       int64_t group, int64_t world_size) {
  validate_gather(y, route, recv_counts, group, world_size);
  return y.new_empty_symint({route.sym_size(0), route.sym_size(1), y.sym_size(-1)});
}

at::Tensor gather_cpu(const at::Tensor& y, const at::Tensor& route, const at::Tensor& recv_counts,
                      int64_t group, int64_t world_size) {
  validate_gather(y, route, recv_counts, group, world_size);
  return world_size == 1 ? moe::gather_local(y, route)
                         : moe::gather(kGatherOp, y, route, recv_counts, group, world_size);
}

// _moe_scatter -----------------------------------------------------------------------------

void validate_scatter(const at::Tensor& rows, const at::Tensor& route,
                      const at::Tensor& recv_counts, int64_t group, int64_t world_size,
                      int64_t capacity, const c10::SymInt& out_rows) {
  using namespace validation;
  check_group(kScatterOp, group, world_size);
  check_dim(kScatterOp, "rows", rows, 3, "[T, k, H]");
  check_float_dtype(kScatterOp, "rows", rows);
  check_route(kScatterOp, "rows", rows, route, recv_counts, world_size);
  TORCH_CHECK_VALUE(capacity >= 0, kScatterOp, ": capacity must be >= 0, got ", capacity);
  TORCH_SYM_CHECK(out_rows.sym_ge(0), kScatterOp, ": out_rows must be >= 0, got ", out_rows);
  TORCH_SYM_CHECK(rows.sym_size(0).sym_eq(route.sym_size(0)).sym_and(
                      rows.sym_size(1).sym_eq(route.sym_size(1))),
                  kScatterOp, ": rows [T, k, H] must match route [T, k] (rows: ", rows.sym_sizes(),
                  ", route: ", route.sym_sizes(), ")");
  check_contiguous(kScatterOp, "rows", rows);
}

at::Tensor scatter_meta(const at::Tensor& rows, const at::Tensor& route,
                        const at::Tensor& recv_counts, int64_t group, int64_t world_size,
                        int64_t capacity, c10::SymInt out_rows) {
  validate_scatter(rows, route, recv_counts, group, world_size, capacity, out_rows);
  if (capacity > 0) {
    return rows.new_empty_symint({recv_counts.sym_size(1), capacity, rows.sym_size(2)});
  }
  return rows.new_empty_symint({out_rows, rows.sym_size(2)});
}

at::Tensor scatter_cpu(const at::Tensor& rows, const at::Tensor& route,
                       const at::Tensor& recv_counts, int64_t group, int64_t world_size,
                       int64_t capacity, int64_t out_rows) {
  validate_scatter(rows, route, recv_counts, group, world_size, capacity, out_rows);
  if (world_size == 1) {
    return moe::scatter_local(rows, route, recv_counts.size(1), capacity, out_rows);
  }
  return moe::scatter(kScatterOp, rows, route, recv_counts, group, world_size, capacity, out_rows);
}

#ifdef MKERNEL_WITH_CUDA
// World size 1 runs on the device (moe_local.h); world size > 1 on one node runs the combine,
// gather and scatter kernels on the group's peer memory (moe_ep.h); a group spanning several
// nodes moves the rows through the substrate's all_gather (moe_nodes.h).
at::Tensor moe_combine_cuda(const at::Tensor& y, const at::Tensor& route,
                            const at::Tensor& recv_counts, const at::Tensor& topk_weights,
                            int64_t group, int64_t world_size, int64_t num_tokens,
                            const c10::optional<at::Tensor>& peer_routes) {
  validate_moe_combine(y, route, recv_counts, topk_weights, group, world_size, num_tokens);
  check_peer_routes(peer_routes, y);
  validation::check_aligned16(kOp, "y", y);
  if (world_size == 1) return moe::weighted_sum(moe::gather_local(y, route), route, topk_weights);
  // One node: the combine kernel (pull from the owners' peer memory, fp32 sum in choice order).
  if (auto out = moe::combine_ep(kOp, y, route, recv_counts, topk_weights, group, world_size,
                                 num_tokens)) {
    return *out;
  }
  // Several nodes: partial sums at the owners + one reduce_scatter (combine_nodes; the default
  // since s9run1 passed it at W=2 and 4); MKERNEL_MOE_NODES_COMBINE=allgather: the fp32 sum in
  // choice order of the rows gathered from every rank.
  if (moe::combine_by_reduce_scatter()) {
    return moe::combine_nodes(kOp, y, route, topk_weights, group, world_size,
                              moe::token_bound(kOp, group, route.size(0)), peer_routes);
  }
  return moe::weighted_sum(moe::gather_nodes(kOp, y, route, group, world_size), route,
                           topk_weights);
}

at::Tensor gather_cuda(const at::Tensor& y, const at::Tensor& route,
                       const at::Tensor& recv_counts, int64_t group, int64_t world_size) {
  validate_gather(y, route, recv_counts, group, world_size);
  if (world_size == 1) return moe::gather_local(y, route);
  if (auto out = moe::gather_ep(kGatherOp, y, route, recv_counts, group, world_size)) return *out;
  return moe::gather_nodes(kGatherOp, y, route, group, world_size);
}

at::Tensor scatter_cuda(const at::Tensor& rows, const at::Tensor& route,
                        const at::Tensor& recv_counts, int64_t group, int64_t world_size,
                        int64_t capacity, int64_t out_rows) {
  validate_scatter(rows, route, recv_counts, group, world_size, capacity, out_rows);
  if (world_size == 1) {
    return moe::scatter_local(rows, route, recv_counts.size(1), capacity, out_rows);
  }
  if (auto out = moe::scatter_ep(kScatterOp, rows, route, recv_counts, group, world_size,
                                 capacity, out_rows)) {
    return *out;
  }
  return moe::scatter_nodes(kScatterOp, rows, route, group, world_size, recv_counts.size(1),
                            capacity, out_rows,
                            moe::token_bound(kScatterOp, group, route.size(0)));
}
#endif  // MKERNEL_WITH_CUDA

}  // namespace

TORCH_LIBRARY_IMPL(mkernel, Meta, m) {
  m.impl("moe_combine", &moe_combine_meta);
  m.impl("_moe_gather", &gather_meta);
  m.impl("_moe_scatter", &scatter_meta);
}
TORCH_LIBRARY_IMPL(mkernel, CPU, m) {
  m.impl("moe_combine", &moe_combine_cpu);
  m.impl("_moe_gather", &gather_cpu);
  m.impl("_moe_scatter", &scatter_cpu);
}
#ifdef MKERNEL_WITH_CUDA
TORCH_LIBRARY_IMPL(mkernel, CUDA, m) {
  m.impl("moe_combine", &moe_combine_cuda);
  m.impl("_moe_gather", &gather_cuda);
  m.impl("_moe_scatter", &scatter_cuda);
}
#endif  // MKERNEL_WITH_CUDA

}  // namespace mkernel
