// The small-M (decode) kernel: D[M,N] = A[M,K] · B[N,K]ᵀ for M <= 16.
//
// Memory-bound: B (N·K·2 bytes) is read once, everything else is noise. So the
// design is about bytes in flight: a plain grid of small blocks (no
// persistence, no TMA pipeline to fill) in which every lane keeps
// 2·row_tiles·unroll 16-byte loads of B outstanding; the GPU's load queue is
// full from the first cycle.
//
// The arithmetic runs on the tensor cores with the operands swapped: an
// m16n8k16 MMA takes 16 rows of B as its "A" operand and the (up to 8) rows of
// A as its "B" operand, so D's 8 columns are the 8 rows of A and no lane spends
// ALU time converting bf16 to fp32 or multiplying. The MMA's fragment layout
// ties each k it contracts to a lane (lane g·4+q holds k labels 2q, 2q+1, 2q+8,
// 2q+9 of both operands), but a sum does not care which physical k carries
// which label as long as both operands agree. So each lane loads 8 contiguous
// elements (one 16-byte load) of B row g, of B row g+8 and of A row g, and
// feeds them to two MMAs unchanged: no shuffles, and each load instruction of a
// warp covers 8 rows × 64 contiguous bytes (two full 32-byte sectors per row).
//
// Within a block the warps split K; their fp32 partials are added in warp order
// through shared memory, so the result does not depend on scheduling. Two ways
// of keeping the loads in flight (variants, gemv::Variant): registers,
// double-buffered (gemv_kernel), or cp.async into shared memory that each lane
// reads back itself (gemv_async_kernel, which can also split a tile's K over
// several blocks for weights too narrow to fill the GPU).
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <cstdint>

#include "gemv_api.h"

namespace mkernel::gemv {
namespace {

template <class T>
struct Mma;

template <>
struct Mma<__nv_bfloat16> {
  static __device__ __forceinline__ void run(float (&c)[4], uint32_t a0, uint32_t a1, uint32_t a2,
                                             uint32_t a3, uint32_t b0, uint32_t b1) {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, {%0,%1,%2,%3};"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
  }
  static __device__ __forceinline__ __nv_bfloat16 from_float(float x) {
    return __float2bfloat16_rn(x);
  }
};

template <>
struct Mma<__half> {
  static __device__ __forceinline__ void run(float (&c)[4], uint32_t a0, uint32_t a1, uint32_t a2,
                                             uint32_t a3, uint32_t b0, uint32_t b1) {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, {%0,%1,%2,%3};"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
  }
  static __device__ __forceinline__ __half from_float(float x) { return __float2half_rn(x); }
};

// B is read exactly once: keep it out of L1 and ask L2 for 256-byte lines (the
// neighbouring warps' steps of the same row).
__device__ __forceinline__ uint4 load_streamed(const void* p) {
  uint4 v;
  asm volatile("ld.global.nc.L1::no_allocate.L2::256B.v4.u32 {%0,%1,%2,%3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(p));
  return v;
}

// A is read by every block: let it stay in L1 and L2.
__device__ __forceinline__ uint4 load_shared_operand(const void* p) {
  return __ldg(reinterpret_cast<const uint4*>(p));
}

// Where blocks that split one tile's K meet (gemv::workspace_size): a ticket per
// tile in the first 64 KiB (the engine's split-K convention, split_k_reduce.cuh:
// zero before the first launch, put back to zero by the last slice, so one
// workspace serves launch after launch on a stream, the engine's split-K
// included), then each (tile, slice)'s fp32 partial as the warp's fragments.
constexpr int kMaxSplitTiles = 16384;
constexpr size_t kCounterBytes = kMaxSplitTiles * sizeof(int);

struct Slices {
  int count = 1;  // blocks per 16-row tile (gridDim.y); 1: no workspace
  int* counters = nullptr;
  float* partials = nullptr;
};

// The block's result: acc[t][ng] = {(row g, col 2q), (row g, col 2q+1), (row g+8,
// col 2q), (row g+8, col 2q+1)} of tile t and A-row group ng in every warp (rows
// are B rows = D columns, cols are A rows 8·ng + col = D rows), partial over the warp's share of K. The
// warps' partials are added in warp order, then (K split over blocks) the
// blocks' in slice order by whichever block of the tile finishes last: the
// same bits whatever the scheduling. Warp 0 of that block stores rows < m,
// columns < n.
template <class T, int kWarps, int kRowTiles, int kGroups>
__device__ __forceinline__ void reduce_and_store(float (&acc)[kRowTiles][kGroups][4],
                                                 T* __restrict__ d, int m, int n, int n0,
                                                 const Slices& slices) {
  constexpr int kFrags = kRowTiles * kGroups;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int g = lane / 4, q = lane % 4;
  if constexpr (kWarps > 1) {
    __shared__ float partial[kWarps][kFrags][4][32];
#pragma unroll
    for (int f = 0; f < kFrags; ++f) {
#pragma unroll
      for (int j = 0; j < 4; ++j) partial[warp][f][j][lane] = acc[f / kGroups][f % kGroups][j];
    }
    __syncthreads();
    if (warp != 0) return;
#pragma unroll
    for (int f = 0; f < kFrags; ++f) {
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        float s = partial[0][f][j][lane];
#pragma unroll
        for (int w = 1; w < kWarps; ++w) s += partial[w][f][j][lane];
        acc[f / kGroups][f % kGroups][j] = s;
      }
    }
  }
  if (slices.count > 1) {  // warp 0 of each of the tile's blocks
    const int tile = blockIdx.x;
    float4* tile_parts = reinterpret_cast<float4*>(slices.partials) +
                         static_cast<size_t>(tile) * slices.count * kFrags * 32;
#pragma unroll
    for (int f = 0; f < kFrags; ++f) {
      const float(&c)[4] = acc[f / kGroups][f % kGroups];
      __stcg(tile_parts + (static_cast<size_t>(blockIdx.y) * kFrags + f) * 32 + lane,
             make_float4(c[0], c[1], c[2], c[3]));
    }
    __threadfence();  // release: this lane's partial before the ticket
    __syncwarp();
    int ticket = 0;
    if (lane == 0) ticket = atomicAdd(slices.counters + tile, 1);
    ticket = __shfl_sync(0xffffffffu, ticket, 0);
    if (ticket != slices.count - 1) return;
    __threadfence();  // acquire: every slice's partial
#pragma unroll
    for (int f = 0; f < kFrags; ++f) {
      float4 sum = __ldcg(tile_parts + f * 32 + lane);
      for (int sl = 1; sl < slices.count; ++sl) {
        const float4 v = __ldcg(tile_parts + (static_cast<size_t>(sl) * kFrags + f) * 32 + lane);
        sum.x += v.x, sum.y += v.y, sum.z += v.z, sum.w += v.w;
      }
      float(&c)[4] = acc[f / kGroups][f % kGroups];
      c[0] = sum.x, c[1] = sum.y, c[2] = sum.z, c[3] = sum.w;
    }
    if (lane == 0) slices.counters[tile] = 0;  // for the next launch on this workspace
  }
#pragma unroll
  for (int t = 0; t < kRowTiles; ++t) {
#pragma unroll
    for (int ng = 0; ng < kGroups; ++ng) {
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const int col = n0 + t * 16 + (j >> 1) * 8 + g;
        const int row = ng * 8 + 2 * q + (j & 1);
        if (row < m && col < n) {
          d[static_cast<size_t>(row) * n + col] = Mma<T>::from_float(acc[t][ng][j]);
        }
      }
    }
  }
}

// Blocks resident per SM the variant is built for: the 2-step, 1-tile variants
// are held to 128 registers so that 16 warps fit on an SM whatever the block
// size (all blocks of a decode shape in one wave: a second, partial wave of
// equal blocks would leave most SMs idle at the end).
// Two groups of A rows need ~150 registers: 12 warps per SM (168 each), and no
// 16-warp block (run_typed refuses it).
template <int kWarps, int kUnroll, int kRowTiles, int kGroups>
constexpr int kMinBlocks =
    kUnroll * kRowTiles <= 2 ? ((kGroups == 1 ? 16 : 12) / kWarps > 0 ? (kGroups == 1 ? 16 : 12) / kWarps : 1) : 1;

template <class T, int kWarps, int kUnroll, int kRowTiles, int kGroups>
__global__ void __launch_bounds__(kWarps * 32, (kMinBlocks<kWarps, kUnroll, kRowTiles, kGroups>))
    gemv_kernel(const T* __restrict__ a, const T* __restrict__ b, T* __restrict__ d, int m, int n,
                int k) {
  constexpr int kStep = 64;  // K elements per warp step: 4 lanes x 2 loads x 8 elements
  constexpr int kBlockRows = 16 * kRowTiles;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int g = lane / 4, q = lane % 4;  // MMA fragment row group and lane in the quad
  const int n0 = blockIdx.x * kBlockRows;

  // This lane's B rows: g and g+8 of each 16-row tile, clamped so that the
  // last block's loads stay in bounds (those rows are never stored).
  const T* brow[kRowTiles][2];
#pragma unroll
  for (int t = 0; t < kRowTiles; ++t) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int row = min(n0 + t * 16 + h * 8 + g, n - 1);
      brow[t][h] = b + static_cast<size_t>(row) * k;
    }
  }
  // This lane's A rows: g of each group of 8 (kGroups MMAs share each B fragment);
  // columns >= m of the MMA multiply zeros.
  bool has_a_row[kGroups];
  const T* arow[kGroups];
