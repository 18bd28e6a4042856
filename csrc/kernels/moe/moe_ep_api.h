// Host API of the expert-parallel MoE kernels on the GPU substrate (plain C++, no torch): the
// dispatch exchange and the combine of moe_dispatch_gemm / moe_combine for a group whose ranks
// share one node (peer memory through CUDA IPC). One kernel per op call.
//
// Dispatch (call number e, every rank):
//   1. the first CTA to run (the publisher): entry barrier, then this rank's choice counts per expert [E] are written into
//      every rank's count table (row = this rank) and released (flag kCounts + rank = e).
//   2. every CTA waits for every rank's counts: the whole [W][E] matrix gives, for every
//      destination d and local expert e, the rows each source keeps (capacity drops in source
//      order) and where they start (moe_host.h's layout): no host sync.
//   3. send: each token goes ONCE to every other rank holding one of its experts (dedup), into
//      that rank's token area at slot [source][u] (u: the token's index among those this rank
//      sends to d); each kept choice writes its destination row's token slot into d's row map
//      (-1 - t for this rank's own token t: read from x, never sent) and its route
//      ((d << 32) | row) here.
//   Steps 3 and 5 are work items claimed by the CTAs that run (call-tagged counters in this
//   rank's flag region), so nothing waits for a CTA that is not resident.
//   4. the CTA finishing the last item of step 3 releases kArrive + rank = e at every rank.
//   5. every CTA waits for every rank's arrival, then expands the received tokens into the
//      packed (or padded) expert rows recv_x[row] = tokens[row_map[row]] (local memory), and
//      the publisher writes counts [E_local] and recv_counts [W, E_local].
// The grouped GEMM runs on recv_x after the kernel (same stream).
//
// Combine (call e): entry barrier; each rank copies the live expert rows of y its peers read
// (those from their tokens) into its own data region (stage, claimed items); the CTA finishing the last releases kStaged + rank = e at every
// rank; wait for every rank's
// stage; each token's row = sum_j w[t, j] * y_row(route[t, j]) in fp32, j in order, read from
// the owner's data region (pull), rounded once. Every rank's region is written only by peers
// after the entry barrier of the call (dispatch) or by its owner after it (combine), so one
// call's buffers never race with another call's readers.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "../comm/group_device.h"

