// The MoE ops at world size 1, where every expert is local: ATen ops and the engine's grouped
// GEMM on any device (the CUDA kernels at world size 1; the CPU kernels at world size 1 too, so
// the CPU tests exercise the very code the GPU runs). Same layout as moe_host.h, bit for bit in
// the routes, counts and row order: a stable sort of the choices by expert. No host sync: every
// size is T * k, E or E * capacity, so the CUDA path runs inside CUDA graphs.
#pragma once

#include <ATen/ATen.h>

#include <cstdint>

#include "moe_host.h"

namespace mkernel {
namespace moe {

// moe_dispatch_gemm at world size 1. Out-of-range expert ids are dropped (route -1): checking
// them would synchronise with the device.
DispatchResult dispatch_local(const at::Tensor& x, const at::Tensor& topk_idx,
                              const at::Tensor& w1, int64_t num_experts, int64_t capacity,
                              bool return_recv);

// a_e @ w[e].T per local expert on the dispatch layout (packed [R, K] with capacity 0, else
// [E_local, capacity, K]): the engine's grouped GEMMs; rows past the counts unspecified.
at::Tensor expert_gemm(const at::Tensor& a, const at::Tensor& w, const at::Tensor& counts,
                       int64_t capacity);

// gather / scatter of moe_host.h at world size 1.
at::Tensor gather_local(const at::Tensor& y, const at::Tensor& route);
at::Tensor scatter_local(const at::Tensor& rows, const at::Tensor& route, int64_t e_local,
                         int64_t capacity, int64_t out_rows);

}  // namespace moe
}  // namespace mkernel