#pragma unroll
  for (int ng = 0; ng < kGroups; ++ng) {
    has_a_row[ng] = ng * 8 + g < m;
    arow[ng] = a + static_cast<size_t>(has_a_row[ng] ? ng * 8 + g : 0) * k;
  }

  float acc[kRowTiles][kGroups][4];
#pragma unroll
  for (int t = 0; t < kRowTiles; ++t) {
#pragma unroll
    for (int ng = 0; ng < kGroups; ++ng) acc[t][ng][0] = acc[t][ng][1] = acc[t][ng][2] = acc[t][ng][3] = 0.f;
  }

  // One round of a warp: kUnroll consecutive 64-element steps of its rows
  // (the warps of the block take neighbouring rounds, then skip kWarps rounds).
  // Registers are double-buffered: the next round's loads are issued before the
  // current round's MMAs, so they stay in flight across them (without the second
  // buffer ptxas sinks each load next to its MMA: ~2 loads in flight per lane).
  struct Round {
    uint4 b[kUnroll][2][kRowTiles][2];  // [step][half of the step][tile][row g / g+8]
    uint4 a[kUnroll][2][kGroups];
  };
  const int steps = (k + kStep - 1) / kStep;
  const int stride = kWarps * kUnroll;
  // A k chunk past K (ragged K, or a step past the last) loads nothing and
  // contributes zeros; K % 8 == 0, so chunks are whole.
  auto load_round = [&](Round& r, int first) {
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const int kc = (first + u) * kStep + half * 32 + q * 8;
        const bool in_k = kc < k;
#pragma unroll
        for (int t = 0; t < kRowTiles; ++t) {
#pragma unroll
          for (int h = 0; h < 2; ++h) {
            r.b[u][half][t][h] = in_k ? load_streamed(brow[t][h] + kc) : make_uint4(0, 0, 0, 0);
          }
        }
#pragma unroll
        for (int ng = 0; ng < kGroups; ++ng) {
          r.a[u][half][ng] = in_k && has_a_row[ng] ? load_shared_operand(arow[ng] + kc)
                                                   : make_uint4(0, 0, 0, 0);
        }
      }
    }
  };
  auto mma_round = [&](const Round& r) {
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
#pragma unroll
      for (int half = 0; half < 2; ++half) {
#pragma unroll
        for (int t = 0; t < kRowTiles; ++t) {
          const uint4 lo = r.b[u][half][t][0], hi = r.b[u][half][t][1];
#pragma unroll
          for (int ng = 0; ng < kGroups; ++ng) {
            const uint4 x = r.a[u][half][ng];
            // Elements 0-3 of the lane's chunk carry labels (2q, 2q+1, 2q+8, 2q+9) in
            // both operands; elements 4-7 the same labels of a second MMA.
            Mma<T>::run(acc[t][ng], lo.x, hi.x, lo.y, hi.y, x.x, x.y);
            Mma<T>::run(acc[t][ng], lo.z, hi.z, lo.w, hi.w, x.z, x.w);
          }
        }
      }
    }
  };
  int first = warp * kUnroll;
  if (first < steps) {
    Round cur;
    load_round(cur, first);
    for (; first + stride < steps; first += stride) {
      Round next;
      load_round(next, first + stride);
      mma_round(cur);
      cur = next;
    }
    mma_round(cur);
  }

  reduce_and_store<T, kWarps, kRowTiles, kGroups>(acc, d, m, n, n0, Slices{});
}

