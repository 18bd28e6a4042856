// mkernel::attention_backward: the attention engine's native backward (opt-in from Python:
// MKERNEL_ATTN_BWD=native or mkernel.ops.ATTENTION_BACKWARD = "native"; python/mkernel/ops.py).
//
//   (dout, q, k, v, out, lse, causal, softmax_scale) -> (dq, dk, dv)
//   q/out/dout [b, s, h, d], k/v [b, s_kv, h_kv, d] (GQA), lse [b, h, s] fp32 (the forward's).
//
// mkernel::attention_backward_ring: the same over the K/V shards all-gathered from a ring of
// ring_world ranks (python/mkernel/_ring_backward.py), in one launch:
//   (dout, q, k_all, v_all, out, lse, causal, softmax_scale, ring_world, ring_rank)
//     -> (dq, dk_all, dv_all), k_all / dk_all [ring_world * b, s, h_kv, d] (dk_all, dv_all fp32:
//   partials the caller sums over the ranks), each source's visibility as ring attention's
//   zigzag layout has it (attention_bwd_api.h).
//
// CUDA only (bf16/fp16, d 64 or 128): kernels in csrc/kernels/attention/attention_bwd*.
// A Meta kernel gives the shapes; there is no CPU kernel (the CPU backward is the fp32 math of
// mkernel.ops._attention_backward_math).
#include "attention_backward.h"

#include <ATen/ATen.h>
#include <torch/library.h>

#include <tuple>

#ifdef MKERNEL_WITH_CUDA
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>

#include <cstdlib>
#include <cstring>

#include "env_knobs.h"
#include "kernels/attention/attention_bwd_api.h"
#endif  // MKERNEL_WITH_CUDA

