// The second kernel of variant bit 11 (AttnTraits::kSplitTail): merges the pieces of each split
// tail tile (tile_scheduler.hpp) into out and lse. Piece j of tail tile i wrote, in fp32, its
// normalised O_j (kBlockM x d) and natural-log LSE l_j to workspace slot i * splits + j
// (epilogue store_piece); for each row
//   L = log Σ_j exp(l_j),   out = Σ_j exp(l_j - L) O_j     (fp32, then the output dtype).
// One warp per row of a tail tile; rows past seq_q are skipped. Every piece covers >= 1 KV block
// of a non-causal tile, so each row's l_j are finite; a -inf L still gives out 0 (never NaN).
#pragma once

#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "tile_scheduler.hpp"

namespace mkernel::attention {

template <class SchedulerParams>
struct SplitMergeParams {
  SchedulerParams sched;  // full_tiles, splits, and the tiles' (m, head, batch) order
  const float* split_o;
  const float* split_lse;
  void* out;
  float* lse;
  int seq_q, heads;
  int64_t out_batch_stride;  // elements
  int64_t lse_head_stride;   // elements
};

template <class Scheduler, class Element, int kHeadDim, int kBlockM>
__global__ void __launch_bounds__(256)
    split_tail_merge_kernel(const SplitMergeParams<typename Scheduler::Params> mp) {
  static_assert(kHeadDim % 32 == 0, "head dim: a multiple of the warp");
  constexpr int kPer = kHeadDim / 32;  // columns per lane, contiguous
  const auto& sp = mp.sched;
  const int lane = static_cast<int>(threadIdx.x) % 32;
  const int w = static_cast<int>(blockIdx.x) * (256 / 32) + static_cast<int>(threadIdx.x) / 32;
  const int tail = sp.tiles - sp.full_tiles;
  if (w >= tail * kBlockM) return;
  const int i = w / kBlockM;
  const int r = w - i * kBlockM;
  const WorkTile tile = Scheduler::get_linear(sp, sp.full_tiles + i);
  const int row = tile.m_block * kBlockM + r;
  if (row >= mp.seq_q) return;
  const int splits = sp.splits;
  const int64_t first = static_cast<int64_t>(i) * splits;

  float m = -INFINITY;
  for (int j = lane; j < splits; j += 32) m = fmaxf(m, mp.split_lse[(first + j) * kBlockM + r]);
#pragma unroll
  for (int off = 16; off > 0; off /= 2) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, off));
  float sum = 0.f;
  if (m != -INFINITY) {
    for (int j = lane; j < splits; j += 32) sum += expf(mp.split_lse[(first + j) * kBlockM + r] - m);
  }
#pragma unroll
  for (int off = 16; off > 0; off /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, off);
  const float big_l = sum > 0.f ? m + logf(sum) : -INFINITY;

  float acc[kPer];
#pragma unroll
  for (int c = 0; c < kPer; ++c) acc[c] = 0.f;
  if (big_l != -INFINITY) {
#pragma unroll 4
    for (int j = 0; j < splits; ++j) {
      const float wgt = expf(mp.split_lse[(first + j) * kBlockM + r] - big_l);
      const float* o = mp.split_o + ((first + j) * kBlockM + r) * kHeadDim + lane * kPer;
#pragma unroll
      for (int c = 0; c < kPer; ++c) acc[c] = fmaf(wgt, o[c], acc[c]);
    }
  }
  Element* out = static_cast<Element*>(mp.out) + tile.batch * mp.out_batch_stride +
                 (static_cast<int64_t>(row) * mp.heads + tile.head) * kHeadDim + lane * kPer;
#pragma unroll
  for (int c = 0; c < kPer; ++c) out[c] = static_cast<Element>(acc[c]);
  if (lane == 0) {
    mp.lse[(static_cast<int64_t>(tile.batch) * mp.heads + tile.head) * mp.lse_head_stride + row] = big_l;
  }
}

}  // namespace mkernel::attention
