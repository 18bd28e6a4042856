// Split-K reduction of the hooked GEMM kernel (CUTLASS's stream-K calls it
// "fixup"), without any CTA waiting for another:
//
//   every slice of a tile stores its fp32 partial sum to the workspace and
//   takes a ticket on the tile's counter; the slice that takes the last
//   ticket adds the partials in slice order and goes on to the epilogue, the
//   others move to their next unit at once.
//
// Waiting for a fixed owner slice (CUTLASS's deterministic mode) would idle an
// SM per tile; taking tickets keeps every CTA busy, and summing in slice order
// (not arrival order) keeps the result bitwise reproducible run to run.
//
// Layout of one partial: [kFrag / 4][kThreads] float4, so the 32 lanes of a
// warp store and load one contiguous 512-byte run per instruction.
#pragma once

#include "cute/tensor.hpp"
#include "cutlass/arch/barrier.h"
#include "cutlass/cutlass.h"

namespace mkernel::gemm {

// Split-K runs on at most this many tiles (more tiles than SMs several times
// over have no use for it); their tickets fill the workspace's first bytes.
constexpr int kSplitKMaxTiles = 16384;
constexpr size_t kSplitKCounterBytes = kSplitKMaxTiles * sizeof(int);

struct SplitKWorkspace {
  // [kSplitKMaxTiles] tickets: zero before the first launch; the last slice of a tile
  // puts its counter back to zero, so a workspace stays usable launch after
  // launch on one stream.
  int* counters = nullptr;
  float* partials = nullptr;  // [tiles * splits * kThreads * kFrag] floats
};

// The steps of the split-K protocol that SplitKReduce and the swapped kernels' TicketReduce /
// WideReduce (gemm_swap_ticket_sm90.cuh, gemm_swap_wide_sm90.cuh) share, so the three keep the
// same ordering: partials stored to L2, one ticket per slice, the last slice sums.

// Float4 v of a thread's accumulator fragment (values 4v .. 4v + 3): the partials' unit.
template <class Accum>
CUTLASS_DEVICE float4 fragment_vec(Accum& acc, int v) {
  return make_float4(acc(4 * v), acc(4 * v + 1), acc(4 * v + 2), acc(4 * v + 3));
}
template <class Accum>
CUTLASS_DEVICE void set_fragment_vec(Accum& acc, int v, float4 x) {
  acc(4 * v) = x.x;
  acc(4 * v + 1) = x.y;
  acc(4 * v + 2) = x.z;
  acc(4 * v + 3) = x.w;
}

// This thread's partial, float4 v at mine[v * kThreads] (a warp stores 512 contiguous bytes per
// instruction); st.global.cg: the slice that sums it may run on another SM.
template <int kThreads, int kVecs, class Accum>
CUTLASS_DEVICE void store_partial(float4* mine, Accum& acc) {
  CUTLASS_PRAGMA_UNROLL
  for (int v = 0; v < kVecs; ++v) __stcg(mine + v * kThreads, fragment_vec(acc, v));
}

// Called by all kThreads consumer threads once their partial is stored; true in the one CTA
// whose ticket is the tile's last (it zeroes the counter again for the next launch). Release the
// partial with the ticket: the first barrier orders every thread's stores before thread 0's
// fence (fences are cumulative), as CUTLASS's split-K semaphore does; one fence instead of one
// per thread. The second barrier hands thread 0's verdict to every thread.
template <int kThreads>
CUTLASS_DEVICE bool take_ticket(int* counters, int tile, int slices, int thread, int* smem_last) {
  cutlass::arch::NamedBarrier::sync(kThreads,
                                    cutlass::arch::ReservedNamedBarriers::StreamkBarrier0);
  if (thread == 0) {
    __threadfence();
    const int ticket = atomicAdd(counters + tile, 1);
    const bool last = ticket == slices - 1;
    if (last) {
      counters[tile] = 0;  // every slice has arrived: reset for the next launch
      __threadfence();     // acquire: the partials the ticket covers are visible
    }
    *smem_last = last;
  }
  cutlass::arch::NamedBarrier::sync(kThreads,
                                    cutlass::arch::ReservedNamedBarriers::StreamkBarrier0);
  return *smem_last != 0;
}

// sum[j] += part[j], component by component: one step of the in-order slice sum.
template <int kChunk>
CUTLASS_DEVICE void add_chunk(float4 (&sum)[kChunk], float4 const (&part)[kChunk]) {
  CUTLASS_PRAGMA_UNROLL
  for (int j = 0; j < kChunk; ++j) {
    sum[j].x += part[j].x;
    sum[j].y += part[j].y;
    sum[j].z += part[j].z;
    sum[j].w += part[j].w;
  }
}

template <int kThreads, int kFrag>
struct SplitKReduce {
  static_assert(kFrag % 4 == 0, "the accumulator fragment is stored as float4");
  static constexpr int kVecs = kFrag / 4;