template <class T, int kGroups, int kWarps, int kUnroll, int kRowTiles>
cudaError_t launch(const gemm::Problem& p, cudaStream_t stream) {
  constexpr int kBlockRows = 16 * kRowTiles;
  const unsigned blocks = static_cast<unsigned>((p.n + kBlockRows - 1) / kBlockRows);
  gemv_kernel<T, kWarps, kUnroll, kRowTiles, kGroups><<<blocks, kWarps * 32, 0, stream>>>(
      static_cast<const T*>(p.a), static_cast<const T*>(p.b), static_cast<T*>(p.d), p.m, p.n, p.k);
  return cudaGetLastError();
}


// cp.async (16 bytes per lane, no registers held while in flight): B bypasses
// L1, A (read by every block) may stay there; src_bytes 0 writes zeros.
__device__ __forceinline__ void copy_async_streamed(void* smem, const void* gmem, bool valid) {
  const uint32_t dst = static_cast<uint32_t>(__cvta_generic_to_shared(smem));
  asm volatile("cp.async.cg.shared.global.L2::256B [%0], [%1], 16, %2;" ::"r"(dst), "l"(gmem),
               "r"(valid ? 16 : 0)
               : "memory");
}
__device__ __forceinline__ void copy_async_cached(void* smem, const void* gmem, bool valid) {
  const uint32_t dst = static_cast<uint32_t>(__cvta_generic_to_shared(smem));
  asm volatile("cp.async.ca.shared.global [%0], [%1], 16, %2;" ::"r"(dst), "l"(gmem),
               "r"(valid ? 16 : 0)
               : "memory");
}
// The same without L2's 256-byte prefetch: A's slices, staged once per block, read by every warp.
__device__ __forceinline__ void copy_async_global(void* smem, const void* gmem, bool valid) {
  const uint32_t dst = static_cast<uint32_t>(__cvta_generic_to_shared(smem));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(dst), "l"(gmem),
               "r"(valid ? 16 : 0)
               : "memory");
}
__device__ __forceinline__ void copy_async_commit() {
  asm volatile("cp.async.commit_group;" ::: "memory");
}
template <int kPending>
__device__ __forceinline__ void copy_async_wait() {
  asm volatile("cp.async.wait_group %0;" ::"n"(kPending) : "memory");
}

// The same GEMV with a deeper pipeline: each lane copies its own fragments of
// kStages steps ahead into shared memory with cp.async and reads them back
// itself (no other lane touches them: no barrier). The bytes in flight are
// bounded by shared memory instead of registers: kStages * 2 KB of B per warp.
// One 16-row tile per block, warps interleaved one 64-element step at a time.
template <int kGroups>
constexpr int kAsyncSlots = 4 + 2 * kGroups;  // per step and lane: B rows g, g+8 of both halves; A

template <class T, int kWarps, int kStages, int kGroups>
__global__ void __launch_bounds__(kWarps * 32)
    gemv_async_kernel(const T* __restrict__ a, const T* __restrict__ b, T* __restrict__ d, int m,
                      int n, int k, Slices slices) {
  constexpr int kStep = 64;
  constexpr int kSlots = kAsyncSlots<kGroups>;
  extern __shared__ uint4 stages[];  // [warp][stage][slot][lane]
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int g = lane / 4, q = lane % 4;
  const int n0 = blockIdx.x * 16;
  const T* brow[2] = {b + static_cast<size_t>(min(n0 + g, n - 1)) * k,
                      b + static_cast<size_t>(min(n0 + 8 + g, n - 1)) * k};
  bool has_a_row[kGroups];
  const T* arow[kGroups];
#pragma unroll
  for (int ng = 0; ng < kGroups; ++ng) {
    has_a_row[ng] = ng * 8 + g < m;
    arow[ng] = a + static_cast<size_t>(has_a_row[ng] ? ng * 8 + g : 0) * k;
  }
  uint4* mine = stages + static_cast<size_t>(warp) * kStages * kSlots * 32 + lane;

  // This block's slice of K (blockIdx.y of slices.count), in 64-element steps.
  const int steps = (k + kStep - 1) / kStep;
  const int first = static_cast<int>(static_cast<long>(steps) * blockIdx.y / slices.count);
  const int last = static_cast<int>(static_cast<long>(steps) * (blockIdx.y + 1) / slices.count);
  const int my_steps = warp < last - first ? (last - first - warp + kWarps - 1) / kWarps : 0;
  // The warp's j-th step (step first + j * kWarps + warp) into stage j % kStages.
  auto issue = [&](int j) {
    uint4* st = mine + (j % kStages) * kSlots * 32;
    const int step = first + j * kWarps + warp;
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int kc = step * kStep + half * 32 + q * 8;
      const bool in_k = kc < k;
      const int at = in_k ? kc : 0;
      copy_async_streamed(st + (2 * half) * 32, brow[0] + at, in_k);
      copy_async_streamed(st + (2 * half + 1) * 32, brow[1] + at, in_k);
#pragma unroll
      for (int ng = 0; ng < kGroups; ++ng) {
        copy_async_cached(st + (4 + half * kGroups + ng) * 32, arow[ng] + at, in_k && has_a_row[ng]);
      }
    }
  };
