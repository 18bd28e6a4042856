// mkernel::attention_backward_sdpa: mkernel.attention's backward on torch's SDPA backward kernels
// (cuDNN's where it takes the problem, else FlashAttention-2's), fed with the engine's forward
// out and lse — what python/mkernel/ops.py runs wherever the engine's native backward does not
// (ops._attention_backward_auto).
//
//   (dout, q, k, v, out, lse, causal, softmax_scale, kernel) -> (dq, dk, dv)
//   q/out/dout [b, s, h, d], k/v [b, s_kv, h_kv, d] (GQA), lse [b, h, s] fp32 natural log;
//   dq, dk, dv in q's / k's / v's dtype and shapes, GQA gradients summed over each kv head's
//   query heads. kernel: 0 cuDNN's where it applies, else FA2's; 1 FA2's; 2 cuDNN's (the
//   caller vouches that it applies; benchmarks pin it).
// mkernel::attention_backward_sdpa_kernel(q, k, v, causal) -> 0 (cuDNN's) or 1 (FA2's): the
//   choice kernel 0 makes.
//
// Why C++: the same dozen tensor calls issued from Python cost 110-210 us of host time a
// backward on the device's host (session 42, benchmarks/attention_bwd_host.py: each torch call
// from Python ~10 us there), which counts wherever the GPU waits on the host.
//
// Both kernels are bottom-right causal only when s == s_kv for cuDNN (its mask is top-left
// aligned; FA2's bottom-right like the engine), so a causal problem with s != s_kv takes FA2's.
// GQA runs on k / v expanded to h heads (neither backward takes grouped heads here).
// CUDA only; a Meta kernel gives the shapes.
#include <ATen/ATen.h>
#include <torch/library.h>

#include <tuple>

#ifdef MKERNEL_WITH_CUDA
#include <ATen/Context.h>
#include <ATen/native/transformers/cuda/sdp_utils.h>
#include <c10/cuda/CUDAGuard.h>

#include <map>
#include <mutex>
#include <vector>
#endif  // MKERNEL_WITH_CUDA

