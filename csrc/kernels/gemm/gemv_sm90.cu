// The small-M (decode) kernel: D[M,N] = A[M,K] · B[N,K]ᵀ for M <= 8.
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
// Within a block the warps split K (each takes `unroll` consecutive 64-element
// steps, then skips the others'); their fp32 partials are added in warp order
// through shared memory, so the result does not depend on scheduling.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

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

// The block's result: acc[t] = {(row g, col 2q), (row g, col 2q+1), (row g+8,
// col 2q), (row g+8, col 2q+1)} of tile t in every warp (rows are B rows = D
// columns, cols are A rows = D rows), partial over the warp's share of K. The
// warps' partials are added in warp order (the same bits whatever the
// scheduling), then warp 0 stores the rows < m, columns < n.
template <class T, int kWarps, int kRowTiles>
__device__ __forceinline__ void reduce_and_store(float (&acc)[kRowTiles][4], T* __restrict__ d,
                                                 int m, int n, int n0) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int g = lane / 4, q = lane % 4;
  if constexpr (kWarps > 1) {
    __shared__ float partial[kWarps][kRowTiles][4][32];
#pragma unroll
    for (int t = 0; t < kRowTiles; ++t) {
#pragma unroll
      for (int j = 0; j < 4; ++j) partial[warp][t][j][lane] = acc[t][j];
    }
    __syncthreads();
    if (warp != 0) return;
#pragma unroll
    for (int t = 0; t < kRowTiles; ++t) {
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        float s = partial[0][t][j][lane];
#pragma unroll
        for (int w = 1; w < kWarps; ++w) s += partial[w][t][j][lane];
        acc[t][j] = s;
      }
    }
  }
#pragma unroll
  for (int t = 0; t < kRowTiles; ++t) {
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const int col = n0 + t * 16 + (j >> 1) * 8 + g;
      const int row = 2 * q + (j & 1);
      if (row < m && col < n) d[static_cast<size_t>(row) * n + col] = Mma<T>::from_float(acc[t][j]);
    }
  }
}

// Blocks resident per SM the variant is built for: the 2-step, 1-tile variants
// are held to 128 registers so that 16 warps fit on an SM whatever the block
// size (all blocks of a decode shape in one wave: a second, partial wave of
// equal blocks would leave most SMs idle at the end).
template <int kWarps, int kUnroll, int kRowTiles>
constexpr int kMinBlocks = kUnroll * kRowTiles <= 2 ? 16 / kWarps : 1;

template <class T, int kWarps, int kUnroll, int kRowTiles>
__global__ void __launch_bounds__(kWarps * 32, (kMinBlocks<kWarps, kUnroll, kRowTiles>))
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
  const bool has_a_row = g < m;  // columns >= m of the MMA multiply zeros
  const T* arow = a + static_cast<size_t>(has_a_row ? g : 0) * k;

  float acc[kRowTiles][4];