#pragma unroll
  for (int j = 0; j < kStages; ++j) {
    if (j < my_steps) issue(j);
    copy_async_commit();  // empty groups keep the count: group j is step j
  }
  float acc[1][kGroups][4] = {};
  for (int j = 0; j < my_steps; ++j) {
    copy_async_wait<kStages - 1>();  // groups 0..j have landed
    const uint4* st = mine + (j % kStages) * kSlots * 32;
    uint4 v[kSlots];
#pragma unroll
    for (int s = 0; s < kSlots; ++s) v[s] = st[s * 32];
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const uint4 lo = v[2 * half], hi = v[2 * half + 1];
#pragma unroll
      for (int ng = 0; ng < kGroups; ++ng) {
        const uint4 x = v[4 + half * kGroups + ng];
        Mma<T>::run(acc[0][ng], lo.x, hi.x, lo.y, hi.y, x.x, x.y);
        Mma<T>::run(acc[0][ng], lo.z, hi.z, lo.w, hi.w, x.z, x.w);
      }
    }
    // The stage just read (its values are in registers, consumed above) takes
    // the step kStages ahead.
    if (j + kStages < my_steps) issue(j + kStages);
    copy_async_commit();
  }
  copy_async_wait<0>();
  reduce_and_store<T, kWarps, 1, kGroups>(acc, d, m, n, n0, slices);
}

// Above 48 KB of dynamic shared memory a kernel must opt in, once per device: `opt_in(dev)` does
// it the first time a device launches the kernel whose `opted` (one bit per device) this is.
template <class OptIn>
cudaError_t opt_in_once_per_device(std::atomic<uint64_t>& opted, OptIn&& opt_in) {
  int dev = 0;
  cudaGetDevice(&dev);
  const uint64_t bit = uint64_t{1} << (dev & 63);
  if (!(opted.load(std::memory_order_relaxed) & bit)) {
    const cudaError_t err = opt_in(dev);
    if (err != cudaSuccess) return err;
    opted.fetch_or(bit, std::memory_order_relaxed);
  }
  return cudaSuccess;
}

template <class T, int kGroups, int kWarps, int kStages>
cudaError_t launch_async(const gemm::Problem& p, const Slices& slices, cudaStream_t stream) {
  constexpr int kSmem = kWarps * kStages * kAsyncSlots<kGroups> * 32 * 16;
  static std::atomic<uint64_t> opted{0};
  const cudaError_t err = opt_in_once_per_device(opted, [](int) {
    return cudaFuncSetAttribute(gemv_async_kernel<T, kWarps, kStages, kGroups>,
                                cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem);
  });
  if (err != cudaSuccess) return err;
  const dim3 grid(static_cast<unsigned>((p.n + 15) / 16), static_cast<unsigned>(slices.count));
  gemv_async_kernel<T, kWarps, kStages, kGroups><<<grid, kWarps * 32, kSmem, stream>>>(
      static_cast<const T*>(p.a), static_cast<const T*>(p.b), static_cast<T*>(p.d), p.m, p.n, p.k,
      slices);
  return cudaGetLastError();
}

// The row-split GEMV (variants "rows_w<warps>u<unroll>", session 9), for 9 to 16 rows of A
// where the K-split variants above read 3.3 TB/s against M=1's 3.8: there every warp of a
// block reads A's fragments of its own K stretch from L2 (A once per block for 16-64 B rows)
// and the two groups of A rows take ~200 registers (8 warps per SM). Here the warps of a block
// split B's rows instead (each warp one 16-row tile, a contiguous stretch of K for each of its
// rows) and share A: the block's K slice of A (at most 16 rows) is staged once into shared
// memory, so the registers hold only B in flight (128 per thread: 16 warps per SM) and A's L2
// traffic is once per 16 * warps rows. K is split over the `splits` blocks of a cluster
// (blockIdx.y, the cluster's rank) so that 8192 weight rows still fill every SM; rank 0 adds
// the other blocks' fp32 partials through distributed shared memory in rank order (the same
// bits whatever the timing; no workspace, no global traffic).
__device__ __forceinline__ void cluster_sync_all() {
  asm volatile("barrier.cluster.arrive.release.aligned;\n\tbarrier.cluster.wait.acquire.aligned;" ::
                   : "memory");
}
__device__ __forceinline__ float4 load_cluster_shared(const float4* local, uint32_t rank) {
  uint32_t addr = static_cast<uint32_t>(__cvta_generic_to_shared(local)), remote;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(remote) : "r"(addr), "r"(rank));
  float4 v;
  asm volatile("ld.shared::cluster.v4.f32 {%0,%1,%2,%3}, [%4];"
               : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w)
               : "r"(remote)
               : "memory");
  return v;
}

// Shared memory of the row-split GEMV: A's slice (8 * groups rows, each `row_bytes`: the
// slice's 128-byte steps + 64 bytes, so that a quarter-warp's 16-byte reads of rows g and g+1
// fall in distinct banks), then the partials rank 0 reads (one float4 per warp, group, lane).
constexpr int kRowsPad = 64;
__host__ __device__ constexpr int rows_row_bytes(int slice_steps) {
  return slice_steps * 128 + kRowsPad;
}
__host__ __device__ constexpr int rows_smem_bytes(int warps, int groups, int slice_steps) {
  return 8 * groups * rows_row_bytes(slice_steps) + warps * groups * 32 * 16;
}

template <int kWarps, int kUnroll>
constexpr int kRowsMinBlocks = kUnroll <= 2 ? (16 / kWarps > 0 ? 16 / kWarps : 1) : 1;