namespace mkernel {
namespace {

constexpr const char* kSdpaOp = "mkernel.attention_backward_sdpa";

void validate_sdpa_backward(const at::Tensor& dout, const at::Tensor& q, const at::Tensor& k,
                            const at::Tensor& v, const at::Tensor& out, const at::Tensor& lse) {
  TORCH_CHECK_VALUE(q.dim() == 4 && k.dim() == 4 && k.sizes() == v.sizes(), kSdpaOp,
                    ": q, k and v must be [b, s, h, d], [b, s_kv, h_kv, d] (k and v alike), got q ",
                    q.sizes(), ", k ", k.sizes(), ", v ", v.sizes());
  TORCH_CHECK_VALUE(k.size(0) == q.size(0) && k.size(3) == q.size(3) && k.size(2) >= 1 &&
                        q.size(2) % k.size(2) == 0,
                    kSdpaOp, ": k must have q's b and d and a divisor of its heads, got q ",
                    q.sizes(), ", k ", k.sizes());
  TORCH_CHECK_VALUE(out.sizes() == q.sizes() && dout.sizes() == q.sizes(), kSdpaOp,
                    ": out and dout must have q's shape ", q.sizes(), ", got out ", out.sizes(),
                    ", dout ", dout.sizes());
  TORCH_CHECK_VALUE(lse.dim() == 3 && lse.size(0) == q.size(0) && lse.size(1) == q.size(2) &&
                        lse.size(2) == q.size(1) && lse.scalar_type() == at::kFloat,
                    kSdpaOp, ": lse must be float32 [b, h, s] = [", q.size(0), ", ", q.size(2),
                    ", ", q.size(1), "], got ", lse.scalar_type(), " ", lse.sizes());
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> attention_backward_sdpa_meta(
    const at::Tensor& dout, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
    const at::Tensor& out, const at::Tensor& lse, bool /*causal*/, double /*softmax_scale*/,
    int64_t /*kernel*/) {
  validate_sdpa_backward(dout, q, k, v, out, lse);
  return {at::empty_like(q), at::empty_like(k), at::empty_like(v)};
}

#ifdef MKERNEL_WITH_CUDA
enum Kernel : int64_t { kAuto = 0, kFlash = 1, kCudnn = 2 };

// Whether cuDNN's SDPA backward takes this problem (torch's own check, sdp::can_use_cudnn_attention,
// on k / v of the expanded [b, s_kv, h, d] shape the call runs with). The check builds stand-ins
// and walks torch's constraints: its answer is kept per key (sizes, strides, dtype, device,
// causal, and the global switches it reads), as python/mkernel/ops.py's _cudnn_backward_applies
// keeps its own.
bool cudnn_applies(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, bool causal) {
  if (causal && q.size(1) != k.size(1)) return false;  // cuDNN's mask is top-left aligned
  const at::Context& ctx = at::globalContext();
  std::vector<int64_t> key;
  key.reserve(32);
  key.push_back(q.device().index());
  key.push_back(static_cast<int64_t>(q.scalar_type()));
  for (const at::Tensor* t : {&q, &k, &v}) {
    key.insert(key.end(), t->sizes().begin(), t->sizes().end());
    key.insert(key.end(), t->strides().begin(), t->strides().end());
  }
  key.push_back(causal ? 1 : 0);
  key.push_back(ctx.userEnabledCuDNNSDP() ? 1 : 0);
  key.push_back(ctx.deterministicAlgorithms() ? 1 : 0);
  static std::mutex mu;
  static std::map<std::vector<int64_t>, bool> known;
  const std::lock_guard<std::mutex> lock(mu);
  if (auto it = known.find(key); it != known.end()) return it->second;
  at::Tensor ke = k, ve = v;
  if (k.size(2) != q.size(2)) {  // uninitialised stand-ins: the check reads metadata only
    ke = ve = at::empty({k.size(0), k.size(1), q.size(2), k.size(3)}, k.options());
  }
  const sdp::sdp_params params{q.transpose(1, 2), ke.transpose(1, 2), ve.transpose(1, 2),
                               std::nullopt, 0.0, causal, false};
  const bool ok = sdp::can_use_cudnn_attention(params, /*debug=*/false);
  if (known.size() >= 1024) known.clear();
  known.emplace(std::move(key), ok);
  return ok;
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> attention_backward_sdpa_cuda(
    const at::Tensor& dout_in, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
    const at::Tensor& out, const at::Tensor& lse_in, bool causal, double softmax_scale,
    int64_t kernel) {
  validate_sdpa_backward(dout_in, q, k, v, out, lse_in);
  TORCH_CHECK_VALUE(kernel == kAuto || kernel == kFlash || kernel == kCudnn, kSdpaOp,
                    ": kernel must be 0 (auto), 1 (FA2) or 2 (cuDNN), got ", kernel);
  const c10::cuda::CUDAGuard guard(q.device());
  const int64_t s = q.size(1), h = q.size(2), s_kv = k.size(1), h_kv = k.size(2);
  const int64_t g = h / h_kv;
  const bool cudnn = kernel == kCudnn || (kernel == kAuto && cudnn_applies(q, k, v, causal));
  // dout with out's strides (cuDNN's requirement; out is the engine's dense output).
  const at::Tensor dout = dout_in.contiguous(), lse = lse_in.contiguous();
  const at::Tensor ke = g > 1 ? k.repeat_interleave(g, 2) : k;
  const at::Tensor ve = g > 1 ? v.repeat_interleave(g, 2) : v;
  // The philox seed / offset are read only with dropout (never here): an uninitialised scalar.
  const at::Tensor seed = at::empty({}, q.options().dtype(at::kLong));
  const at::Tensor none;  // attn_bias / cum_seq_q / cum_seq_k: none, the dense problem
  at::Tensor dq, dk, dv;
  if (cudnn) {
    std::tie(dq, dk, dv) = at::_scaled_dot_product_cudnn_attention_backward(
        dout.transpose(1, 2), q.transpose(1, 2), ke.transpose(1, 2), ve.transpose(1, 2),
        out.transpose(1, 2), lse.unsqueeze(-1), seed, seed, none, none, none, s, s_kv, 0.0,
        causal, softmax_scale);
  } else {
    std::tie(dq, dk, dv) = at::_scaled_dot_product_flash_attention_backward(
        dout.transpose(1, 2), q.transpose(1, 2), ke.transpose(1, 2), ve.transpose(1, 2),
        out.transpose(1, 2), lse, none, none, s, s_kv, 0.0, causal, seed, seed, softmax_scale);
  }
  dq = dq.transpose(1, 2);
  dk = dk.transpose(1, 2);
  dv = dv.transpose(1, 2);
  if (g > 1) {
    dk = dk.unflatten(2, {h_kv, g}).sum(3);
    dv = dv.unflatten(2, {h_kv, g}).sum(3);
  }
  return {dq, dk, dv};
}

int64_t attention_backward_sdpa_kernel_cuda(const at::Tensor& q, const at::Tensor& k,
                                            const at::Tensor& v, bool causal) {
  TORCH_CHECK_VALUE(q.dim() == 4 && k.dim() == 4 && k.sizes() == v.sizes(), kSdpaOp,
                    "_kernel: q, k and v must be 4-D, k and v alike, got q ", q.sizes(), ", k ",
                    k.sizes(), ", v ", v.sizes());
  return cudnn_applies(q, k, v, causal) ? 0 : 1;
}
#endif  // MKERNEL_WITH_CUDA

}  // namespace

TORCH_LIBRARY_IMPL(mkernel, Meta, m) {
  m.impl("attention_backward_sdpa", &attention_backward_sdpa_meta);
}
#ifdef MKERNEL_WITH_CUDA
TORCH_LIBRARY_IMPL(mkernel, CUDA, m) {
  m.impl("attention_backward_sdpa", &attention_backward_sdpa_cuda);
  m.impl("attention_backward_sdpa_kernel", &attention_backward_sdpa_kernel_cuda);
}
#endif  // MKERNEL_WITH_CUDA

}  // namespace mkernel
