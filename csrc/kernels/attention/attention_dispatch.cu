// The attention engine's host entry points (attention_api.h): checks, then the runtime ->
// template switch over (dtype, head dim) into the generated instantiations.
#include <cmath>

#include "attention_api.h"

namespace mkernel::attention {

#define ATTN_CASE(tag, ctype, hdim) \
  cudaError_t run_##tag##_d##hdim(const Problem& p, const Launch& l, const HookArgs* h);
#include "instances.inc"
#undef ATTN_CASE

int block_n(int /*head_dim*/) { return 128; }  // AttnTraits::kBlockN of every shipped case

const char* can_implement(const Problem& p) {
  if (p.q == nullptr || p.k == nullptr || p.v == nullptr || p.out == nullptr || p.lse == nullptr)
    return "a tensor pointer is null";
  if (p.batch < 1 || p.seq_q < 1 || p.seq_kv < 1 || p.heads < 1 || p.heads_kv < 1)
    return "batch, seq_q, seq_kv, heads and heads_kv must be >= 1";
  if (p.heads % p.heads_kv != 0) return "heads must be a multiple of heads_kv";
  if (p.head_dim != 64 && p.head_dim != 128) return "head_dim must be 64 or 128";
  if (!(p.softmax_scale > 0.f) || !std::isfinite(p.softmax_scale))
    return "softmax_scale must be finite and > 0";
  for (const void* ptr : {p.q, p.k, p.v, static_cast<const void*>(p.out)}) {
    if (reinterpret_cast<uintptr_t>(ptr) % 16 != 0) return "q, k, v and out must be 16-byte aligned";
  }
  return nullptr;
}

namespace {
cudaError_t dispatch(const Problem& p, const Launch& l, const HookArgs* h, const char** reason) {
  if (const char* why = can_implement(p)) {
    if (reason != nullptr) *reason = why;
    return cudaErrorInvalidValue;
  }
  const bool bf16 = p.dtype == DType::kBF16;
  if (p.head_dim == 64) return bf16 ? run_bf16_d64(p, l, h) : run_fp16_d64(p, l, h);
  return bf16 ? run_bf16_d128(p, l, h) : run_fp16_d128(p, l, h);
}
}  // namespace

cudaError_t run(const Problem& p, const Launch& l, const char** reason) {
  return dispatch(p, l, nullptr, reason);
}

cudaError_t run_hooked(const Problem& p, const Launch& l, const HookArgs& h, const char** reason) {
  return dispatch(p, l, &h, reason);
}

}  // namespace mkernel::attention