template <class T, int kWarps, int kUnroll, int kGroups>
__global__ void __launch_bounds__(kWarps * 32, (kRowsMinBlocks<kWarps, kUnroll>))
    gemv_rows_kernel(const T* __restrict__ a, const T* __restrict__ b, T* __restrict__ d, int m,
                     int n, int k, int slice_steps) {
  constexpr int kStep = 64;
  extern __shared__ __align__(16) unsigned char rows_smem[];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int g = lane / 4, q = lane % 4;
  const int row_bytes = rows_row_bytes(slice_steps);
  unsigned char* a_smem = rows_smem;
  float4* partials = reinterpret_cast<float4*>(rows_smem + 8 * kGroups * row_bytes);

  // This block's K slice (cluster rank blockIdx.y of gridDim.y), in 64-element steps.
  const int steps = (k + kStep - 1) / kStep;
  const int splits = static_cast<int>(gridDim.y);
  // 32-bit: steps * splits < 2^31 for any K the shared slice takes (a 64-bit division is a call)
  const int first = static_cast<int>(static_cast<unsigned>(steps) * blockIdx.y / splits);
  const int nsteps =
      static_cast<int>(static_cast<unsigned>(steps) * (blockIdx.y + 1) / splits) - first;
  const int k0 = first * kStep;

  // Stage A's slice: 8 16-byte chunks per step and row; past K or past m: zeros.
  {
    const int chunks_per_row = nsteps * 8;
    const int total = 8 * kGroups * chunks_per_row;
    for (int i = threadIdx.x; i < total; i += kWarps * 32) {
      const int row = i / chunks_per_row, c = i - row * chunks_per_row;
      const int kc = k0 + c * 8;
      const bool valid = row < m && kc < k;
      const T* src = a + (valid ? static_cast<size_t>(row) * k + kc : 0);
      copy_async_global(a_smem + row * row_bytes + c * 16, src, valid);
    }
    copy_async_commit();
  }

  // This warp's 16 rows of B (g and g+8 per lane), clamped in bounds (never stored).
  const int n0 = (blockIdx.x * kWarps + warp) * 16;
  const T* brow[2] = {b + static_cast<size_t>(min(n0 + g, n - 1)) * k,
                      b + static_cast<size_t>(min(n0 + 8 + g, n - 1)) * k};

  struct Round {
    uint4 b[kUnroll][2][2];  // [step][half][row g / g+8]
  };
  auto load_round = [&](Round& r, int s0) {
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const int kc = k0 + (s0 + u) * kStep + half * 32 + q * 8;
        const bool in = s0 + u < nsteps && kc < k;
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          r.b[u][half][h] = in ? load_streamed(brow[h] + kc) : make_uint4(0, 0, 0, 0);
        }
      }
    }
  };
  float acc[kGroups][4];
#pragma unroll
  for (int ng = 0; ng < kGroups; ++ng) acc[ng][0] = acc[ng][1] = acc[ng][2] = acc[ng][3] = 0.f;
  auto mma_round = [&](const Round& r, int s0) {
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      if (s0 + u >= nsteps) break;  // B is zero there, but A's smem past the slice is not
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const uint4 lo = r.b[u][half][0], hi = r.b[u][half][1];
#pragma unroll
        for (int ng = 0; ng < kGroups; ++ng) {
          const uint4 x = *reinterpret_cast<const uint4*>(
              a_smem + (ng * 8 + g) * row_bytes + (s0 + u) * 128 + half * 64 + q * 16);
          Mma<T>::run(acc[ng], lo.x, hi.x, lo.y, hi.y, x.x, x.y);
          Mma<T>::run(acc[ng], lo.z, hi.z, lo.w, hi.w, x.z, x.w);
        }
      }
    }
  };

  // Two rounds of B are in flight while A lands; then each round's MMAs run while the next
  // round's loads are in flight (the registers double-buffered, as in gemv_kernel).
  Round cur, next;
  load_round(cur, 0);
  load_round(next, kUnroll);
  copy_async_wait<0>();
  __syncthreads();
  int s = 0;
  for (; s + kUnroll < nsteps; s += kUnroll) {
    mma_round(cur, s);
    cur = next;
    load_round(next, s + 2 * kUnroll);
  }
  mma_round(cur, s);

  if (splits > 1) {
#pragma unroll
    for (int ng = 0; ng < kGroups; ++ng) {
      partials[(warp * kGroups + ng) * 32 + lane] =
          make_float4(acc[ng][0], acc[ng][1], acc[ng][2], acc[ng][3]);
    }
    cluster_sync_all();  // every rank's partials are in its shared memory
    if (blockIdx.y == 0) {
      for (int r = 1; r < splits; ++r) {
#pragma unroll
        for (int ng = 0; ng < kGroups; ++ng) {
          const float4 v =
              load_cluster_shared(partials + (warp * kGroups + ng) * 32 + lane, static_cast<uint32_t>(r));
          acc[ng][0] += v.x, acc[ng][1] += v.y, acc[ng][2] += v.z, acc[ng][3] += v.w;
        }
      }
    }
    cluster_sync_all();  // rank 0 has read them: the other blocks may exit
    if (blockIdx.y != 0) return;
  }
#pragma unroll
  for (int ng = 0; ng < kGroups; ++ng) {
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const int col = n0 + (j >> 1) * 8 + g;
      const int row = ng * 8 + 2 * q + (j & 1);
      if (row < m && col < n) d[static_cast<size_t>(row) * n + col] = Mma<T>::from_float(acc[ng][j]);
    }
  }
}

template <class T, int kGroups, int kWarps, int kUnroll>
cudaError_t launch_rows(const gemm::Problem& p, int splits, cudaStream_t stream) {
  const int steps = (p.k + 63) / 64;
  const int slice_steps = (steps + splits - 1) / splits;
  const int smem = rows_smem_bytes(kWarps, kGroups, slice_steps);
  auto kernel = gemv_rows_kernel<T, kWarps, kUnroll, kGroups>;
  static std::atomic<uint64_t> opted{0};
  const cudaError_t err = opt_in_once_per_device(opted, [&](int dev) {
    int optin = 0;
    cudaError_t e = cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev);
    if (e == cudaSuccess) {
      e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, optin);
    }
    return e;
  });
  if (err != cudaSuccess) return err;
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3(static_cast<unsigned>((p.n + 16 * kWarps - 1) / (16 * kWarps)),
                     static_cast<unsigned>(splits), 1);
  cfg.blockDim = dim3(kWarps * 32, 1, 1);
  cfg.dynamicSmemBytes = static_cast<size_t>(smem);
  cfg.stream = stream;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeClusterDimension;
  attr[0].val.clusterDim.x = 1;
  attr[0].val.clusterDim.y = static_cast<unsigned>(splits);
  attr[0].val.clusterDim.z = 1;
  cfg.attrs = attr;
  cfg.numAttrs = 1;
  return cudaLaunchKernelEx(&cfg, kernel, static_cast<const T*>(p.a), static_cast<const T*>(p.b),
                            static_cast<T*>(p.d), p.m, p.n, p.k, slice_steps);
}