#pragma unroll
  for (int t = 0; t < kRowTiles; ++t) acc[t][0] = acc[t][1] = acc[t][2] = acc[t][3] = 0.f;

  // One round of a warp: kUnroll consecutive 64-element steps of its rows
  // (the warps of the block take neighbouring rounds, then skip kWarps rounds).
  // Registers are double-buffered: the next round's loads are issued before the
  // current round's MMAs, so they stay in flight across them (without the second
  // buffer ptxas sinks each load next to its MMA: ~2 loads in flight per lane).
  struct Round {
    uint4 b[kUnroll][2][kRowTiles][2];  // [step][half of the step][tile][row g / g+8]
    uint4 a[kUnroll][2];
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
        r.a[u][half] =
            in_k && has_a_row ? load_shared_operand(arow + kc) : make_uint4(0, 0, 0, 0);
      }
    }
  };
  auto mma_round = [&](const Round& r) {
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const uint4 x = r.a[u][half];
#pragma unroll
        for (int t = 0; t < kRowTiles; ++t) {
          const uint4 lo = r.b[u][half][t][0], hi = r.b[u][half][t][1];
          // Elements 0-3 of the lane's chunk carry labels (2q, 2q+1, 2q+8, 2q+9) in
          // both operands; elements 4-7 the same labels of a second MMA.
          Mma<T>::run(acc[t], lo.x, hi.x, lo.y, hi.y, x.x, x.y);
          Mma<T>::run(acc[t], lo.z, hi.z, lo.w, hi.w, x.z, x.w);
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

  reduce_and_store<T, kWarps, kRowTiles>(acc, d, m, n, n0);
}

template <class T, int kWarps, int kUnroll, int kRowTiles>
cudaError_t launch(const gemm::Problem& p, cudaStream_t stream) {
  constexpr int kBlockRows = 16 * kRowTiles;
  const unsigned blocks = static_cast<unsigned>((p.n + kBlockRows - 1) / kBlockRows);
  gemv_kernel<T, kWarps, kUnroll, kRowTiles><<<blocks, kWarps * 32, 0, stream>>>(
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
template <class T, int kWarps, int kStages>
__global__ void __launch_bounds__(kWarps * 32)
    gemv_async_kernel(const T* __restrict__ a, const T* __restrict__ b, T* __restrict__ d, int m,
                      int n, int k) {
  constexpr int kStep = 64;
  constexpr int kSlots = 6;  // per step and lane: B rows g, g+8 of both halves; A of both halves
  extern __shared__ uint4 stages[];  // [warp][stage][slot][lane]
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int g = lane / 4, q = lane % 4;
  const int n0 = blockIdx.x * 16;
  const T* brow[2] = {b + static_cast<size_t>(min(n0 + g, n - 1)) * k,
                      b + static_cast<size_t>(min(n0 + 8 + g, n - 1)) * k};
  const bool has_a_row = g < m;
  const T* arow = a + static_cast<size_t>(has_a_row ? g : 0) * k;
  uint4* mine = stages + static_cast<size_t>(warp) * kStages * kSlots * 32 + lane;

  const int steps = (k + kStep - 1) / kStep;
  const int my_steps = warp < steps ? (steps - warp + kWarps - 1) / kWarps : 0;
  // The warp's j-th step (global step j * kWarps + warp) into stage j % kStages.
  auto issue = [&](int j) {
    uint4* st = mine + (j % kStages) * kSlots * 32;
    const int step = j * kWarps + warp;
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int kc = step * kStep + half * 32 + q * 8;
      const bool in_k = kc < k;
      const int at = in_k ? kc : 0;
      copy_async_streamed(st + (2 * half) * 32, brow[0] + at, in_k);
      copy_async_streamed(st + (2 * half + 1) * 32, brow[1] + at, in_k);
      copy_async_cached(st + (4 + half) * 32, arow + at, in_k && has_a_row);
    }
  };
#pragma unroll
  for (int j = 0; j < kStages; ++j) {
    if (j < my_steps) issue(j);
    copy_async_commit();  // empty groups keep the count: group j is step j
  }
  float acc[1][4] = {{0.f, 0.f, 0.f, 0.f}};
  for (int j = 0; j < my_steps; ++j) {
    copy_async_wait<kStages - 1>();  // groups 0..j have landed
    const uint4* st = mine + (j % kStages) * kSlots * 32;
    uint4 v[kSlots];
#pragma unroll
    for (int s = 0; s < kSlots; ++s) v[s] = st[s * 32];
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const uint4 lo = v[2 * half], hi = v[2 * half + 1], x = v[4 + half];
      Mma<T>::run(acc[0], lo.x, hi.x, lo.y, hi.y, x.x, x.y);
      Mma<T>::run(acc[0], lo.z, hi.z, lo.w, hi.w, x.z, x.w);
    }
    // The stage just read (its values are in registers, consumed above) takes
    // the step kStages ahead.
    if (j + kStages < my_steps) issue(j + kStages);
    copy_async_commit();
  }
  copy_async_wait<0>();
  reduce_and_store<T, kWarps, 1>(acc, d, m, n, n0);
}

template <class T, int kWarps, int kStages>
cudaError_t launch_async(const gemm::Problem& p, cudaStream_t stream) {
  constexpr int kSmem = kWarps * kStages * 6 * 32 * 16;
  // Above 48 KB of dynamic shared memory a kernel must opt in, once per device.
  static std::atomic<uint64_t> opted{0};
  int dev = 0;
  cudaGetDevice(&dev);
  const uint64_t bit = uint64_t{1} << (dev & 63);
  if (!(opted.load(std::memory_order_relaxed) & bit)) {
    const cudaError_t err = cudaFuncSetAttribute(gemv_async_kernel<T, kWarps, kStages>,
                                                 cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem);
    if (err != cudaSuccess) return err;
    opted.fetch_or(bit, std::memory_order_relaxed);
  }
  const unsigned blocks = static_cast<unsigned>((p.n + 15) / 16);
  gemv_async_kernel<T, kWarps, kStages><<<blocks, kWarps * 32, kSmem, stream>>>(
      static_cast<const T*>(p.a), static_cast<const T*>(p.b), static_cast<T*>(p.d), p.m, p.n, p.k);
  return cudaGetLastError();
}

constexpr Variant kVariants[kNumVariants] = {
    {2, 2, 1, 0}, {4, 2, 1, 0}, {8, 2, 1, 0}, {16, 2, 1, 0}, {4, 4, 1, 0},
    {8, 2, 2, 0}, {2, 1, 1, 6}, {4, 1, 1, 4}, {4, 1, 1, 8}, {8, 1, 1, 4},
};
constexpr const char* kNames[kNumVariants] = {
    "gemv/w2u2r1", "gemv/w4u2r1", "gemv/w8u2r1", "gemv/w16u2r1", "gemv/w4u4r1",
    "gemv/w8u2r2", "gemv/w2s6",   "gemv/w4s4",   "gemv/w4s8",    "gemv/w8s4",
};

template <class T>
cudaError_t run_typed(const gemm::Problem& p, int index, cudaStream_t stream) {
  switch (index) {
    case 0:
      return launch<T, 2, 2, 1>(p, stream);
    case 1:
      return launch<T, 4, 2, 1>(p, stream);
    case 2:
      return launch<T, 8, 2, 1>(p, stream);
    case 3:
      return launch<T, 16, 2, 1>(p, stream);
    case 4:
      return launch<T, 4, 4, 1>(p, stream);
    case 5:
      return launch<T, 8, 2, 2>(p, stream);
    case 6:
      return launch_async<T, 2, 6>(p, stream);
    case 7:
      return launch_async<T, 4, 4>(p, stream);
    case 8:
      return launch_async<T, 4, 8>(p, stream);
    case 9:
      return launch_async<T, 8, 4>(p, stream);
    default:
      return cudaErrorInvalidValue;
  }
}

}  // namespace

