// mkernel.moe_dispatch_gemm: expert-parallel MoE dispatch (all-to-all of routed tokens) fused
// with each local expert's first GEMM.
//
//   x [T, H] tokens, topk_idx [T, k] expert ids in [0, num_experts) (a device tensor),
//   w1 [E_local, F, H] with E_local = num_experts / world_size, capacity (0: capacity-free)
//     ->  out         x_e @ w1[e].T for the rows local expert e received (moe_host.h's layout):
//                     capacity 0: packed [R, F], expert e's rows between offs[e-1] and offs[e]
//                     (offs = cumsum(counts)); capacity C: padded [E_local, C, F]
//         counts      [E_local] int32, rows each local expert holds
//         route       [T, k] int64, where each (token, choice) landed ((rank << 32) | row), -1
//                     when capacity dropped it
//         recv_counts [world_size, E_local] int32, rows of local expert e from each rank
//         recv_x      the received rows (out's layout with H columns) when return_recv, else
//                     0 elements (the weight gradient needs them)
//         peer_routes across nodes, given topk_weights [T, k] fp32: every rank's routes and
//                     weights as the combine reads them ([W*max_T, 3k] int32; moe_combine takes
//                     them instead of all-gathering route and weights), else [0, 3k]
//
// The packed row count R: T * k at world size 1 (every choice is local); at world size > 1 it
// depends on every rank's routing (a data-dependent size: torch.compile sees an unbacked
// SymInt, see python/mkernel/_moe_registry.py). A static shape needs capacity > 0.
//
// Expert ids are data on the device: the host reference checks them (an error on every rank
// alike); the CUDA kernels drop an out-of-range choice (route -1) rather than synchronise.
// World size > 1 on CUDA, one node: the dispatch kernel on the group's peer memory
// (kernels/moe, moe_ep.h), then the engine's grouped GEMM on the received rows (same stream);
// the packed outputs then hold W * max_T * min(k, E_local) rows (a static bound, see
// moe_ep.h), the first sum(counts) meaningful. Several nodes: every rank's tokens and routing
// through the substrate's all_gather, the same layout derived on the device, then the grouped
// GEMM (moe_nodes.h; same static bound).
//
// Holds the op's validator and its CPU-reference and CUDA kernels; its fake kernel is the
// Python one (data-dependent output size), which validates through _moe_dispatch_check.
#include <ATen/ATen.h>
#include <torch/library.h>

#include <map>
#include <mutex>
#include <tuple>

#include "moe_host.h"
#include "moe_local.h"
#ifdef MKERNEL_WITH_CUDA
#include "moe_ep.h"
#include "moe_nodes.h"
#endif
#include "ops_validation.h"

