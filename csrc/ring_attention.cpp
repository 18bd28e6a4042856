// mkernel.ring_attention: attention over a sequence sharded across the ranks (context
// parallelism): the K/V shards circulate around the ring while each rank attends its local
// queries to them.
//
//   q [b, s, h, d], k and v [b, s_kv, h_kv, d] (local sequence shards; h % h_kv == 0, GQA)
//     ->  out [b, s, h, d] in q's dtype, lse [b, h, s] fp32 (log-sum-exp of the scores)
//
// Holds the op's validator and its Meta, CPU-reference and CUDA kernels.
#include <torch/library.h>

#include <cmath>
#include <optional>
#include <tuple>

#include "ops_validation.h"

namespace mkernel {
namespace {
constexpr const char* kOp = "mkernel.ring_attention";
}  // namespace

RingAttentionSizes validate_ring_attention(const at::Tensor& q, const at::Tensor& k,
                                           const at::Tensor& v, int64_t group, int64_t world_size,
                                           std::optional<double> softmax_scale) {
  using namespace validation;
  check_group(kOp, group, world_size);
  if (softmax_scale.has_value()) {
    TORCH_CHECK_VALUE(std::isfinite(*softmax_scale) && *softmax_scale > 0, kOp,
                      ": softmax_scale must be a finite number > 0 (or None for 1/sqrt(d)), got ",
                      *softmax_scale);
  }
  check_dim(kOp, "q", q, 4, "[b, s, h, d]");
  check_dim(kOp, "k", k, 4, "[b, s_kv, h_kv, d]");
  check_dim(kOp, "v", v, 4, "[b, s_kv, h_kv, d]");
  check_float_dtype(kOp, "q", q);
  check_same_dtype(kOp, "k", k, "q", q);
  check_same_dtype(kOp, "v", v, "q", q);
  check_same_device(kOp, "k", k, "q", q);
  check_same_device(kOp, "v", v, "q", q);
  TORCH_SYM_CHECK(k.sym_size(0).sym_eq(q.sym_size(0)), kOp,
                  ": k must have the batch size b of q (q: ", q.sym_sizes(), ", k: ", k.sym_sizes(),
                  ")");
  TORCH_SYM_CHECK(k.sym_size(3).sym_eq(q.sym_size(3)), kOp,
                  ": k must have the head dim d of q (q: ", q.sym_sizes(), ", k: ", k.sym_sizes(),
                  ")");
  TORCH_SYM_CHECK(k.sym_size(2).sym_ge(1), kOp,
                  ": k must have at least one head (h_kv >= 1), got k: ", k.sym_sizes());
  TORCH_SYM_CHECK((q.sym_size(2) % k.sym_size(2)).sym_eq(0), kOp,
                  ": q's head count h must be a multiple of k's head count h_kv (grouped-query "
                  "attention) (q: ",
                  q.sym_sizes(), ", k: ", k.sym_sizes(), ")");
  TORCH_SYM_CHECK(same_sizes(v, k), kOp, ": v must have the shape of k (k: ", k.sym_sizes(),
                  ", v: ", v.sym_sizes(), ")");
  check_contiguous(kOp, "q", q);
  check_contiguous(kOp, "k", k);
  check_contiguous(kOp, "v", v);
  return {q.sym_size(0), q.sym_size(1), q.sym_size(2), q.sym_size(3)};
}

namespace {

std::tuple<at::Tensor, at::Tensor> ring_attention_meta(const at::Tensor& q, const at::Tensor& k,
                                                       const at::Tensor& v, int64_t group,
                                                       int64_t world_size, bool /*causal*/,
                                                       std::optional<double> softmax_scale) {
  const RingAttentionSizes sizes =
      validate_ring_attention(q, k, v, group, world_size, softmax_scale);
  at::Tensor out = q.new_empty_symint({sizes.batch, sizes.seq, sizes.heads, sizes.head_dim});
  at::Tensor lse =
      q.new_empty_symint({sizes.batch, sizes.heads, sizes.seq}, q.options().dtype(at::kFloat));
  return {out, lse};
}

std::tuple<at::Tensor, at::Tensor> ring_attention_cpu(const at::Tensor& q, const at::Tensor& k,
                                                      const at::Tensor& v, int64_t group,
                                                      int64_t world_size, bool /*causal*/,
                                                      std::optional<double> softmax_scale) {
  validate_ring_attention(q, k, v, group, world_size, softmax_scale);
  TORCH_CHECK_NOT_IMPLEMENTED(false, kOp, ": the CPU reference kernel has not landed yet");
}

#ifdef MKERNEL_WITH_CUDA
std::tuple<at::Tensor, at::Tensor> ring_attention_cuda(const at::Tensor& q, const at::Tensor& k,
                                                       const at::Tensor& v, int64_t group,
                                                       int64_t world_size, bool /*causal*/,
                                                       std::optional<double> softmax_scale) {
  validate_ring_attention(q, k, v, group, world_size, softmax_scale);
  TORCH_CHECK_NOT_IMPLEMENTED(false, kOp, ": the CUDA kernel has not landed yet");
}
#endif  // MKERNEL_WITH_CUDA

}  // namespace

TORCH_LIBRARY_IMPL(mkernel, Meta, m) { m.impl("ring_attention", &ring_attention_meta); }
TORCH_LIBRARY_IMPL(mkernel, CPU, m) { m.impl("ring_attention", &ring_attention_cpu); }
#ifdef MKERNEL_WITH_CUDA
TORCH_LIBRARY_IMPL(mkernel, CUDA, m) { m.impl("ring_attention", &ring_attention_cuda); }
#endif  // MKERNEL_WITH_CUDA

}  // namespace mkernel
