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
// the engine of csrc/kernels/attention/ (bf16/fp16, d 64 or 128); other head dims (multiples of
// 8 up to 256) run torch's FlashAttention-2 kernel instead (same conventions, one warning); the
// CPU kernel is the fp32 reference the tests and the host paths use (fp32, bf16 and fp16
// inputs, any d).
#include <cstdlib>
#include <ATen/ATen.h>
#include <torch/library.h>

#include <cmath>
#include <limits>
#include <optional>
#include <string>
#include <tuple>

#include "attention_reference.h"
#include "env_knobs.h"
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
  check_attention_operands(kOp, q, k, v, softmax_scale);
  TORCH_SYM_CHECK(q.sym_size(1).sym_ge(1), kOp, ": q must have at least one query (s >= 1), got q: ",
                  q.sym_sizes());
  TORCH_SYM_CHECK(k.sym_size(1).sym_ge(1), kOp, ": k must have at least one key (s_kv >= 1), got k: ",
                  k.sym_sizes());
  if (targets_cuda(q)) {
    TORCH_SYM_CHECK((q.sym_size(3) % 8).sym_eq(0).sym_and(q.sym_size(3).sym_le(256)), kOp,
                    ": on CUDA the head dim must be a multiple of 8 up to 256 (the engine's 64 and "
                    "128; the others through torch's FlashAttention-2 kernel), got q: ",
                    q.sym_sizes());
  }
  return {q.sym_size(0), q.sym_size(1), q.sym_size(2), q.sym_size(3)};
}

}  // namespace

std::tuple<at::Tensor, at::Tensor> reference_attention(const at::Tensor& q, const at::Tensor& k,
                                                       const at::Tensor& v, bool causal,
                                                       double scale, const at::Tensor& q_pos,
                                                       const at::Tensor& k_pos) {
  const int64_t h = q.size(2), h_kv = k.size(2);
  const at::Tensor qf = q.to(at::kFloat).permute({0, 2, 1, 3});  // [b, h, s, d]
  at::Tensor kf = k.to(at::kFloat).permute({0, 2, 1, 3});        // [b, h_kv, s_kv, d]
  at::Tensor vf = v.to(at::kFloat).permute({0, 2, 1, 3});
  if (h_kv != h) {  // query head i reads kv head i / (h / h_kv)
    kf = kf.repeat_interleave(h / h_kv, 1);
    vf = vf.repeat_interleave(h / h_kv, 1);
  }
  at::Tensor scores = at::matmul(qf, kf.transpose(-2, -1)).mul_(scale);  // [b, h, s, s_kv]
  if (causal) {
    const at::Tensor masked = k_pos.unsqueeze(0).gt(q_pos.unsqueeze(1));  // [s, s_kv]
    scores.masked_fill_(masked, -std::numeric_limits<float>::infinity());
  }
  at::Tensor lse = at::logsumexp(scores, -1);  // [b, h, s]; -inf for rows that see no key
  const at::Tensor empty = lse.isneginf().unsqueeze(-1);
  at::Tensor probs = at::exp(scores - lse.unsqueeze(-1)).masked_fill_(empty, 0.0);
  at::Tensor out = at::matmul(probs, vf).permute({0, 2, 1, 3}).contiguous().to(q.scalar_type());
  return {out, lse.contiguous()};
}

