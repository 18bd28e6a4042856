// Host API of the attention engine's native backward (opt-in: MKERNEL_ATTN_BWD=native).
//
// Given the forward's q, k, v, out, its natural-log lse and the gradient dout, computes
//   P  = exp(scale * Q·Kᵀ - lse)                 (recomputed, masked as the forward)
//   dV = Pᵀ·dO,  dP = dO·Vᵀ,  D = rowsum(dO ∘ O),  dS = P ∘ (dP - D)
//   dQ = scale * dS·K,  dK = scale * dSᵀ·Q
// per (batch, head); GQA/MQA: dK/dV of kv head j sum over query heads j*g .. j*g+g-1.
//
// Three kernels on one stream (attention_bwd.cu): preprocess (D in fp32, dq_accum zeroed), the
// main kernel (one CTA per (K/V block, kv head, batch) loops over the query blocks of every query
// head of its group; dK/dV in registers, dQ added to dq_accum by fp32 atomics), then dQ's
// conversion (scale, fp32 -> q's dtype).
//
// Layouts (dense, last dim contiguous): q, out, dout, dq [b, s, h, d]; k, v, dk, dv
// [b, s_kv, h_kv, d]; lse [b, h, s] fp32 (-inf: a row that sees no key). Causal masking as the
// forward's (bottom-right: query i sees keys j <= i + s_kv - s). Workspaces (caller-allocated,
// any contents): dq_accum [b, h, s, d] fp32, delta [b, h, s] fp32.
//
// Plain C++ (no torch, no CUTLASS): csrc/attention_backward.cpp is the torch glue.
#pragma once

#include <cuda_runtime.h>

#include "attention_api.h"

namespace mkernel::attention {

struct BwdProblem {
  const void* q;
  const void* k;
  const void* v;
  const void* out;
  const void* dout;
  const float* lse;
  void* dq;
  void* dk;
  void* dv;
  float* dq_accum;
  float* delta;
  int batch, seq_q, seq_kv, heads, heads_kv, head_dim;
  float softmax_scale;
  bool causal;
  DType dtype;
};

// Why a backward problem can't run (nullptr if it can): dtype, head dim (64, 128), shapes,
// 16-byte alignment of every pointer.
const char* can_implement_backward(const BwdProblem& p);

// Launches the three kernels on `stream`. cudaErrorInvalidValue with the reason in *reason when
// can_implement_backward refuses; else the first launch error (or cudaSuccess).
cudaError_t run_backward(const BwdProblem& p, cudaStream_t stream, const char** reason = nullptr);

}  // namespace mkernel::attention
