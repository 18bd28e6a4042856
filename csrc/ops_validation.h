// Input validation of the mkernel ops: one validator per op, shared by all of its kernels.
//
// Each op has exactly one validator, `validate_<op>`, defined in `csrc/<op>.cpp` beside the op's
// kernels. The CPU reference kernel, the CUDA kernel and the Meta (fake) kernel all call it first,
// so a bad input gets the same error on every backend, and already while torch.compile traces
// with FakeTensors. A validator returns the op's output sizes as SymInts: the Meta kernel
// allocates from them (so fake and real outputs cannot disagree), and so will the real kernels.
//
// Validators are SymInt-aware: they read sizes with `sym_size` and compare them with
// `TORCH_SYM_CHECK`, which guards (or defers a runtime assert) under dynamic shapes instead of
// specialising. Dtype, rank, device and layout are concrete facts even under tracing.
//
// Errors name the op, the argument, what was expected and what was seen:
//   mkernel.ag_gemm: w must have the same K as x (x: [8, 64], w: [32, 48])
// Tensor problems (dtype, rank, shape, device, layout) raise RuntimeError, like ATen's own
// checks; a bad integer or float argument (world_size, group, capacity, ...) raises ValueError.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/ScalarType.h>
#include <c10/core/SymBool.h>
#include <c10/core/SymInt.h>

#include <cstdint>
#include <initializer_list>
#include <optional>
#include <string>