  static constexpr size_t partial_floats() { return static_cast<size_t>(kThreads) * kFrag; }
  static size_t workspace_bytes(int tiles, int splits) {
    return kSplitKCounterBytes + static_cast<size_t>(tiles) * splits * partial_floats() * 4;
  }
  // The counters sit at a fixed place whatever the shape, so launches of
  // different shapes on one workspace never find a partial where a counter is.
  static SplitKWorkspace carve(void* workspace) {
    char* base = static_cast<char*>(workspace);
    return {reinterpret_cast<int*>(base), reinterpret_cast<float*>(base + kSplitKCounterBytes)};
  }

  // Called by all kThreads consumer threads of a CTA after the mainloop of
  // (tile, split). Returns true in the one CTA that must write the tile; there
  // `accum` holds the sum over every slice.
  template <class Accum>
  CUTLASS_DEVICE static bool reduce(SplitKWorkspace const& ws, int tile, int split, int splits,
                                    Accum& accum, int thread, int* smem_last) {
    static_assert(decltype(cute::size(accum))::value == kFrag, "fragment size mismatch");
    const size_t stride = partial_floats() / 4;  // float4s per partial
    float4* partials = reinterpret_cast<float4*>(ws.partials) +
                       static_cast<size_t>(tile) * splits * stride + thread;
    float4* mine = partials + split * stride;
    store_partial<kThreads, kVecs>(mine, accum);
    const bool last = take_ticket<kThreads>(ws.counters, tile, splits, thread, smem_last);
    // The flag is read by every thread before any thread of a later unit can
    // write it again (that needs two more barriers), so no third barrier here.
    if (!last) return false;
    // Sum every slice from memory in slice order, own included (registers
    // hold only the running sums: the consumers' budget is the fragment).
    // kChunk float4 loads are in flight per thread: one load at a time would
    // pay an L2 round trip per float4. L2 loads (ld.global.cg): other SMs
    // wrote these, this SM's L1 may be stale.
    constexpr int kChunk = kVecs < 8 ? kVecs : 8;
    static_assert(kVecs % kChunk == 0, "fragment is a whole number of chunks");
    CUTLASS_PRAGMA_UNROLL
    for (int v0 = 0; v0 < kVecs; v0 += kChunk) {
      float4 sum[kChunk];
      CUTLASS_PRAGMA_UNROLL
      for (int j = 0; j < kChunk; ++j) sum[j] = __ldcg(partials + (v0 + j) * kThreads);
      for (int s = 1; s < splits; ++s) {
        float4 part[kChunk];
        CUTLASS_PRAGMA_UNROLL
        for (int j = 0; j < kChunk; ++j) part[j] = __ldcg(partials + s * stride + (v0 + j) * kThreads);
        add_chunk(sum, part);
      }
      CUTLASS_PRAGMA_UNROLL
      for (int j = 0; j < kChunk; ++j) set_fragment_vec(accum, v0 + j, sum[j]);
    }
    return true;
  }
};

}  // namespace mkernel::gemm
