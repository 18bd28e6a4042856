// mkernel.ring_attention: attention over a sequence sharded across the ranks (context
// parallelism): the K/V shards circulate around the ring while each rank attends its local
// queries to them.
//
//   q [b, s, h, d], k and v [b, s_kv, h_kv, d] (local sequence shards; h % h_kv == 0, GQA)
//     ->  out [b, s, h, d] in q's dtype, lse [b, h, s] fp32 (log-sum-exp of the scores)
//
// Holds the op's validator and its Meta, CPU-reference and CUDA kernels.
#include <ATen/ATen.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/library.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include <cmath>
#include <optional>
#include <tuple>

#include "attention_reference.h"
#include "host_reference.h"
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
  check_attention_operands(kOp, q, k, v, softmax_scale);
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

// Global sequence positions of a rank's local shard of length s. Causal ring attention uses
// the zigzag (load-balanced) layout: the global sequence (W * s tokens) is cut into 2W chunks
// of s / 2, and rank r holds chunks r and 2W - 1 - r, in that order (so every rank has the
// same causal work). At W = 1 it is the natural order.
at::Tensor zigzag_positions(int64_t s, int rank, int world, const at::TensorOptions& opts) {
  const int64_t c = s / 2;
  const at::Tensor i = at::arange(c, opts.dtype(at::kLong));
  return at::cat({i + rank * c, i + (2 * world - 1 - rank) * c});
}

// The host reference at world_size > 1 (protocol: host_reference.h): every rank sends its k
// and v shards to every peer (phase A), then attends its queries to the whole sequence in
// fp32, keys ordered by rank (and, causal, masked by zigzag positions).
std::tuple<at::Tensor, at::Tensor> ring_attention_host(const at::Tensor& q, const at::Tensor& k,
                                                       const at::Tensor& v, int64_t group,
                                                       int64_t world_size, bool causal,
                                                       double scale) {
  const int64_t b = q.size(0), s = q.size(1), s_kv = k.size(1), h_kv = k.size(2), d = k.size(3);
  host::Call call(kOp, group, world_size);
  const int rank = call.rank(), world = call.world();
  const uint64_t kv_bytes = static_cast<uint64_t>(k.numel()) * k.element_size();
  host::CallInfo info{host::OpKind::kRingAttention,
                      q.scalar_type(),
                      {b, s_kv, h_kv, d},
                      0b1111u,
                      {"b", "s_kv (the local k/v shard length)", "h_kv", "d"},
                      world * 2 * kv_bytes,
                      2 * kv_bytes};
  call.begin(info);
  std::vector<uint8_t*> staged;
  for (int j = 1; j < world; ++j) {  // rank + 1 first: the first sends go to distinct peers
    const int peer = (rank + j) % world;
    uint8_t* stage = call.send_area(peer);
    if (std::find(staged.begin(), staged.end(), stage) == staged.end()) {
      std::memcpy(stage, k.data_ptr(), kv_bytes);
      std::memcpy(stage + kv_bytes, v.data_ptr(), kv_bytes);
      staged.push_back(stage);
    }
    call.send(peer, 0, rank * 2 * kv_bytes, 2 * kv_bytes, host::Arrival::kPhaseA);
  }
  std::vector<at::Tensor> ks, vs;
  for (int r = 0; r < world; ++r) {
    if (r == rank) {
      ks.push_back(k);
      vs.push_back(v);
      continue;
    }
    call.wait(r, host::Arrival::kPhaseA, "the k/v shard");
    uint8_t* at_r = call.recv_area(r) + r * 2 * kv_bytes;
    ks.push_back(at::from_blob(at_r, k.sizes(), k.options()).clone());
    vs.push_back(at::from_blob(at_r + kv_bytes, v.sizes(), v.options()).clone());
  }
  call.end();
  const at::Tensor k_all = at::cat(ks, 1), v_all = at::cat(vs, 1);
  at::Tensor q_pos, k_pos;
  if (causal) {
    const auto opts = q.options();
    q_pos = zigzag_positions(s, rank, world, opts);
    std::vector<at::Tensor> pos;
    for (int r = 0; r < world; ++r) pos.push_back(zigzag_positions(s_kv, r, world, opts));
    k_pos = at::cat(pos);
  } else {
    q_pos = at::zeros({s}, q.options().dtype(at::kLong));
    k_pos = at::zeros({world * s_kv}, q.options().dtype(at::kLong));
  }
  return reference_attention(q, k_all, v_all, causal, scale, q_pos, k_pos);
}

std::tuple<at::Tensor, at::Tensor> ring_attention_cpu(const at::Tensor& q, const at::Tensor& k,
                                                      const at::Tensor& v, int64_t group,
                                                      int64_t world_size, bool causal,
                                                      std::optional<double> softmax_scale) {
  validate_ring_attention(q, k, v, group, world_size, softmax_scale);
  if (causal && world_size > 1) {
    TORCH_CHECK_VALUE(q.size(1) == k.size(1) && q.size(1) % 2 == 0, kOp,
                      ": causal ring attention takes zigzag shards: q and k must have the same "
                      "even local length (q: ", q.sizes(), ", k: ", k.sizes(), ")");
  }
  const double scale = softmax_scale.has_value() ? *softmax_scale
                                                 : 1.0 / std::sqrt(static_cast<double>(q.size(3)));
  if (world_size == 1) {
    const auto pos = q.options().dtype(at::kLong);
    return reference_attention(q, k, v, causal, scale, at::arange(q.size(1), pos),
                               at::arange(k.size(1), pos));
  }
  return ring_attention_host(q, k, v, group, world_size, causal, scale);
}

#ifdef MKERNEL_WITH_CUDA
std::tuple<at::Tensor, at::Tensor> ring_attention_cuda(const at::Tensor& q, const at::Tensor& k,
                                                       const at::Tensor& v, int64_t group,
                                                       int64_t world_size, bool causal,
                                                       std::optional<double> softmax_scale) {
  validate_ring_attention(q, k, v, group, world_size, softmax_scale);
  if (world_size == 1) {  // the whole sequence is local: the attention engine
    static const auto engine =
        c10::Dispatcher::singleton()
            .findSchemaOrThrow("mkernel::attention", "")
            .typed<std::tuple<at::Tensor, at::Tensor>(const at::Tensor&, const at::Tensor&,
                                                      const at::Tensor&, bool,
                                                      std::optional<double>, int64_t, int64_t)>();
    return engine.call(q, k, v, causal, softmax_scale, 0, 0);
  }
  TORCH_CHECK_NOT_IMPLEMENTED(false, kOp, ": the fused CUDA ring at world_size > 1 has not "
                              "landed yet (world_size 1 runs the attention engine)");
}
#endif  // MKERNEL_WITH_CUDA

}  // namespace

TORCH_LIBRARY_IMPL(mkernel, Meta, m) { m.impl("ring_attention", &ring_attention_meta); }
TORCH_LIBRARY_IMPL(mkernel, CPU, m) { m.impl("ring_attention", &ring_attention_cpu); }
#ifdef MKERNEL_WITH_CUDA
TORCH_LIBRARY_IMPL(mkernel, CUDA, m) { m.impl("ring_attention", &ring_attention_cuda); }
#endif  // MKERNEL_WITH_CUDA

}  // namespace mkernel
