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

// moe17 (the pipelined combine): the same partials with each slot's (row, weight) pairs decoded
// in the kernel from the all-gathered routes and weights: words [n, 3k] 32-bit words per slot (k
// int64 route codes (rank << 32) | row, then k fp32 weights; launch_pack_routes' layout). A
// choice is held here where its code is >= 0, its rank is `me` and its row is below y_rows (as
// moe_nodes.cpp's decode); the same bits as launch with the decoded tables.
cudaError_t launch_routed(const void* y, moe_ep::DType y_dtype, const uint32_t* words, int me, int64_t y_rows,
                          void* out, moe_ep::DType out_dtype, int64_t n, int k, int64_t h, int sm_count,
                          cudaStream_t s);

// Packs this rank's routes (int64 [t_rows, k]) and fp32 weights ([t_rows, k]) into `slots` >= t_rows
// slots of 3k words (launch_routed's layout) for the all_gather; slots past t_rows route nowhere
// (-1, weight 0), and a weight whose route is < 0 is sent as 0.
cudaError_t launch_pack_routes(const int64_t* route, const float* w, int64_t t_rows, int64_t slots, int k,
                               uint32_t* out, int sm_count, cudaStream_t s);

}  // namespace mkernel::moe_partial
