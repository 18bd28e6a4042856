// The fp32 attention reference shared by mkernel.attention's CPU kernel and ring_attention's
// host path (csrc/attention.cpp).
#pragma once

#include <ATen/core/Tensor.h>

#include <tuple>

namespace mkernel {

// q [b, s, h, d], k/v [b, s_kv, h_kv, d] (h % h_kv == 0) -> (out [b, s, h, d] in q's dtype,
// lse [b, h, s] fp32). When causal, key j is hidden from query i iff k_pos[j] > q_pos[i]
// (int64 position vectors of lengths s and s_kv); rows that see no key get out 0, lse -inf.
std::tuple<at::Tensor, at::Tensor> reference_attention(const at::Tensor& q, const at::Tensor& k,
                                                       const at::Tensor& v, bool causal,
                                                       double scale, const at::Tensor& q_pos,
                                                       const at::Tensor& k_pos);

}  // namespace mkernel
