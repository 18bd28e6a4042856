// Host API of the several-node combine's owner-side partial sums (plain C++, no torch; glue:
// csrc/moe_nodes.cpp combine_nodes): for every token slot s of the group (W * max_T of them),
//   out[s] = sum over j = 0..k-1 in order, of the choices held here (rows[s, j] >= 0), of
//            w[s, j] * y[rows[s, j]]
// in fp32 (product and sum rounded separately, as the ATen sequence it replaces: the same bits),
// rounded once to out's dtype. One launch; no group memory, no wait.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "moe_ep_api.h"  // DType

namespace mkernel::moe_partial {

constexpr int kMaxChoices = 64;  // k the kernel's shared tables hold

// y [.., H] (y_dtype), rows int64 [n, k] (-1: not held here), w fp32 [n, k], out [n, H]
// (out_dtype). H a multiple of nothing in particular (scalar accesses).
cudaError_t launch(const void* y, moe_ep::DType y_dtype, const int64_t* rows, const float* w, void* out,
                   moe_ep::DType out_dtype, int64_t n, int k, int64_t h, int sm_count, cudaStream_t s);

}  // namespace mkernel::moe_partial
