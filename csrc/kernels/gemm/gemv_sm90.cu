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

  // acc[t] = {(row g, col 2q), (row g, col 2q+1), (row g+8, col 2q), (row g+8, col 2q+1)}
  // of tile t; rows are B rows (D columns), cols are A rows (D rows).
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
        for (int w = 1; w < kWarps; ++w) s += partial[w][t][j][lane];  // fixed order: same bits
        acc[t][j] = s;
      }
    }
  }
#pragma unroll
  for (int t = 0; t < kRowTiles; ++t) {
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const int col = n0 + t * 16 + (j >> 1) * 8 + g;  // column of D (row of B)
      const int row = 2 * q + (j & 1);                 // row of D (row of A)
      if (row < m && col < n) d[static_cast<size_t>(row) * n + col] = Mma<T>::from_float(acc[t][j]);
    }
  }
}

template <class T, int kWarps, int kUnroll, int kRowTiles>
cudaError_t launch(const gemm::Problem& p, cudaStream_t stream) {
  constexpr int kBlockRows = 16 * kRowTiles;
  const unsigned blocks = static_cast<unsigned>((p.n + kBlockRows - 1) / kBlockRows);
  gemv_kernel<T, kWarps, kUnroll, kRowTiles><<<blocks, kWarps * 32, 0, stream>>>(
      static_cast<const T*>(p.a), static_cast<const T*>(p.b), static_cast<T*>(p.d), p.m, p.n, p.k);
  return cudaGetLastError();
}

constexpr Variant kVariants[kNumVariants] = {
    {2, 2, 1}, {4, 2, 1}, {8, 2, 1}, {16, 2, 1}, {4, 4, 1}, {8, 2, 2},
};
constexpr const char* kNames[kNumVariants] = {
    "gemv/w2u2r1", "gemv/w4u2r1", "gemv/w8u2r1", "gemv/w16u2r1", "gemv/w4u4r1", "gemv/w8u2r2",
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
    default:
      return cudaErrorInvalidValue;
  }
}

}  // namespace

Variant variant(int index) {
  return index >= 0 && index < kNumVariants ? kVariants[index] : Variant{0, 0, 0};
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