namespace mkernel::moe_ep {

enum class DType : int { kBF16 = 0, kFP16 = 1, kFP32 = 2 };

constexpr int kMaxExperts = 2048;  // experts of the group the kernels' shared tables hold

// Where the dispatch's areas sit in every rank's data region (bytes, 256-aligned).
struct DispatchLayout {
  uint64_t counts = 0;   // int32 [W][E]: row s = source s's choices per expert
  uint64_t row_map = 0;  // int32 [rows_out]: token slot (s * max_tokens + u) of each row
  uint64_t tokens = 0;   // [W][max_tokens][row_bytes]
  uint64_t total = 0;
};
DispatchLayout dispatch_layout(int world, int experts, int64_t max_tokens, int64_t rows_out,
                               int64_t row_bytes);

struct DispatchArgs {
  comm::GroupDevice group;
  const void* x = nullptr;         // [tokens, row_bytes] this rank's tokens
  int64_t tokens = 0;              // T of this rank
  int64_t row_bytes = 0;           // H * element size (a multiple of 16)
  int k = 1;
  int experts = 1;                 // E of the group (<= kMaxExperts)
  int capacity = 0;                // 0: packed rows; C: [E_local, C] padded
  int64_t max_tokens = 0;          // max T over the ranks (the token areas' size)
  int64_t rows_out = 0;            // rows of recv_x (capacity: E_local * C)
  const int32_t* expert = nullptr; // [T*k] expert id of each choice, -1 if out of range
  const int32_t* pos = nullptr;    // [T*k] index of the choice among this rank's choices of
                                   // its expert, in (token, choice) order
  const int32_t* cnt = nullptr;    // [E] this rank's choices per expert
  const int32_t* slot = nullptr;   // [T, W] u of token t at rank d, -1 if not sent there
  int64_t* route = nullptr;        // out [T*k]
  int32_t* counts = nullptr;       // out [E_local]
  int32_t* recv_counts = nullptr;  // out [W, E_local]
  void* recv_x = nullptr;          // out [rows_out, row_bytes]; rows past the counts untouched.
                                   // Null: no expansion (step 5 writes the counts only); the
                                   // caller's grouped GEMM reads row r from the token area at
                                   // row_map[r] (>= 0) or from x at -1 - row_map[r]
  uint64_t signature = 0;
  cudaStream_t stream = nullptr;
  // The dispatch in two launches (the overlapped path, capacity 0 and recv_x null only; both
  // halves share the call number, the second ends it):
  //   kLayout: entry barrier, counts, layout, the choices' routes and row maps (every rank's
  //            rows get their places), counts / recv_counts, and `segments` [6 E_local] for
  //            the two grouped GEMMs: own_begin[E_l], own_end[E_l] (this rank's own rows of
  //            each local expert), then peer_begin[2 E_l], peer_end[2 E_l] (the rows from
  //            ranks before it and after it); after it a GEMM may read this rank's own rows;
  //   kSend:   the tokens to the other ranks, the arrival flags, the wait for every rank's;
  //            after it the peers' rows have landed.
  // kWhole: both in one launch (the expansion included when recv_x is given).
  enum class Phase : int { kWhole = 0, kLayout = 1, kSend = 2 };
  Phase phase = Phase::kWhole;
  int32_t* segments = nullptr;  // out (kLayout)
  // out (kLayout), the fused dispatch's groups (moe_fused_api.h): begin [3 E_l] then end [3 E_l];
  // group le < E_l this rank's own rows of local expert le, groups E_l + 2 le and E_l + 2 le + 1
  // its rows from the ranks before / after this one. Either pointer may be null (not both).
  int32_t* segments3 = nullptr;
  int max_ctas = 0;             // grid cap (0: every resident CTA); kSend runs beside a GEMM
};

cudaError_t dispatch(const DispatchArgs& a, const char** reason = nullptr);

// Bytes of data region the combine (gather, scatter) needs: its stage of y's rows.
uint64_t combine_bytes(int64_t y_rows, int64_t row_bytes);

struct CombineArgs {
  comm::GroupDevice group;
  const void* y = nullptr;             // [y_rows, hidden] expert outputs (dispatch layout)
  int64_t y_rows = 0;                  // rows of y (packed bound, or E_local * C)
  int64_t hidden = 0;                  // H (row_bytes = H * element size, a multiple of 16)
  DType dtype = DType::kBF16;
  int capacity = 0;
  int e_local = 1;
  const int32_t* recv_counts = nullptr;  // [W, E_local]
  const int64_t* route = nullptr;        // [T*k]
  const float* weights = nullptr;        // [T*k]
  int64_t tokens = 0;
  int k = 1;
  void* out = nullptr;                   // [T, hidden]
  uint64_t signature = 0;
  cudaStream_t stream = nullptr;
};

cudaError_t combine(const CombineArgs& a, const char** reason = nullptr);

// The moves of the backward passes, with CombineArgs (weights unused):
//   gather  (_moe_gather):  y [y_rows, H] -> out [T*k, H], each choice's row (zero if dropped),
//                           the combine's stage / pull protocol;
//   scatter (_moe_scatter): y := rows [T*k, H] of this rank's choices, pushed into their
//                           owners' regions at the rows their routes name (after the entry
//                           barrier); the last item's CTA releases kArrive; every rank then writes out
//                           [y_rows, H] in the dispatch layout: the rows it received, zero
//                           elsewhere.
cudaError_t gather(const CombineArgs& a, const char** reason = nullptr);
cudaError_t scatter(const CombineArgs& a, const char** reason = nullptr);

}  // namespace mkernel::moe_ep