// The K-chunked GEMV (variants "ks_w<warps>r<row_tiles>", session 9, after run 2): the access
// pattern of the M=1 kernel (warps split K, each row read in 1-2 KB contiguous runs per round
// by the block: s9 run 2 measured the row-split variants, whose warps each read their own rows
// 256-512 B at a time, at 40.7-52.4 us against 35.7 at 1x8192x8192), with A out of the
// registers: round r of the block covers K steps [r * warps, (r + 1) * warps), and A's slice of
// that round (<= 16 rows) is staged into shared memory by cp.async two rounds ahead (double
// buffer, a barrier per round). Registers hold only B (16 warps per SM from 9 rows), A's L2
// traffic is once per 16 * row_tiles rows of B.
template <class T, int kWarps, int kRowTiles, int kGroups>
__global__ void __launch_bounds__(kWarps * 32, (16 / kWarps > 0 ? 16 / kWarps : 1))
    gemv_kchunk_kernel(const T* __restrict__ a, const T* __restrict__ b, T* __restrict__ d, int m,
                       int n, int k) {
  constexpr int kStep = 64;
  constexpr int kRowBytes = kWarps * 128 + kRowsPad;  // one round of one A row, padded
  constexpr int kChunkBytes = 8 * kGroups * kRowBytes;
  extern __shared__ __align__(16) unsigned char chunk_smem[];  // [2][8 * groups rows][kRowBytes]
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int g = lane / 4, q = lane % 4;
  const int n0 = blockIdx.x * 16 * kRowTiles;
  const int steps = (k + kStep - 1) / kStep;
  const int rounds = (steps + kWarps - 1) / kWarps;

  const T* brow[kRowTiles][2];
#pragma unroll
  for (int t = 0; t < kRowTiles; ++t) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      brow[t][h] = b + static_cast<size_t>(min(n0 + t * 16 + h * 8 + g, n - 1)) * k;
    }
  }
  // Round r's A (rows < m, k < K; zeros elsewhere) into buffer r % 2, one commit group.
  auto stage_a = [&](int r) {
    unsigned char* buf = chunk_smem + (r & 1) * kChunkBytes;
    constexpr int kChunksPerRow = kWarps * 8;  // 16-byte chunks: 8 per 64-element step
    for (int i = threadIdx.x; i < 8 * kGroups * kChunksPerRow; i += kWarps * 32) {
      const int row = i / kChunksPerRow, c = i % kChunksPerRow;
      const int kc = r * kWarps * kStep + c * 8;
      const bool valid = row < m && kc < k;
      const T* src = a + (valid ? static_cast<size_t>(row) * k + kc : 0);
      copy_async_global(buf + row * kRowBytes + c * 16, src, valid);
    }
    copy_async_commit();
  };
  struct Round {
    uint4 b[2][kRowTiles][2];  // [half][tile][row g / g+8]
  };
  auto load_round = [&](Round& rd, int r) {
    const int step = r * kWarps + warp;
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int kc = step * kStep + half * 32 + q * 8;
      const bool in = r < rounds && kc < k;
#pragma unroll
      for (int t = 0; t < kRowTiles; ++t) {
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          rd.b[half][t][h] = in ? load_streamed(brow[t][h] + kc) : make_uint4(0, 0, 0, 0);
        }
      }
    }
  };
  float acc[kRowTiles][kGroups][4];
#pragma unroll
  for (int t = 0; t < kRowTiles; ++t) {
#pragma unroll
    for (int ng = 0; ng < kGroups; ++ng) acc[t][ng][0] = acc[t][ng][1] = acc[t][ng][2] = acc[t][ng][3] = 0.f;
  }
  auto mma_round = [&](const Round& rd, int r) {
    const unsigned char* buf = chunk_smem + (r & 1) * kChunkBytes;
#pragma unroll
    for (int half = 0; half < 2; ++half) {
#pragma unroll
      for (int ng = 0; ng < kGroups; ++ng) {
        const uint4 x = *reinterpret_cast<const uint4*>(buf + (ng * 8 + g) * kRowBytes + warp * 128 +
                                                        half * 64 + q * 16);
#pragma unroll
        for (int t = 0; t < kRowTiles; ++t) {
          const uint4 lo = rd.b[half][t][0], hi = rd.b[half][t][1];
          Mma<T>::run(acc[t][ng], lo.x, hi.x, lo.y, hi.y, x.x, x.y);
          Mma<T>::run(acc[t][ng], lo.z, hi.z, lo.w, hi.w, x.z, x.w);
        }
      }
    }
  };

  stage_a(0);
  if (rounds > 1) stage_a(1);
  else
    copy_async_commit();  // keep one group per round
  Round cur, next;
  load_round(cur, 0);
  load_round(next, 1);
  for (int r = 0; r < rounds; ++r) {
    copy_async_wait<1>();  // this thread's copies of round r
    __syncthreads();       // everyone's
    mma_round(cur, r);
    __syncthreads();  // buffer r % 2 read by every warp: round r + 2 may take it
    if (r + 2 < rounds) stage_a(r + 2);
    else
      copy_async_commit();
    cur = next;
    load_round(next, r + 2);
  }
  copy_async_wait<0>();
  reduce_and_store<T, kWarps, kRowTiles, kGroups>(acc, d, m, n, n0, Slices{});
}