namespace mkernel {
namespace {

constexpr const char* kBwdOp = "mkernel.attention_backward";

using Ring = BackwardRing;

void validate_backward(const at::Tensor& dout, const at::Tensor& q, const at::Tensor& k,
                       const at::Tensor& v, const at::Tensor& out, const at::Tensor& lse,
                       Ring ring = {}) {
  TORCH_CHECK_VALUE(q.dim() == 4 && k.dim() == 4 && v.dim() == 4, kBwdOp,
                    ": q, k and v must be 4-D ([b, s, h, d], [b, s_kv, h_kv, d]), got q ",
                    q.sizes(), ", k ", k.sizes(), ", v ", v.sizes());
  TORCH_CHECK_VALUE(k.sizes() == v.sizes(), kBwdOp, ": k and v must have the same shape, got k ",
                    k.sizes(), ", v ", v.sizes());
  if (!ring.on) {
    TORCH_CHECK_VALUE(k.size(0) == q.size(0) && k.size(3) == q.size(3), kBwdOp,
                      ": k must be [b, s_kv, h_kv, d] with q's b and d, got q ", q.sizes(), ", k ",
                      k.sizes());
  } else {
    TORCH_CHECK_VALUE(ring.world >= 1 && ring.rank >= 0 && ring.rank < ring.world, kBwdOp,
                      "_ring: ring_rank must be in [0, ring_world), got ", ring.rank, " of ",
                      ring.world);
    TORCH_CHECK_VALUE(
        k.size(0) == ring.world * q.size(0) && k.size(1) == q.size(1) && k.size(3) == q.size(3),
        kBwdOp,
        "_ring: k must be the all-gathered shards [ring_world * b, s, h_kv, d] "
        "with q's b, s and d, got q ",
        q.sizes(), ", k ", k.sizes(), ", ring_world ", ring.world);
  }
  TORCH_CHECK_VALUE(k.size(2) >= 1 && q.size(2) % k.size(2) == 0, kBwdOp,
                    ": q's heads must be a multiple of k's (GQA), got q ", q.sizes(), ", k ",
                    k.sizes());
  TORCH_CHECK_VALUE(out.sizes() == q.sizes() && dout.sizes() == q.sizes(), kBwdOp,
                    ": out and dout must have q's shape ", q.sizes(), ", got out ", out.sizes(),
                    ", dout ", dout.sizes());
  TORCH_CHECK_VALUE(lse.dim() == 3 && lse.size(0) == q.size(0) && lse.size(1) == q.size(2) &&
                        lse.size(2) == q.size(1),
                    kBwdOp, ": lse must be [b, h, s] = [", q.size(0), ", ", q.size(2), ", ",
                    q.size(1), "], got ", lse.sizes());
  TORCH_CHECK_VALUE(lse.scalar_type() == at::kFloat, kBwdOp, ": lse must be float32, got ",
                    lse.scalar_type());
  for (const at::Tensor* t : {&dout, &k, &v, &out}) {
    TORCH_CHECK_VALUE(t->scalar_type() == q.scalar_type(), kBwdOp,
                      ": dout, k, v and out must have q's dtype ", q.scalar_type(), ", got ",
                      t->scalar_type());
  }
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> attention_backward_meta(
    const at::Tensor& dout, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
    const at::Tensor& out, const at::Tensor& lse, bool /*causal*/, double /*softmax_scale*/) {
  validate_backward(dout, q, k, v, out, lse);
  return {at::empty_like(q), at::empty_like(k), at::empty_like(v)};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> attention_backward_ring_meta(
    const at::Tensor& dout, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
    const at::Tensor& out, const at::Tensor& lse, bool /*causal*/, double /*softmax_scale*/,
    int64_t ring_world, int64_t ring_rank) {
  validate_backward(dout, q, k, v, out, lse, Ring{true, ring_world, ring_rank});
  return {at::empty_like(q), at::empty_like(k, k.options().dtype(at::kFloat)),
          at::empty_like(v, v.options().dtype(at::kFloat))};
}

}  // namespace

#ifdef MKERNEL_WITH_CUDA
std::tuple<at::Tensor, at::Tensor, at::Tensor> run_native_backward(
    const at::Tensor& dout_in, const at::Tensor& q_in, const at::Tensor& k_in,
    const at::Tensor& v_in, const at::Tensor& out_in, const at::Tensor& lse_in, bool causal,
    double softmax_scale, const Ring& ring) {
  validate_backward(dout_in, q_in, k_in, v_in, out_in, lse_in, ring);
  TORCH_CHECK_VALUE(q_in.scalar_type() == at::kBFloat16 || q_in.scalar_type() == at::kHalf, kBwdOp,
                    ": q must be bf16 or fp16, got ", q_in.scalar_type());
  TORCH_CHECK_VALUE(q_in.size(3) == 64 || q_in.size(3) == 128, kBwdOp,
                    ": head dim must be 64 or 128, got ", q_in.size(3));
  for (const at::Tensor* t : {&dout_in, &k_in, &v_in, &out_in, &lse_in}) {
    TORCH_CHECK_VALUE(t->device() == q_in.device(), kBwdOp, ": every tensor must be on q's device ",
                      q_in.device(), ", got ", t->device());
  }
  const c10::cuda::CUDAGuard guard(q_in.device());
  // The kernels read dense [b, s, h, d] / [b, h, s] layouts from 16-byte aligned starts (TMA
  // boxes, the preprocess's vector loads): a view off a 16-byte boundary — autograd may pass one
  // as dout, and the caller cannot choose — is copied to fresh memory instead of faulting.
  const auto dense = [](const at::Tensor& t) {
    at::Tensor c = t.contiguous();
    return reinterpret_cast<uintptr_t>(c.data_ptr()) % 16 == 0 ? c : c.clone();
  };
  const at::Tensor q = dense(q_in), k = dense(k_in), v = dense(v_in);
  const at::Tensor out = dense(out_in), dout = dense(dout_in), lse = dense(lse_in);
  const int64_t b = q.size(0), s = q.size(1), h = q.size(2), d = q.size(3);
  at::Tensor dq = at::empty_like(q);
  // The ring mode's dk / dv are fp32 partials (summed over the ranks next); travelling, they go
  // to the sources' receive areas instead.
  const auto fp32 = k.options().dtype(at::kFloat);
  at::Tensor dk = ring.travel() ? at::empty({0}, fp32)
                  : ring.on     ? at::empty_like(k, fp32)
                                : at::empty_like(k);
  at::Tensor dv = ring.travel() ? at::empty({0}, fp32)
                  : ring.on     ? at::empty_like(v, fp32)
                                : at::empty_like(v);
  // Workspaces: dQ's fp32 accumulator (rows padded to 64; zeroed by the preprocess kernel) and
  // D = rowsum(dO ∘ O) [b, h, s].
  at::Tensor dq_accum =
      at::empty({attention::dq_accum_floats(b, h, s, d)}, q.options().dtype(at::kFloat));
  at::Tensor delta = at::empty({b, h, s}, q.options().dtype(at::kFloat));

  attention::BwdProblem p{};
  p.q = q.data_ptr();
  p.k = k.data_ptr();
  p.v = v.data_ptr();
  p.out = out.data_ptr();
  p.dout = dout.data_ptr();
  p.lse = lse.data_ptr<float>();
  p.dq = dq.data_ptr();
  p.dk = ring.travel() ? nullptr : dk.data_ptr();
  p.dv = ring.travel() ? nullptr : dv.data_ptr();
  p.dq_accum = dq_accum.data_ptr<float>();
  p.delta = delta.data_ptr<float>();
  p.batch = static_cast<int>(b);
  p.kv_batch = static_cast<int>(k.size(0));
  p.ring_world = ring.on ? static_cast<int>(ring.world) : 0;
  p.ring_rank = ring.on ? static_cast<int>(ring.rank) : 0;
  p.seq_q = static_cast<int>(s);
  p.seq_kv = static_cast<int>(k.size(1));
  p.heads = static_cast<int>(h);
  p.heads_kv = static_cast<int>(k.size(2));
  p.head_dim = static_cast<int>(d);
  p.softmax_scale = static_cast<float>(softmax_scale);
  p.causal = causal;
  p.dtype = q.scalar_type() == at::kBFloat16 ? attention::DType::kBF16 : attention::DType::kFP16;
  p.ring_kv_ready = ring.arrival_flags;
  p.ring_kv_epoch = ring.arrival_epoch;
  p.ring_chunk_rows = ring.arrival_chunk_rows;
  p.ring_chunks = ring.arrival_chunks;
  p.ring_timeout_ns = ring.arrival_timeout_ns;
  p.ring_diag = ring.arrival_diag;
  p.ring_group = ring.arrival_group;
  p.ring_peer = ring.arrival_peer;
  static_assert(std::tuple_size_v<decltype(ring.travel_dk)> == attention::kRingTravelMaxWorld);
  for (int r = 0; r < attention::kRingTravelMaxWorld; ++r) {
    p.ring_dk_dst[r] = ring.travel_dk[static_cast<size_t>(r)];
    p.ring_dkv_flag[r] = ring.travel_flags[static_cast<size_t>(r)];
  }
  p.ring_dv_offset = ring.travel_dv_offset;
  // wgmma_ws_dqwarp by default: 1.12x / 1.15x wgmma_ws (non-causal / causal), itself 1.33-1.40x
  // the plain wgmma kernel (benchmarks/results/attention_bwd_nvidia_h100_80gb_hbm3_20261206-
  // 022151.json and ..._20261205-153014.json; H100, S = 8192, d = 128).
  p.kernel = attention::BwdKernel::kWgmmaWsDqWarp;
  if (const char* kernel = env::get("MKERNEL_ATTN_BWD_KERNEL")) {
    if (std::strcmp(kernel, "wgmma") == 0) {
      p.kernel = attention::BwdKernel::kWgmma;
    } else if (std::strcmp(kernel, "mma_sync") == 0) {
      p.kernel = attention::BwdKernel::kMmaSync;
    } else if (std::strcmp(kernel, "wgmma_bulk_dq") == 0) {
      p.kernel = attention::BwdKernel::kWgmmaBulkDq;
    } else if (std::strcmp(kernel, "wgmma_ws") == 0) {
      p.kernel = attention::BwdKernel::kWgmmaWs;
    } else if (std::strcmp(kernel, "wgmma_ws_dqwarp") == 0) {
      p.kernel = attention::BwdKernel::kWgmmaWsDqWarp;
    } else {
      TORCH_CHECK_VALUE(false, kBwdOp,
                        ": MKERNEL_ATTN_BWD_KERNEL must be wgmma, wgmma_bulk_dq, wgmma_ws, "
                        "wgmma_ws_dqwarp or mma_sync, got '",
                        kernel, "'");
    }
  }
  // The dQ-warp kernel's causal CTAs longest first, in sections of (kv head, batch) pairs whose
  // rows fit in L2 (MKERNEL_ATTN_BWD_TILE_ORDER=grid: the plain grid order, for measurement).
  if (p.kernel == attention::BwdKernel::kWgmmaWsDqWarp && causal) {
    const char* order = env::get("MKERNEL_ATTN_BWD_TILE_ORDER");
    TORCH_CHECK_VALUE(
        order == nullptr || std::strcmp(order, "lpt") == 0 || std::strcmp(order, "grid") == 0,
        kBwdOp, ": MKERNEL_ATTN_BWD_TILE_ORDER must be lpt or grid, got '", order, "'");
    if (order == nullptr || std::strcmp(order, "lpt") == 0) {
      long long budget = attention::kBwdL2SectionBytes;
      if (const char* mb = env::get("MKERNEL_ATTN_BWD_L2_SECTION_MB")) {
        budget = static_cast<long long>(std::atoi(mb)) << 20;
        TORCH_CHECK_VALUE(budget > 0, kBwdOp,
                          ": MKERNEL_ATTN_BWD_L2_SECTION_MB must be a positive integer, got '", mb,
                          "'");
      }
      p.tile_sections = attention::bwd_tile_sections(
          s, static_cast<int>(d), static_cast<int>(h / k.size(2)),
          static_cast<int>(q.element_size()), p.heads_kv * p.kv_batch, budget);
    }
  }
  at::Tensor padded;  // the warp-specialized kernels' lse·log2 e and D rows, s padded to 64
  if (attention::bwd_kernel_warp_specialized(p.kernel)) {
    padded = at::empty({2, b, h, (s + 63) / 64 * 64}, q.options().dtype(at::kFloat));
    p.lse_log2_pad = padded[0].data_ptr<float>();
    p.delta_pad = padded[1].data_ptr<float>();
  }
  const char* reason = nullptr;
  const cudaError_t err = attention::run_backward(p, at::cuda::getCurrentCUDAStream(), &reason);
  TORCH_CHECK_VALUE(reason == nullptr, kBwdOp, ": ", reason, " (dtype ", q.scalar_type(), ", d ", d,
                    ")");
  TORCH_CHECK(err == cudaSuccess, kBwdOp, ": kernel launch failed: ", cudaGetErrorString(err));
  return {dq, dk, dv};
}
#endif  // MKERNEL_WITH_CUDA

namespace {

#ifdef MKERNEL_WITH_CUDA
std::tuple<at::Tensor, at::Tensor, at::Tensor> attention_backward_cuda(
    const at::Tensor& dout, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
    const at::Tensor& out, const at::Tensor& lse, bool causal, double softmax_scale) {
  return run_native_backward(dout, q, k, v, out, lse, causal, softmax_scale, Ring{});
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> attention_backward_ring_cuda(
    const at::Tensor& dout, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
    const at::Tensor& out, const at::Tensor& lse, bool causal, double softmax_scale,
    int64_t ring_world, int64_t ring_rank) {
  return run_native_backward(dout, q, k, v, out, lse, causal, softmax_scale,
                             Ring{true, ring_world, ring_rank});
}
#endif  // MKERNEL_WITH_CUDA

}  // namespace

TORCH_LIBRARY_IMPL(mkernel, Meta, m) {
  m.impl("attention_backward", &attention_backward_meta);
  m.impl("attention_backward_ring", &attention_backward_ring_meta);
}
#ifdef MKERNEL_WITH_CUDA
TORCH_LIBRARY_IMPL(mkernel, CUDA, m) {
  m.impl("attention_backward", &attention_backward_cuda);
  m.impl("attention_backward_ring", &attention_backward_ring_cuda);
}
#endif  // MKERNEL_WITH_CUDA

}  // namespace mkernel