Variant variant(int index) {
  return index >= 0 && index < kNumVariants ? kVariants[index] : Variant{0, 0, 0, 0};
}

const char* variant_name(int index) {
  return index >= 0 && index < kNumVariants ? kNames[index] : "gemv/unknown";
}

int select_variant(int m, int n, int k, int sm_count) {
  (void)m, (void)k;
  // Every block of the grid resident at once (one wave: the blocks are equal,
  // so a partial second wave would run on a fraction of the SMs), with as many
  // warps per block as that allows (more warps per row tile: fewer, shorter
  // K loops). The 2-step, 1-tile variants fit 16 warps per SM.
  const long tiles = (n + 15) / 16;
  const int sms = sm_count > 0 ? sm_count : 1;
  for (int i = 3; i > 0; --i) {  // w16, w8, w4
    if (tiles <= static_cast<long>(sms) * (16 / kVariants[i].warps)) return i;
  }
  return 0;  // w2: 8 blocks per SM
}

const char* can_implement(const gemm::Problem& p) {
  if (p.m < 1 || p.m > kMaxRows) return "the GEMV kernel takes 1 to 8 rows of A";
  if (p.n < 1 || p.k < 1) return "n and k must be >= 1";
  if (p.n % 8 || p.k % 8) return "n and k must be multiples of 8 (16-byte loads)";
  if (p.batches != 1 || p.batch_rows != nullptr || p.group_end != nullptr)
    return "the GEMV kernel runs plain (not grouped) problems";
  const auto misaligned = [](const void* ptr) { return reinterpret_cast<uintptr_t>(ptr) % 16 != 0; };
  if (misaligned(p.a) || misaligned(p.b)) return "a and b must be 16-byte aligned";
  return nullptr;
}

cudaError_t run(const gemm::Problem& p, int index, cudaStream_t stream) {
  if (can_implement(p) != nullptr) return cudaErrorInvalidValue;
  return p.dtype == gemm::DType::kBF16 ? run_typed<__nv_bfloat16>(p, index, stream)
                                       : run_typed<__half>(p, index, stream);
}

}  // namespace mkernel::gemv