namespace mkernel {

// --- per-op validators (defined in csrc/<op>.cpp) -------------------------------------------

// ag_gemm: x [m, K] row shard, w [N, K] -> out [W*m, N] (+ gathered x [W*m, K]), W = world_size.
struct AgGemmSizes {
  c10::SymInt rows;  // world_size * m
  c10::SymInt n;     // N
  c10::SymInt k;     // K
};
AgGemmSizes validate_ag_gemm(const at::Tensor& x, const at::Tensor& w, int64_t group,
                             int64_t world_size);

// gemm_rs: x [M, k], w [N, k] -> out [M / world_size, N]; M % world_size == 0.
// gemm_ar: x [M, k], w [N, k] -> out [M, N].
struct GemmSizes {
  c10::SymInt rows;  // rows of the output: M / world_size (gemm_rs) or M (gemm_ar)
  c10::SymInt n;     // N
  c10::SymInt k;     // k, the local shard of the reduction dimension
};
GemmSizes validate_gemm_rs(const at::Tensor& x, const at::Tensor& w, int64_t group,
                           int64_t world_size);
GemmSizes validate_gemm_ar(const at::Tensor& x, const at::Tensor& w, int64_t group,
                           int64_t world_size);
// gemm (the engine alone): a [M, K], b [N, K] -> [M, N].
GemmSizes validate_gemm(const at::Tensor& a, const at::Tensor& b, int64_t config,
                        int64_t sm_count, int64_t swizzle, int64_t raster, int64_t splits = 0);

// moe_dispatch_gemm: x [T, H], topk_idx [T, k], w1 [E_local, F, H], capacity >= 0
//   -> out, counts, route, recv_counts, recv_x (csrc/moe_dispatch_gemm.cpp, moe_host.h).
struct MoeDispatchSizes {
  int64_t local_experts;  // E_local = num_experts / world_size
  int64_t capacity;       // token slots per local expert (0: capacity-free, packed rows)
  c10::SymInt f;          // F, w1's output features
  c10::SymInt tokens;     // T
  c10::SymInt topk;       // k
};
MoeDispatchSizes validate_moe_dispatch_gemm(const at::Tensor& x, const at::Tensor& topk_idx,
                                            const at::Tensor& w1, int64_t group, int64_t world_size,
                                            int64_t num_experts, int64_t capacity);

// moe_combine: y [R, H] or [E_local, capacity, H], route [T, k] int64,
// recv_counts [world_size, E_local] int32, topk_weights [T, k] fp32 -> out [T, H].
struct MoeCombineSizes {
  c10::SymInt tokens;  // T = num_tokens
  c10::SymInt h;       // H
};
MoeCombineSizes validate_moe_combine(const at::Tensor& y, const at::Tensor& route,
                                     const at::Tensor& recv_counts,
                                     const at::Tensor& topk_weights, int64_t group,
                                     int64_t world_size, const c10::SymInt& num_tokens);

// ring_attention: q [b, s, h, d], k/v [b, s_kv, h_kv, d] -> out [b, s, h, d], lse [b, h, s] fp32.
struct RingAttentionSizes {
  c10::SymInt batch;     // b
  c10::SymInt seq;       // s, the local query shard
  c10::SymInt heads;     // h
  c10::SymInt head_dim;  // d
};
RingAttentionSizes validate_ring_attention(const at::Tensor& q, const at::Tensor& k,
                                           const at::Tensor& v, int64_t group, int64_t world_size,
                                           std::optional<double> softmax_scale);

// all_gather: x [m, ...] -> [world_size*m, ...] (returns the output's first dim).
// reduce_scatter: x [M, ...], M % world_size == 0 -> [M/world_size, ...] (returns M/world_size).
// all_reduce: x [...] -> [...]. x: bf16, fp16 or fp32 on every backend, contiguous.
c10::SymInt validate_all_gather(const at::Tensor& x, int64_t group, int64_t world_size);
c10::SymInt validate_reduce_scatter(const at::Tensor& x, int64_t group, int64_t world_size);
void validate_all_reduce(const at::Tensor& x, int64_t group, int64_t world_size);

// --- building blocks of the validators (csrc/ops_validation.cpp) -----------------------------
namespace validation {

// Short dtype names used in messages: bf16, fp16, fp32, int64, ...
std::string dtype_name(at::ScalarType dtype);

// True when `t` is, or stands in for, a CUDA tensor: a real CUDA tensor, or a FakeTensor whose
// device is CUDA (inside the Meta kernel it reports device meta but keeps the CUDA backend key).
bool targets_cuda(const at::Tensor& t);

// world_size >= 1 and group >= 0 (ValueError).
void check_group(const char* op, int64_t group, int64_t world_size);

// The CUDA kernels' inputs are read by TMA and 16-byte vector loads: `t`'s data must start at a
// 16-byte aligned address. A contiguous view at an odd element offset (a slice of a flat
// parameter buffer, say) is not, and would fault inside the kernel. ValueError naming `arg`. Call
// it from the CUDA kernels only: a FakeTensor has no address.
void check_aligned16(const char* op, const char* arg, const at::Tensor& t);

// `t` has `dim` dimensions; `layout` names them for the message, e.g. "[m, K]".
void check_dim(const char* op, const char* arg, const at::Tensor& t, int64_t dim,
               const char* layout);

// The activation dtypes: bf16 or fp16 on CUDA; the CPU reference path also accepts fp32.
void check_float_dtype(const char* op, const char* arg, const at::Tensor& t);

// `t`'s dtype is one of `allowed`; `what` says what the tensor holds, e.g. "expert ids".
void check_dtype_in(const char* op, const char* arg, const at::Tensor& t,
                    std::initializer_list<at::ScalarType> allowed, const char* what);

// `t` has the dtype of `ref` (named `ref_arg`).
void check_same_dtype(const char* op, const char* arg, const at::Tensor& t, const char* ref_arg,
                      const at::Tensor& ref);

// `t` lives on the device of `ref` (named `ref_arg`).
void check_same_device(const char* op, const char* arg, const at::Tensor& t, const char* ref_arg,
                       const at::Tensor& ref);

// `t` is row-major contiguous. The ops never copy silently: a strided input is an error.
void check_contiguous(const char* op, const char* arg, const at::Tensor& t);

// Whether `a` and `b`, of the same rank, have equal sizes (symbolically: use with
// TORCH_SYM_CHECK).
c10::SymBool same_sizes(const at::Tensor& a, const at::Tensor& b);

// The operands of y = x @ w.T: x [rows, K] and w [N, K], named "x" and "w"; `x_layout` and
// `w_layout` name their dimensions for messages ("[m, K]") and `k_name` the reduction one ("K").
// Checks rank, activation dtype, same dtype and device, matching K, and contiguity.
void check_linear_operands(const char* op, const at::Tensor& x, const char* x_layout,
                           const at::Tensor& w, const char* w_layout, const char* k_name);
// The same with the operands' names as the caller's API spells them (mkernel.gemm: "a", "b").
void check_linear_operands(const char* op, const char* x_name, const at::Tensor& x,
                           const char* x_layout, const char* w_name, const at::Tensor& w,
                           const char* w_layout, const char* k_name);

// The operands of attention: q [b, s, h, d], k and v [b, s_kv, h_kv, d] (h a multiple of h_kv)
// and an optional softmax scale (finite, > 0). Checks rank, activation dtype, same dtype and
// device, matching b and d, the GQA head ratio, v's shape and contiguity — not the sequence
// lengths (ring attention accepts empty shards; the engine does not).
void check_attention_operands(const char* op, const at::Tensor& q, const at::Tensor& k,
                              const at::Tensor& v, std::optional<double> softmax_scale);

}  // namespace validation
}  // namespace mkernel