namespace {

double resolve_scale(std::optional<double> softmax_scale, int64_t head_dim) {
  return softmax_scale.has_value() ? *softmax_scale : 1.0 / std::sqrt(static_cast<double>(head_dim));
}

std::tuple<at::Tensor, at::Tensor> attention_meta(const at::Tensor& q, const at::Tensor& k,
                                                  const at::Tensor& v, bool /*causal*/,
                                                  std::optional<double> softmax_scale,
                                                  int64_t /*block_m*/, int64_t /*block_n*/) {
  const AttentionSizes sizes = validate_attention(q, k, v, softmax_scale);
  at::Tensor out = q.new_empty_symint({sizes.batch, sizes.seq, sizes.heads, sizes.head_dim});
  at::Tensor lse =
      q.new_empty_symint({sizes.batch, sizes.heads, sizes.seq}, q.options().dtype(at::kFloat));
  return {out, lse};
}

// The fp32 reference (attention_cpu and ring_attention's host path): scores in fp32 per
// (batch, head), masked where key position > query position when causal, log-sum-exp,
// probabilities, P·V. Rows that see no key: out 0, lse -inf.
std::tuple<at::Tensor, at::Tensor> attention_cpu(const at::Tensor& q, const at::Tensor& k,
                                                 const at::Tensor& v, bool causal,
                                                 std::optional<double> softmax_scale,
                                                 int64_t /*block_m*/, int64_t /*block_n*/) {
  validate_attention(q, k, v, softmax_scale);
  const int64_t s = q.size(1), s_kv = k.size(1);
  const auto pos = q.options().dtype(at::kLong);
  // Bottom-right alignment: query i sits at key position i + s_kv - s.
  return reference_attention(q, k, v, causal, resolve_scale(softmax_scale, q.size(3)),
                             at::arange(s, pos) + (s_kv - s), at::arange(s_kv, pos));
}

#ifdef MKERNEL_WITH_CUDA
std::tuple<at::Tensor, at::Tensor> launch_engine(const at::Tensor& q, const at::Tensor& k,
                                                 const at::Tensor& v, bool causal,
                                                 std::optional<double> softmax_scale,
                                                 int64_t block_m, int64_t block_n,
                                                 const attention::HookArgs* hooks) {
  TORCH_CHECK_VALUE(block_m >= 0 && block_m <= 256 && block_n >= 0 && block_n <= 256, kOp,
                    ": block_m and block_n must be 0 (by shape) or a built tile (128x128; 192x128 "
                    "bf16 d=64 non-causal; 128x160, 256x160 bf16 d=128 non-causal; 256x128 bf16 d=128), got ", block_m, "x",
                    block_n);
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
  p.block_m = static_cast<int>(block_m);
  p.block_n = static_cast<int>(block_n);
  // Measurement switch (benchmarks/bench_attention.py --variants): MKERNEL_ATTN_VARIANT=N runs
  // mainloop variant N (attention_variants_*.cu) for the calls it is built for (plain, bf16,
  // d = 128, the 128x128 tile); every other call ignores it.
  if (hooks == nullptr && p.dtype == attention::DType::kBF16 && d == 128 &&
      (block_m == 0 || block_m == 128) && (block_n == 0 || block_n == 128)) {
    if (const char* var = env::get("MKERNEL_ATTN_VARIANT")) p.variant = std::atoi(var);
  }
  // Measurement switch (benchmarks/attention_power.py): the forward's L2 section budget.
  if (const char* mb = env::get("MKERNEL_ATTN_L2_SECTION_MB")) {
    p.l2_section_mb = std::atoi(mb);
    TORCH_CHECK_VALUE(p.l2_section_mb > 0, kOp,
                      ": MKERNEL_ATTN_L2_SECTION_MB must be a positive integer (MiB), got '", mb, "'");
  }
  // Variant bit 11 (split tail, attention_api.h kSplitTailBit): one fp32 workspace piece per
  // CTA of the persistent grid (at most the SM count), from the caching allocator.
  at::Tensor split_ws;
  if (hooks == nullptr && attention::uses_split_tail(p)) {
    const int sms = at::cuda::getCurrentDeviceProperties()->multiProcessorCount;
    split_ws = at::empty({static_cast<int64_t>(sms) * attention::split_ws_floats_per_piece(static_cast<int>(d))},
                         q.options().dtype(at::kFloat));
    p.split_ws = split_ws.data_ptr<float>();
    p.split_ws_pieces = sms;
  }
  // Variant bit 12 (claimed tiles, attention_api.h kClaimTilesBit): a claim counter per call
  // (the launch zeroes it on the stream), from the caching allocator.
  at::Tensor tile_counter;
  if (hooks == nullptr && attention::uses_tile_counter(p)) {
    tile_counter = at::empty({1}, q.options().dtype(at::kInt));
    p.tile_counter = tile_counter.data_ptr<int>();
  }
  attention::Launch launch;
  launch.stream = at::cuda::getCurrentCUDAStream();
  const char* reason = nullptr;
  const cudaError_t err = hooks != nullptr ? attention::run_hooked(p, launch, *hooks, &reason)
                                           : attention::run(p, launch, &reason);
  TORCH_CHECK_VALUE(reason == nullptr, kOp, ": ", reason, " (dtype ", q.scalar_type(), ", d ", d,
                    ", causal ", causal, ", tile ", block_m, "x", block_n, ")");
  TORCH_CHECK(err == cudaSuccess, kOp, ": kernel launch failed: ", cudaGetErrorString(err));
  return {out, lse};
}

// Head dims the engine is not built for (validate_attention: multiples of 8 up to 256 other than
// 64 and 128): torch's FlashAttention-2 forward, which keeps the op's conventions — bottom-right
// causal, the natural-log lse [b, h, s] the backward reads (mkernel.ops._attention_backward_*
// take d <= 256) — but for a row that sees no key, where FA2 writes lse = +inf and the op's
// contract (the engine's, the reference's) says -inf. GQA: k / v expanded to h heads.
std::tuple<at::Tensor, at::Tensor> attention_fa2(const at::Tensor& q, const at::Tensor& k,
                                                 const at::Tensor& v, bool causal,
                                                 std::optional<double> softmax_scale,
                                                 int64_t block_m, int64_t block_n) {
  const int64_t b = q.size(0), s = q.size(1), h = q.size(2), d = q.size(3);
  TORCH_CHECK_VALUE(block_m == 0 && block_n == 0, kOp,
                    ": block_m / block_n choose the engine's tile, built for head dims 64 and 128; "
                    "d = ",
                    d, " runs torch's FlashAttention-2 kernel: leave them 0, got ", block_m, "x",
                    block_n);
  TORCH_WARN_ONCE(kOp, ": head dim ", d,
                  " runs torch's FlashAttention-2 kernel (the engine is built for 64 and 128)");
  validation::check_dtype_in(kOp, "q", q, {at::kBFloat16, at::kHalf}, "activations");
  const c10::cuda::CUDAGuard guard(q.device());
  const int64_t g = h / k.size(2);
  const at::Tensor ke = g > 1 ? k.repeat_interleave(g, 2) : k;
  const at::Tensor ve = g > 1 ? v.repeat_interleave(g, 2) : v;
  auto res = at::_scaled_dot_product_flash_attention(q.transpose(1, 2), ke.transpose(1, 2),
                                                     ve.transpose(1, 2), 0.0, causal, false,
                                                     resolve_scale(softmax_scale, d));
  at::Tensor out = std::get<0>(res).transpose(1, 2).contiguous();
  at::Tensor lse = std::get<1>(res).narrow(2, 0, s).contiguous();
  lse.masked_fill_(lse.isposinf(), -std::numeric_limits<float>::infinity());
  TORCH_CHECK(out.sizes() == q.sizes() && lse.size(0) == b && lse.size(1) == h, kOp,
              ": torch's FlashAttention-2 kernel returned out ", out.sizes(), ", lse ", lse.sizes(),
              " for q ", q.sizes());
  return {out, lse};
}

std::tuple<at::Tensor, at::Tensor> attention_cuda(const at::Tensor& q, const at::Tensor& k,
                                                  const at::Tensor& v, bool causal,
                                                  std::optional<double> softmax_scale,
                                                  int64_t block_m, int64_t block_n) {
  validate_attention(q, k, v, softmax_scale);
  for (const auto& [name, t] :
       {std::pair<const char*, const at::Tensor&>{"q", q}, {"k", k}, {"v", v}})
    validation::check_aligned16(kOp, name, t);
  if (q.size(0) == 0) {  // an empty batch: empty results, as the CPU reference and SDPA give
    validation::check_dtype_in(kOp, "q", q, {at::kBFloat16, at::kHalf}, "activations");
    return {at::empty_like(q), at::empty({0, q.size(2), q.size(1)}, q.options().dtype(at::kFloat))};
  }
  if (q.size(3) != 64 && q.size(3) != 128) {
    return attention_fa2(q, k, v, causal, softmax_scale, block_m, block_n);
  }
  return launch_engine(q, k, v, causal, softmax_scale, block_m, block_n, nullptr);
}

std::tuple<at::Tensor, at::Tensor> attention_hooked_cuda(
    const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& kv_ready,
    int64_t kv_ready_value, int64_t blocks_per_flag, bool causal,
    std::optional<double> softmax_scale, double timeout_s) {
  validate_attention(q, k, v, softmax_scale);
  constexpr const char* op = "mkernel.attention_hooked";
  TORCH_CHECK_VALUE(kv_ready.scalar_type() == at::kLong && kv_ready.is_contiguous() &&
                        kv_ready.device() == q.device(),
                    op, ": kv_ready must be a contiguous int64 tensor on q's device");
  TORCH_CHECK_VALUE(blocks_per_flag >= 1, op, ": blocks_per_flag must be >= 1");
  TORCH_CHECK_VALUE(timeout_s > 0, op, ": timeout_s must be > 0");
  const int64_t heads_kv = k.size(0) * k.size(2);
  const int64_t n_blocks = (k.size(1) + attention::block_n(static_cast<int>(q.size(3))) - 1) /
                           attention::block_n(static_cast<int>(q.size(3)));
  const int64_t flags_per_head = (n_blocks + blocks_per_flag - 1) / blocks_per_flag;
  TORCH_CHECK_VALUE(kv_ready.numel() == heads_kv * flags_per_head, op, ": kv_ready must hold b * "
                    "h_kv * ceil(ceil(s_kv / block_n) / blocks_per_flag) = ",
                    heads_kv * flags_per_head, " flags, got ", kv_ready.numel());
  attention::HookArgs hooks;
  hooks.kv_ready = reinterpret_cast<const uint64_t*>(kv_ready.data_ptr<int64_t>());
  hooks.blocks_per_flag = static_cast<int>(blocks_per_flag);
  hooks.flags_per_head = static_cast<int>(flags_per_head);
  hooks.kv_ready_value = static_cast<uint64_t>(kv_ready_value);
  hooks.timeout_s = timeout_s;
  hooks.diag = nullptr;  // a timed-out wait traps without a record here (the ring op passes its group's)
  // The ring's opt-in split mainloop (HookArgs::split_masked), reachable here for its tests.
  if (const char* split = env::get("MKERNEL_RING_SPLIT_MASK")) hooks.split_masked = split[0] == '1';
  // ring12's opt-in flag skip (HookArgs::skip_seen_flags), reachable here for its tests.
  if (const char* skip = env::get("MKERNEL_RING_FLAG_SKIP")) hooks.skip_seen_flags = skip[0] == '1';
  // The ring's flag cache (HookArgs::remember_flags), likewise opt-in here.
  if (const char* cache = env::get("MKERNEL_RING_FLAG_CACHE"))
    hooks.remember_flags = cache[0] == '1';
  return launch_engine(q, k, v, causal, softmax_scale, 0, 0, &hooks);
}
#endif  // MKERNEL_WITH_CUDA

void validate_merge(const at::Tensor& out, const at::Tensor& lse, const at::Tensor& out_part,
                    const at::Tensor& lse_part) {
  constexpr const char* op = "mkernel.attention_merge_";
  using namespace validation;
  check_dim(op, "out", out, 4, "[b, s, h, d]");
  check_dim(op, "lse", lse, 3, "[b, h, s]");
  check_dim(op, "out_part", out_part, 4, "[b, s, h, d]");
  check_dim(op, "lse_part", lse_part, 3, "[b, h, s]");
  TORCH_CHECK_VALUE(out.scalar_type() == at::kFloat && lse.scalar_type() == at::kFloat &&
                        lse_part.scalar_type() == at::kFloat,
                    op, ": out, lse and lse_part must be float32 (got ", out.scalar_type(), ", ",
                    lse.scalar_type(), ", ", lse_part.scalar_type(), ")");
  TORCH_SYM_CHECK(same_sizes(out_part, out), op, ": out_part must have the shape of out (",
                  out.sym_sizes(), "), got ", out_part.sym_sizes());
  TORCH_SYM_CHECK(same_sizes(lse_part, lse), op, ": lse_part must have the shape of lse (",
                  lse.sym_sizes(), "), got ", lse_part.sym_sizes());
  TORCH_SYM_CHECK(lse.sym_size(0).sym_eq(out.sym_size(0)).sym_and(lse.sym_size(1).sym_eq(out.sym_size(2)))
                      .sym_and(lse.sym_size(2).sym_eq(out.sym_size(1))),
                  op, ": lse must be [b, h, s] for out [b, s, h, d] (out: ", out.sym_sizes(),
                  ", lse: ", lse.sym_sizes(), ")");
  check_same_device(op, "lse", lse, "out", out);
  check_same_device(op, "out_part", out_part, "out", out);
  check_same_device(op, "lse_part", lse_part, "out", out);
  check_contiguous(op, "out", out);
  check_contiguous(op, "lse", lse);
  check_contiguous(op, "out_part", out_part);
  check_contiguous(op, "lse_part", lse_part);
}

void attention_merge_meta(at::Tensor& out, at::Tensor& lse, const at::Tensor& out_part,
                          const at::Tensor& lse_part) {
  validate_merge(out, lse, out_part, lse_part);
}

// lse' = log(e^lse + e^lse_part); out' = out·e^(lse - lse') + out_part·e^(lse_part - lse').
void attention_merge_cpu(at::Tensor& out, at::Tensor& lse, const at::Tensor& out_part,
                         const at::Tensor& lse_part) {
  validate_merge(out, lse, out_part, lse_part);
  const at::Tensor mx = at::maximum(lse, lse_part);
  const at::Tensor mx_safe = at::where(mx.isneginf(), at::zeros_like(mx), mx);
  const at::Tensor ea = at::exp(lse - mx_safe), ep = at::exp(lse_part - mx_safe);
  const at::Tensor sum = ea + ep;
  const at::Tensor empty = sum.eq(0);
  const at::Tensor wa = at::where(empty, at::zeros_like(sum), ea / sum);  // [b, h, s]
  const at::Tensor wp = at::where(empty, at::zeros_like(sum), ep / sum);
  out.mul_(wa.permute({0, 2, 1}).unsqueeze(-1))
      .add_(out_part.to(at::kFloat) * wp.permute({0, 2, 1}).unsqueeze(-1));
  lse.copy_(at::where(empty, mx, mx_safe + at::log(sum)));
}

#ifdef MKERNEL_WITH_CUDA
void attention_merge_cuda(at::Tensor& out, at::Tensor& lse, const at::Tensor& out_part,
                          const at::Tensor& lse_part) {
  validate_merge(out, lse, out_part, lse_part);
  validation::check_dtype_in("mkernel.attention_merge_", "out_part", out_part,
                             {at::kBFloat16, at::kHalf}, "a partial attention output");
  TORCH_CHECK_VALUE(out.size(3) % 4 == 0, "mkernel.attention_merge_: head dim must be a multiple "
                    "of 4, got ", out.size(3));
  const c10::cuda::CUDAGuard guard(out.device());
  attention::Merge m{};
  m.out_acc = out.data_ptr<float>();
  m.lse_acc = lse.data_ptr<float>();
  m.out_part = out_part.data_ptr();
  m.lse_part = lse_part.data_ptr<float>();
  m.batch = static_cast<int>(out.size(0));
  m.seq = static_cast<int>(out.size(1));
  m.heads = static_cast<int>(out.size(2));
  m.head_dim = static_cast<int>(out.size(3));
  m.part_dtype = out_part.scalar_type() == at::kBFloat16 ? attention::DType::kBF16
                                                          : attention::DType::kFP16;
  if (out.numel() == 0) return;
  const cudaError_t err = attention::merge_partial(m, at::cuda::getCurrentCUDAStream());
  TORCH_CHECK(err == cudaSuccess, "mkernel.attention_merge_: launch failed: ",
              cudaGetErrorString(err));
}
#endif  // MKERNEL_WITH_CUDA

std::tuple<at::Tensor, at::Tensor> attention_hooked_meta(
    const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& /*kv_ready*/,
    int64_t /*kv_ready_value*/, int64_t /*blocks_per_flag*/, bool causal,
    std::optional<double> softmax_scale, double /*timeout_s*/) {
  return attention_meta(q, k, v, causal, softmax_scale, 0, 0);
}

}  // namespace

TORCH_LIBRARY_IMPL(mkernel, Meta, m) {
  m.impl("attention", &attention_meta);
  m.impl("attention_hooked", &attention_hooked_meta);
  m.impl("attention_merge_", &attention_merge_meta);
}
TORCH_LIBRARY_IMPL(mkernel, CPU, m) {
  m.impl("attention", &attention_cpu);
  m.impl("attention_merge_", &attention_merge_cpu);
}
#ifdef MKERNEL_WITH_CUDA
TORCH_LIBRARY_IMPL(mkernel, CUDA, m) {
  m.impl("attention", &attention_cuda);
  m.impl("attention_hooked", &attention_hooked_cuda);
  m.impl("attention_merge_", &attention_merge_cuda);
}
#endif  // MKERNEL_WITH_CUDA

}  // namespace mkernel