template <class T, int kGroups, int kWarps, int kRowTiles>
cudaError_t launch_kchunk(const gemm::Problem& p, cudaStream_t stream) {
  constexpr int kSmem = 2 * 8 * kGroups * (kWarps * 128 + kRowsPad);
  auto kernel = gemv_kchunk_kernel<T, kWarps, kRowTiles, kGroups>;
  static std::atomic<uint64_t> opted{0};
  const cudaError_t err = opt_in_once_per_device(opted, [&](int) {
    return cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem);
  });
  if (err != cudaSuccess) return err;
  const unsigned blocks = static_cast<unsigned>((p.n + 16 * kRowTiles - 1) / (16 * kRowTiles));
  kernel<<<blocks, kWarps * 32, kSmem, stream>>>(static_cast<const T*>(p.a),
                                                 static_cast<const T*>(p.b), static_cast<T*>(p.d),
                                                 p.m, p.n, p.k);
  return cudaGetLastError();
}

// blocks_per_sm: register variants by registers (u2r1: 128 per thread, 16
// warps per SM; w4u4r1 208, w8u2r2 200), cp.async variants by shared memory
// (warps * stages * 3 KB + the reduction's partials, of 227 KB).
// w8u1r4 (64 B rows per block, one step in flight per buffer): from 9 rows every block reads
// its A rows from L2 once per 16 B rows in the one-tile variants — as many bytes as B (device
// run 2 of session 6: M=16 at 3.0 TB/s where M=1 streams 3.8); four tiles read A once per 64.
constexpr Variant kVariants[kNumVariants] = {
    {2, 2, 1, 0, 8}, {4, 2, 1, 0, 4}, {8, 2, 1, 0, 2}, {16, 2, 1, 0, 1}, {4, 4, 1, 0, 2},
    {8, 2, 2, 0, 1}, {2, 1, 1, 6, 6}, {4, 1, 1, 4, 4}, {4, 1, 1, 8, 2},  {8, 1, 1, 4, 2},
    {8, 1, 4, 0, 1},
    // row-split (gemv_rows_kernel): 16 warps per SM at 128 registers, or 8 with 4 steps in flight
    {8, 2, 1, 0, 2, true}, {16, 2, 1, 0, 1, true}, {8, 4, 1, 0, 1, true},
    // K-chunked (gemv_kchunk_kernel): A's round staged in shared memory, 32 B rows per block
    {8, 1, 2, 0, 2, false, true}, {16, 1, 2, 0, 1, false, true},
};

template <class T, int G>
cudaError_t run_typed(const gemm::Problem& p, int index, const Slices& slices,
                      cudaStream_t stream) {
  switch (index) {
    case 0:
      return launch<T, G, 2, 2, 1>(p, stream);
    case 1:
      return launch<T, G, 4, 2, 1>(p, stream);
    case 2:
      return launch<T, G, 8, 2, 1>(p, stream);
    case 3:  // 512 threads of two groups would spill (128 registers each at most)
      if constexpr (G == 1) return launch<T, G, 16, 2, 1>(p, stream);
      return cudaErrorInvalidValue;
    case 4:
      return launch<T, G, 4, 4, 1>(p, stream);
    case 5:
      return launch<T, G, 8, 2, 2>(p, stream);
    case 6:
      return launch_async<T, G, 2, 6>(p, slices, stream);
    case 7:
      return launch_async<T, G, 4, 4>(p, slices, stream);
    case 8:
      return launch_async<T, G, 4, 8>(p, slices, stream);
    case 9:
      return launch_async<T, G, 8, 4>(p, slices, stream);
    case 10:
      return launch<T, G, 8, 1, 4>(p, stream);
    case 14:
      return launch_kchunk<T, G, 8, 2>(p, stream);
    case 15:
      return launch_kchunk<T, G, 16, 2>(p, stream);
    default:
      return cudaErrorInvalidValue;
  }
}

template <class T, int G>
cudaError_t run_rows_typed(const gemm::Problem& p, int index, int splits, cudaStream_t stream) {
  switch (index) {
    case 11:
      return launch_rows<T, G, 8, 2>(p, splits, stream);
    case 12:
      return launch_rows<T, G, 16, 2>(p, splits, stream);
    case 13:
      return launch_rows<T, G, 8, 4>(p, splits, stream);
    default:
      return cudaErrorInvalidValue;
  }
}

// Shared memory an SM offers one block (sm_90: 227 KB), and what the row-split GEMV needs.
constexpr int kSmemPerBlock = 227 * 1024;
constexpr int kMaxClusterSplits = 8;  // portable cluster size
int rows_smem_for(const gemm::Problem& p, const Variant& v, int splits) {
  const int steps = (p.k + 63) / 64;
  return rows_smem_bytes(v.warps, p.m <= 8 ? 1 : 2, (steps + splits - 1) / splits);
}

int tiles_of(const gemm::Problem& p, const Variant& v) {
  return (p.n + 16 * v.row_tiles - 1) / (16 * v.row_tiles);
}

}  // namespace

Variant variant(int index) {
  return index >= 0 && index < kNumVariants ? kVariants[index] : Variant{0, 0, 0, 0, 0};
}

std::string plan_name(const Plan& plan) {
  const Variant v = variant(plan.variant);
  std::string name =
      (v.rows ? "gemv/rows_w" : v.kchunk ? "gemv/ks_w" : "gemv/w") + std::to_string(v.warps);
  if (v.kchunk) {
    name += "r" + std::to_string(v.row_tiles);
  } else if (v.rows) {
    name += "u" + std::to_string(v.unroll);
  } else if (v.stages > 0) {
    name += "s" + std::to_string(v.stages);
  } else {
    name += "u" + std::to_string(v.unroll) + "r" + std::to_string(v.row_tiles);
  }
  if (plan.splits > 1) name += "/k" + std::to_string(plan.splits);
  return name;
}