namespace mkernel {
namespace {
constexpr const char* kOp = "mkernel.moe_dispatch_gemm";
using Outputs = std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor>;

// The optional routing weights: [T, k] fp32 like topk_idx, on x's device, contiguous.
void check_weights(const c10::optional<at::Tensor>& topk_weights, const at::Tensor& x,
                   const at::Tensor& topk_idx) {
  if (!topk_weights.has_value()) return;
  using namespace validation;
  const at::Tensor& w = *topk_weights;
  check_dim(kOp, "topk_weights", w, 2, "[T, k]");
  check_dtype_in(kOp, "topk_weights", w, {at::kFloat}, "routing weights");
  check_same_device(kOp, "topk_weights", w, "x", x);
  TORCH_SYM_CHECK(same_sizes(w, topk_idx), kOp,
                  ": topk_weights must have the shape of topk_idx [T, k] (topk_idx: ",
                  topk_idx.sym_sizes(), ", topk_weights: ", w.sym_sizes(), ")");
  check_contiguous(kOp, "topk_weights", w);
}

// No carried routes (one node, world size 1, the CPU reference): [0, 3k] int32.
at::Tensor no_peer_routes(const at::Tensor& x, const at::Tensor& topk_idx) {
  return x.new_empty({0, 3 * topk_idx.size(1)}, x.options().dtype(at::kInt));
}
}  // namespace

MoeDispatchSizes validate_moe_dispatch_gemm(const at::Tensor& x, const at::Tensor& topk_idx,
                                            const at::Tensor& w1, int64_t group, int64_t world_size,
                                            int64_t num_experts, int64_t capacity) {
  using namespace validation;
  check_group(kOp, group, world_size);
  TORCH_CHECK_VALUE(num_experts >= 1, kOp, ": num_experts must be >= 1, got ", num_experts);
  TORCH_CHECK_VALUE(num_experts % world_size == 0, kOp,
                    ": num_experts must be divisible by world_size (each rank holds "
                    "num_experts / world_size experts), got num_experts ",
                    num_experts, " and world_size ", world_size);
  TORCH_CHECK_VALUE(capacity >= 0, kOp,
                    ": capacity (token slots per local expert, 0: capacity-free) must be >= 0, "
                    "got ",
                    capacity);
  check_dim(kOp, "x", x, 2, "[T, H]");
  check_dim(kOp, "topk_idx", topk_idx, 2, "[T, k]");
  check_dim(kOp, "w1", w1, 3, "[E_local, F, H]");
  check_float_dtype(kOp, "x", x);
  check_dtype_in(kOp, "topk_idx", topk_idx, {at::kLong, at::kInt}, "expert ids");
  check_same_dtype(kOp, "w1", w1, "x", x);
  check_same_device(kOp, "topk_idx", topk_idx, "x", x);
  check_same_device(kOp, "w1", w1, "x", x);
  TORCH_SYM_CHECK(topk_idx.sym_size(0).sym_eq(x.sym_size(0)), kOp,
                  ": topk_idx must have one row per token of x (x: ", x.sym_sizes(),
                  ", topk_idx: ", topk_idx.sym_sizes(), ")");
  TORCH_SYM_CHECK(
      topk_idx.sym_size(1).sym_ge(1), kOp,
      ": topk_idx must choose k >= 1 experts per token, got topk_idx: ", topk_idx.sym_sizes());
  TORCH_SYM_CHECK(topk_idx.sym_size(1).sym_le(num_experts), kOp,
                  ": topk_idx must choose k <= num_experts experts per token (num_experts ",
                  num_experts, ", topk_idx: ", topk_idx.sym_sizes(), ")");
  const int64_t local_experts = num_experts / world_size;
  TORCH_SYM_CHECK(w1.sym_size(0).sym_eq(local_experts), kOp,
                  ": w1 must hold E_local = num_experts / world_size = ", local_experts,
                  " experts in dim 0 (num_experts ", num_experts, ", world_size ", world_size,
                  ", w1: ", w1.sym_sizes(), ")");
  TORCH_SYM_CHECK(w1.sym_size(2).sym_eq(x.sym_size(1)), kOp,
                  ": w1 must have the same H as x (x: ", x.sym_sizes(), ", w1: ", w1.sym_sizes(),
                  ")");
  check_contiguous(kOp, "x", x);
  check_contiguous(kOp, "topk_idx", topk_idx);
  check_contiguous(kOp, "w1", w1);
  return {local_experts, capacity, w1.sym_size(1), x.sym_size(0), topk_idx.sym_size(1)};
}

namespace {

// _moe_reserve's token bounds, by group handle (0 or absent: exchange T at every call).
struct TokenBounds {
  std::mutex mu;
  std::map<int64_t, int64_t> by_group;
};
TokenBounds& token_bounds() {
  static TokenBounds* b = new TokenBounds();  // leaked: no destructor order at exit
  return *b;
}

}  // namespace

namespace moe {
int64_t reserved_tokens(int64_t group) {
  TokenBounds& b = token_bounds();
  std::lock_guard<std::mutex> guard(b.mu);
  auto it = b.by_group.find(group);
  return it == b.by_group.end() ? 0 : it->second;
}
}  // namespace moe

namespace {

// mkernel._moe_reserve: every later CUDA dispatch of the group sizes its token areas (and, with
// capacity 0, its packed outputs) for max_tokens per rank instead of all-gathering the ranks' T
// on the host at each call: no host exchange at all, fixed shapes call after call. Every rank
// must pass the same value (the kernel's entry barrier checks it with the call signature).
void moe_reserve(int64_t group, int64_t world_size, int64_t max_tokens) {
  validation::check_group("mkernel._moe_reserve", group, world_size);
  TORCH_CHECK_VALUE(max_tokens >= 0, "mkernel._moe_reserve: max_tokens must be >= 0, got ",
                    max_tokens);
  TokenBounds& b = token_bounds();
  std::lock_guard<std::mutex> guard(b.mu);
  b.by_group[group] = max_tokens;
}

// The validator as an op: the Python fake kernel calls it (the op's output size is data
// dependent, so its fake kernel cannot be a C++ Meta kernel).
at::Tensor dispatch_check(const at::Tensor& x, const at::Tensor& topk_idx, const at::Tensor& w1,
                          int64_t group, int64_t world_size, int64_t num_experts,
                          int64_t capacity, const c10::optional<at::Tensor>& topk_weights) {
  validate_moe_dispatch_gemm(x, topk_idx, w1, group, world_size, num_experts, capacity);
  check_weights(topk_weights, x, topk_idx);
  return x.new_empty({0});
}

Outputs moe_dispatch_gemm_cpu(const at::Tensor& x, const at::Tensor& topk_idx,
                              const at::Tensor& w1, int64_t group, int64_t world_size,
                              int64_t num_experts, int64_t capacity, bool return_recv,
                              const c10::optional<at::Tensor>& topk_weights) {
  validate_moe_dispatch_gemm(x, topk_idx, w1, group, world_size, num_experts, capacity);
  check_weights(topk_weights, x, topk_idx);
  if (world_size == 1) moe::check_expert_ids(kOp, topk_idx, num_experts);
  moe::DispatchResult r =
      world_size == 1
          ? moe::dispatch_local(x, topk_idx, w1, num_experts, capacity, return_recv)
          : moe::dispatch(kOp, x, topk_idx, w1, group, world_size, num_experts, capacity,
                          return_recv);
  return {r.out, r.counts, r.route, r.recv_counts, r.recv_x, no_peer_routes(x, topk_idx)};
}

#ifdef MKERNEL_WITH_CUDA
Outputs moe_dispatch_gemm_cuda(const at::Tensor& x, const at::Tensor& topk_idx,
                               const at::Tensor& w1, int64_t group, int64_t world_size,
                               int64_t num_experts, int64_t capacity, bool return_recv,
                               const c10::optional<at::Tensor>& topk_weights) {
  validate_moe_dispatch_gemm(x, topk_idx, w1, group, world_size, num_experts, capacity);
  check_weights(topk_weights, x, topk_idx);
  validation::check_aligned16(kOp, "x", x);
  validation::check_aligned16(kOp, "w1", w1);
  if (world_size == 1) {
    moe::DispatchResult r =
        moe::dispatch_local(x, topk_idx, w1, num_experts, capacity, return_recv);
    return {r.out, r.counts, r.route, r.recv_counts, r.recv_x, no_peer_routes(x, topk_idx)};
  }
  // One node: the dispatch kernel on the group's peer memory, then the grouped GEMM.
  if (auto r = moe::dispatch_ep(kOp, x, topk_idx, w1, group, world_size, num_experts, capacity,
                                return_recv, moe::reserved_tokens(group))) {
    return {r->out, r->counts, r->route, r->recv_counts, r->recv_x, no_peer_routes(x, topk_idx)};
  }
  // Several nodes: every rank's tokens and routing through the substrate's all_gather (its
  // inter-node half on the GPU), the layout derived on the device (moe_nodes.h).
  moe::DispatchResult r =
      moe::dispatch_nodes(kOp, x, topk_idx, w1, group, world_size, num_experts, capacity,
                          return_recv, moe::token_bound(kOp, group, x.size(0)), topk_weights);
  return {r.out, r.counts, r.route, r.recv_counts, r.recv_x,
          r.peer_routes.defined() ? r.peer_routes : no_peer_routes(x, topk_idx)};
}
#endif  // MKERNEL_WITH_CUDA

}  // namespace

TORCH_LIBRARY_IMPL(mkernel, CompositeExplicitAutograd, m) {
  m.impl("_moe_dispatch_check", &dispatch_check);
  m.impl("_moe_reserve", &moe_reserve);
}
TORCH_LIBRARY_IMPL(mkernel, CPU, m) { m.impl("moe_dispatch_gemm", &moe_dispatch_gemm_cpu); }
#ifdef MKERNEL_WITH_CUDA
TORCH_LIBRARY_IMPL(mkernel, CUDA, m) { m.impl("moe_dispatch_gemm", &moe_dispatch_gemm_cuda); }
#endif  // MKERNEL_WITH_CUDA

}  // namespace mkernel
