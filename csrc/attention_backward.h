// The native attention backward's host entry (csrc/attention_backward.cpp), shared with the
// fused ring backward (csrc/ring_attention.cpp), which runs its ring mode on K/V as it arrives.
#pragma once

#include <ATen/ATen.h>

#include <array>
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
  // dK/dV travelling (BwdProblem::ring_dk_dst; arrival_epoch set): per source rank, this rank's
  // fp32 dK slot in that rank's receive area (dV at + travel_dv_offset floats) and its flags
  // there. Then dk / dv come back empty: the caller's ring_attention::sum_key_grads writes them.
  std::array<float*, 8> travel_dk{};
  std::array<uint64_t*, 8> travel_flags{};
  long long travel_dv_offset = 0;
  bool travel() const { return travel_dk[0] != nullptr; }
};

#ifdef MKERNEL_WITH_CUDA
// (dq, dk, dv) of mkernel.attention's native backward; in the ring mode dk / dv are fp32
// [W * b, s, h_kv, d] partials by source (src * b + bi), whatever the K/V layout — or, with dK/dV
// travelling, empty (the partials went to the sources' receive areas).
std::tuple<at::Tensor, at::Tensor, at::Tensor> run_native_backward(
    const at::Tensor& dout, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
    const at::Tensor& out, const at::Tensor& lse, bool causal, double softmax_scale,
    const BackwardRing& ring);
#endif  // MKERNEL_WITH_CUDA

}  // namespace mkernel