Plan select_plan(int m, int n, int k, int sm_count) {
  // Device run 1 (benchmarks/NOTES.md, small M): w8u2r1 was the fastest or within
  // 2% of it at M <= 8 on every weight from 8192x1024 to 10240x8192 (3.7-3.8 TB/s
  // on the 8192-wide ones). Narrower weights leave SMs without a 16-row tile:
  // there the cp.async w4s4 blocks split K until one wave is full.
  const long tiles = (n + 15) / 16;
  const int sms = sm_count > 0 ? sm_count : 1;
  if (tiles < sms && tiles <= kMaxSplitTiles) {
    const int steps = (k + 63) / 64;
    // w4s4 holds 48 KB of stages per block (4 per SM); 64 KB from 9 rows on (3 per SM).
    const int per_sm = m <= 8 ? kVariants[7].blocks_per_sm : 3;
    const long fill = static_cast<long>(sms) * per_sm / tiles;
    const int splits = static_cast<int>(std::min<long>(fill, steps / 8));  // >= 2 steps per warp
    if (splits > 1) return {7, splits};
  }
  // From 9 rows a lane holds two groups of A fragments: 168 registers for w8u2r1
  // (one block, 8 warps per SM), 162 for w4u2r1 (three blocks, 12 warps): w4
  // keeps 1.5x the bytes of B in flight.
  return {m <= 8 ? 2 : 1, 1};
}

Plan plan_for_variant(int index, int m, int n, int k, int sm_count) {
  const Variant v = variant(index);
  if (!v.rows) return {index, 1};
  gemm::Problem p{};
  p.m = m, p.n = n, p.k = k;
  const long blocks_x = (static_cast<long>(n) + 16 * v.warps - 1) / (16 * v.warps);
  const long slots = static_cast<long>(sm_count > 0 ? sm_count : 1);
  const int steps = (k + 63) / 64;
  int fits = 0;  // the fewest splits whose A slice fits in shared memory
  for (int s = 1; s <= kMaxClusterSplits; ++s) {
    if (s > 1 && s > steps) break;
    const int smem = rows_smem_for(p, v, s);
    if (smem > kSmemPerBlock) continue;
    if (fits == 0) fits = s;
  }
  if (fits == 0) return {index, kMaxClusterSplits};  // can_implement says why
  int best = fits;
  for (int s = fits; s <= kMaxClusterSplits && (s == 1 || s <= steps); ++s) {
    // blocks per SM: registers (v.blocks_per_sm) and shared memory (1 KB reserved per block)
    const int per_sm = std::min(v.blocks_per_sm, kSmemPerBlock / (rows_smem_for(p, v, s) + 1024));
    if (blocks_x * s <= slots * std::max(per_sm, 1)) best = s;
  }
  return {index, best};
}

const char* can_implement(const gemm::Problem& p, const Plan& plan) {
  if (plan.variant < 0 || plan.variant >= kNumVariants) return "no such GEMV variant";
  if (p.m < 1 || p.m > kMaxRows) return "the GEMV kernel takes 1 to 16 rows of A";
  if (p.n < 1 || p.k < 1) return "n and k must be >= 1";
  if (p.n % 8 || p.k % 8) return "n and k must be multiples of 8 (16-byte loads)";
  if (p.batches != 1 || p.batch_rows != nullptr || p.group_end != nullptr)
    return "the GEMV kernel runs plain (not grouped) problems";
  const auto misaligned = [](const void* ptr) { return reinterpret_cast<uintptr_t>(ptr) % 16 != 0; };
  if (misaligned(p.a) || misaligned(p.b)) return "a and b must be 16-byte aligned";
  const Variant v = kVariants[plan.variant];
  if (p.m > 8 && plan.variant == 3) return "gemv/w16u2r1 takes at most 8 rows of A";
  if (plan.splits < 1 || plan.splits > 65535) return "splits must be in 1..65535";
  if (v.rows) {
    if (plan.splits > kMaxClusterSplits)
      return "the row-split GEMV variants split K over at most 8 blocks (one cluster)";
    if (rows_smem_for(p, v, plan.splits) > kSmemPerBlock)
      return "K is too long for the row-split GEMV's shared slice of A: split it more";
    return nullptr;
  }
  if (plan.splits > 1) {
    if (v.stages == 0) return "only the cp.async GEMV variants split K over blocks";
    if (tiles_of(p, v) > kMaxSplitTiles) return "too many 16-row tiles to split K (> 16384)";
  }
  return nullptr;
}

size_t workspace_size(const gemm::Problem& p, const Plan& plan) {
  const Variant v = variant(plan.variant);
  if (plan.splits <= 1 || v.rows) return 0;  // row-split: partials in the cluster's smem
  const int groups = p.m <= 8 ? 1 : 2;
  return kCounterBytes + static_cast<size_t>(tiles_of(p, v)) * plan.splits * v.row_tiles * groups *
                             32 * sizeof(float4);
}

cudaError_t run(const gemm::Problem& p, const Plan& plan, cudaStream_t stream, void* workspace) {
  if (can_implement(p, plan) != nullptr) return cudaErrorInvalidValue;
  if (kVariants[plan.variant].rows) {
    if (p.m <= 8) {
      return p.dtype == gemm::DType::kBF16
                 ? run_rows_typed<__nv_bfloat16, 1>(p, plan.variant, plan.splits, stream)
                 : run_rows_typed<__half, 1>(p, plan.variant, plan.splits, stream);
    }
    return p.dtype == gemm::DType::kBF16
               ? run_rows_typed<__nv_bfloat16, 2>(p, plan.variant, plan.splits, stream)
               : run_rows_typed<__half, 2>(p, plan.variant, plan.splits, stream);
  }
  Slices slices;
  if (plan.splits > 1) {
    if (workspace == nullptr) return cudaErrorInvalidValue;
    slices.count = plan.splits;
    slices.counters = static_cast<int*>(workspace);
    slices.partials =
        reinterpret_cast<float*>(static_cast<char*>(workspace) + kCounterBytes);
  }
  // One MMA per 8 rows of A: 1..8 rows take one group, 9..16 two.
  if (p.m <= 8) {
    return p.dtype == gemm::DType::kBF16
               ? run_typed<__nv_bfloat16, 1>(p, plan.variant, slices, stream)
               : run_typed<__half, 1>(p, plan.variant, slices, stream);
  }
  return p.dtype == gemm::DType::kBF16 ? run_typed<__nv_bfloat16, 2>(p, plan.variant, slices, stream)
                                       : run_typed<__half, 2>(p, plan.variant, slices, stream);
}

}  // namespace mkernel::gemv
