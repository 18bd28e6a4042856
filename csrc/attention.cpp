// mkernel.attention: the attention engine at world size 1.
//
//   q [b, s, h, d], k and v [b, s_kv, h_kv, d] (h % h_kv == 0: GQA/MQA)
//     ->  out [b, s, h, d] in q's dtype, lse [b, h, s] fp32 (natural-log log-sum-exp of the
//         scaled scores)
//
// Causal masking is bottom-right aligned (FlashAttention's convention): query i sees keys
// j <= i + s_kv - s; a query that sees no key gets out = 0 and lse = -inf.
//
// Holds the op's validator and its Meta, CPU-reference and CUDA kernels. The CUDA kernel is
// the engine of csrc/kernels/attention/ (bf16/fp16, d 64 or 128); the CPU kernel is the fp32
// reference the tests and the host paths use (fp32, bf16 and fp16 inputs, any d).
#include <ATen/ATen.h>
#include <torch/library.h>

#include <cmath>
#include <limits>
#include <optional>
#include <string>
#include <tuple>

#include "ops_validation.h"

#ifdef MKERNEL_WITH_CUDA
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>

#include "kernels/attention/attention_api.h"
#endif  // MKERNEL_WITH_CUDA

namespace mkernel {
namespace {

constexpr const char* kOp = "mkernel.attention";

struct AttentionSizes {
  c10::SymInt batch, seq, heads, head_dim;
};

AttentionSizes validate_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                  std::optional<double> softmax_scale) {
  using namespace validation;
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
  TORCH_SYM_CHECK(q.sym_size(1).sym_ge(1), kOp, ": q must have at least one query (s >= 1), got q: ",
                  q.sym_sizes());
  TORCH_SYM_CHECK(k.sym_size(1).sym_ge(1), kOp, ": k must have at least one key (s_kv >= 1), got k: ",
                  k.sym_sizes());
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
  if (targets_cuda(q)) {
    TORCH_SYM_CHECK(q.sym_size(3).sym_eq(64).sym_or(q.sym_size(3).sym_eq(128)), kOp,
                    ": the CUDA kernel supports head dims 64 and 128, got q: ", q.sym_sizes());
  }
  return {q.sym_size(0), q.sym_size(1), q.sym_size(2), q.sym_size(3)};
}

double resolve_scale(std::optional<double> softmax_scale, int64_t head_dim) {
  return softmax_scale.has_value() ? *softmax_scale : 1.0 / std::sqrt(static_cast<double>(head_dim));
}

std::tuple<at::Tensor, at::Tensor> attention_meta(const at::Tensor& q, const at::Tensor& k,
                                                  const at::Tensor& v, bool /*causal*/,
                                                  std::optional<double> softmax_scale) {
  const AttentionSizes sizes = validate_attention(q, k, v, softmax_scale);
  at::Tensor out = q.new_empty_symint({sizes.batch, sizes.seq, sizes.heads, sizes.head_dim});
  at::Tensor lse =
      q.new_empty_symint({sizes.batch, sizes.heads, sizes.seq}, q.options().dtype(at::kFloat));
  return {out, lse};
}

// The fp32 reference: per (batch, head) the scores in fp32, bottom-right causal mask,
// log-sum-exp, probabilities, P·V. Rows that see no key: out 0, lse -inf.
std::tuple<at::Tensor, at::Tensor> attention_cpu(const at::Tensor& q, const at::Tensor& k,
                                                 const at::Tensor& v, bool causal,
                                                 std::optional<double> softmax_scale) {
  validate_attention(q, k, v, softmax_scale);
  const int64_t s = q.size(1), h = q.size(2), d = q.size(3);
  const int64_t s_kv = k.size(1), h_kv = k.size(2);
  const double scale = resolve_scale(softmax_scale, d);
  const at::Tensor qf = q.to(at::kFloat).permute({0, 2, 1, 3});  // [b, h, s, d]
  at::Tensor kf = k.to(at::kFloat).permute({0, 2, 1, 3});        // [b, h_kv, s_kv, d]
  at::Tensor vf = v.to(at::kFloat).permute({0, 2, 1, 3});
  if (h_kv != h) {  // query head i reads kv head i / (h / h_kv)
    kf = kf.repeat_interleave(h / h_kv, 1);
    vf = vf.repeat_interleave(h / h_kv, 1);
  }
  at::Tensor scores = at::matmul(qf, kf.transpose(-2, -1)).mul_(scale);  // [b, h, s, s_kv]
  if (causal) {
    const at::Tensor rows = at::arange(s, q.options().dtype(at::kLong)).unsqueeze(1);
    const at::Tensor cols = at::arange(s_kv, q.options().dtype(at::kLong)).unsqueeze(0);
    const at::Tensor masked = cols.gt(rows + (s_kv - s));  // [s, s_kv]
    scores.masked_fill_(masked, -std::numeric_limits<float>::infinity());
  }
  at::Tensor lse = at::logsumexp(scores, -1);  // [b, h, s]; -inf for rows that see no key
  const at::Tensor empty = lse.isneginf().unsqueeze(-1);
  at::Tensor probs = at::exp(scores - lse.unsqueeze(-1)).masked_fill_(empty, 0.0);
  at::Tensor out = at::matmul(probs, vf).permute({0, 2, 1, 3}).contiguous().to(q.scalar_type());
  return {out, lse.contiguous()};
}

#ifdef MKERNEL_WITH_CUDA
std::tuple<at::Tensor, at::Tensor> attention_cuda(const at::Tensor& q, const at::Tensor& k,
                                                  const at::Tensor& v, bool causal,
                                                  std::optional<double> softmax_scale) {
  validate_attention(q, k, v, softmax_scale);
  validation::check_dtype_in(kOp, "q", q, {at::kBFloat16, at::kHalf}, "activations");
  const c10::cuda::CUDAGuard guard(q.device());
  const int64_t b = q.size(0), s = q.size(1), h = q.size(2), d = q.size(3);
  at::Tensor out = at::empty_like(q);
  at::Tensor lse = at::empty({b, h, s}, q.options().dtype(at::kFloat));
  attention::Problem p{};
  p.q = q.data_ptr();
  p.k = k.data_ptr();
  p.v = v.data_ptr();
  p.out = out.data_ptr();
  p.lse = lse.data_ptr<float>();
  p.batch = static_cast<int>(b);
  p.seq_q = static_cast<int>(s);
  p.seq_kv = static_cast<int>(k.size(1));
  p.heads = static_cast<int>(h);
  p.heads_kv = static_cast<int>(k.size(2));
  p.head_dim = static_cast<int>(d);
  p.softmax_scale = static_cast<float>(resolve_scale(softmax_scale, d));
  p.causal = causal;
  p.dtype = q.scalar_type() == at::kBFloat16 ? attention::DType::kBF16 : attention::DType::kFP16;
  attention::Launch launch;
  launch.stream = at::cuda::getCurrentCUDAStream();
  const char* reason = nullptr;
  const cudaError_t err = attention::run(p, launch, &reason);
  TORCH_CHECK(err == cudaSuccess, kOp, ": kernel launch failed: ", cudaGetErrorString(err),
              reason ? std::string(" / ") + reason : std::string());
  return {out, lse};
}
#endif  // MKERNEL_WITH_CUDA

}  // namespace

TORCH_LIBRARY_IMPL(mkernel, Meta, m) { m.impl("attention", &attention_meta); }
TORCH_LIBRARY_IMPL(mkernel, CPU, m) { m.impl("attention", &attention_cpu); }
#ifdef MKERNEL_WITH_CUDA
TORCH_LIBRARY_IMPL(mkernel, CUDA, m) { m.impl("attention", &attention_cuda); }
#endif  // MKERNEL_WITH_CUDA

}  // namespace mkernel
