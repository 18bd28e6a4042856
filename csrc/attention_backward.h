// The native attention backward's host entry (csrc/attention_backward.cpp), shared with the
// fused ring backward (csrc/ring_attention.cpp), which runs its ring mode on K/V as it arrives.
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <tuple>

namespace mkernel {

// The ring mode (attention_bwd_api.h BwdProblem::ring_world): k / v hold the ring's W shards,
// [W * b, s, h_kv, d]; `on` false: the plain op. arrival_* (the fused ring backward): k / v are
// the whole-mode virtual K/V instead ([b][W positions][s], ring_kv_api.h) and the kernel waits
// for each key chunk's arrival flag (BwdProblem::ring_kv_ready and the fields after it).
struct BackwardRing {
  bool on = false;
  int64_t world = 0, rank = 0;
  const uint64_t* arrival_flags = nullptr;
  const uint64_t* arrival_epoch = nullptr;
  int arrival_chunk_rows = 0, arrival_chunks = 0;
  uint64_t arrival_timeout_ns = 0;
  void* arrival_diag = nullptr;
  int arrival_group = -1, arrival_peer = -1;
};

#ifdef MKERNEL_WITH_CUDA
// (dq, dk, dv) of mkernel.attention's native backward; in the ring mode dk / dv are fp32
// [W * b, s, h_kv, d] partials by source (src * b + bi), whatever the K/V layout.
std::tuple<at::Tensor, at::Tensor, at::Tensor> run_native_backward(
    const at::Tensor& dout, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
    const at::Tensor& out, const at::Tensor& lse, bool causal, double softmax_scale,
    const BackwardRing& ring);
#endif  // MKERNEL_WITH_CUDA

}  // namespace mkernel
