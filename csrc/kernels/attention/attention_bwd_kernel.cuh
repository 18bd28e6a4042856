// The native backward's kernels (attention_bwd_api.h): preprocess, main (dK, dV, dQ partials),
// dQ conversion. Shapes and operand views: attention_bwd_traits.hpp.
#pragma once

#include <cuda_runtime.h>

#include <cute/tensor.hpp>
#include <cutlass/numeric_types.h>

#include "attention_bwd_api.h"
#include "attention_bwd_traits.hpp"

namespace mkernel::attention::bwd {

using namespace cute;

constexpr float kLog2e = 1.4426950408889634f;

__device__ __forceinline__ float fast_exp2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

// 16-byte cp.async; `valid` false: the 16 bytes are zero-filled and nothing is read (ragged
// rows past s / s_kv).
__device__ __forceinline__ void cp_async_16_zfill(void* smem, const void* gmem, bool valid) {
  const uint32_t s = static_cast<uint32_t>(__cvta_generic_to_shared(smem));
  const int src_bytes = valid ? 16 : 0;
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(s), "l"(gmem), "r"(src_bytes)
               : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }
__device__ __forceinline__ void cp_async_wait_all() { asm volatile("cp.async.wait_group 0;" ::: "memory"); }

// Two adjacent elements (4-byte aligned: an even column of a row with an even length) as one
// 32-bit store.
template <class Element>
__device__ __forceinline__ void store_pair(Element* dst, float a, float b) {
  static_assert(sizeof(Element) == 2, "16-bit elements");
  struct alignas(4) Pair { Element x, y; };
  *reinterpret_cast<Pair*>(dst) = Pair{Element(a), Element(b)};
}

// Rows [0, kRows) x cols [0, kCols) of a row-major global tile (row stride in elements) into the
// swizzled smem tile sT; rows >= rows_valid become zeros.
template <int kRows, int kCols, int kThreads, class SmemTensor, class Element>
__device__ __forceinline__ void load_tile_async(SmemTensor&& sT, const Element* g,
                                                int64_t row_stride, int rows_valid, int tid) {
  constexpr int kChunksPerRow = kCols / 8;
  constexpr int kChunks = kRows * kChunksPerRow;
  static_assert(kChunks % kThreads == 0, "tile chunks: a multiple of the CTA's threads");
#pragma unroll
  for (int it = 0; it < kChunks / kThreads; ++it) {
    const int idx = it * kThreads + tid;
    const int r = idx / kChunksPerRow;
    const int c = (idx % kChunksPerRow) * 8;
    const bool ok = r < rows_valid;
    cp_async_16_zfill(&sT(r, c), ok ? g + r * row_stride + c : g, ok);
  }
}

// acc += A·B with both operands in shared memory (sA: M x K, sB: N x K, either major-ness via
// the copy atoms), one k-slice of fragments loaded ahead of its MMAs.
template <class AtomA, class AtomB, class TiledMma, class Acc, class SA, class SB>
__device__ __forceinline__ void gemm_ss(const TiledMma& mma, Acc& acc, const SA& sA, const SB& sB,
                                        int tid) {
  auto thr = mma.get_slice(tid);
  Tensor rA = thr.partition_fragment_A(sA);
  Tensor rB = thr.partition_fragment_B(sB);
  auto copy_a = make_tiled_copy_A(AtomA{}, mma);
  auto copy_b = make_tiled_copy_B(AtomB{}, mma);
  auto thr_a = copy_a.get_slice(tid);
  auto thr_b = copy_b.get_slice(tid);
  Tensor tsA = thr_a.partition_S(sA);
  Tensor trA = thr_a.retile_D(rA);
  Tensor tsB = thr_b.partition_S(sB);
  Tensor trB = thr_b.retile_D(rB);
  constexpr int kK = decltype(size<2>(rA))::value;
  copy(copy_a, tsA(_, _, 0), trA(_, _, 0));
  copy(copy_b, tsB(_, _, 0), trB(_, _, 0));
#pragma unroll
  for (int k = 0; k < kK; ++k) {
    if (k + 1 < kK) {
      copy(copy_a, tsA(_, _, k + 1), trA(_, _, k + 1));
      copy(copy_b, tsB(_, _, k + 1), trB(_, _, k + 1));
    }
    gemm(mma, rA(_, _, k), rB(_, _, k), acc);
  }
}

// dq_accum's element (b * heads + h, row i, column c): [b, h, s, d], or 64 x 64 tiles for the
// bulk reduce-add kernels (attention_bwd_api.h).
__device__ __forceinline__ int64_t dq_accum_offset(const BwdProblem& p, int64_t bh, int i, int c) {
  if (p.kernel == BwdKernel::kWgmmaBulkDq || bwd_kernel_warp_specialized(p.kernel))
    return dq_tiled_offset(bh, i, c, p.seq_q, p.head_dim);
  return (bh * p.seq_q + i) * p.head_dim + c;
}

// Rows the preprocess walks: s padded to 64 where the padded workspaces are written.
__host__ __device__ inline int preprocess_seq(const BwdProblem& p) {
  return p.lse_log2_pad != nullptr ? (p.seq_q + 63) / 64 * 64 : p.seq_q;
}

// lse·log2 e and D of query rows [m0, m0 + kRows) of head qh into shared memory (plain loads
// and stores by kThreads threads): lse·log2 e = +inf where the row is past s or sees no key
// (lse = -inf), so P = 2^(x - inf) = 0 there; D = 0 past s.
template <int kRows, int kThreads>
__device__ __forceinline__ void load_row_stats(const BwdProblem& p, int b, int qh, int m0,
                                               float* lse_log2, float* delta, int tid) {
  const int64_t row0 = (int64_t(b) * p.heads + qh) * p.seq_q + m0;
  for (int r = tid; r < kRows; r += kThreads) {
    float l = __int_as_float(0x7f800000);  // +inf
    float dl = 0.f;
    if (m0 + r < p.seq_q) {
      const float lse = p.lse[row0 + r];
      if (lse != -__int_as_float(0x7f800000)) l = lse * kLog2e;
      dl = p.delta[row0 + r];
    }
    lse_log2[r] = l;
    delta[r] = dl;
  }
}

// The preprocess and the dQ conversion are memory-bound (session 37's ncu, H100, S = 8192:
// 77 % / 59 % of DRAM peak with a lane's kHeadDim / 32 columns strided by 32, one 2- or 4-byte
// access each): a lane takes kHeadDim / 32 contiguous columns instead, one 4- / 8-byte load of O
// and dO and one 8- / 16-byte access to dq_accum. dq_tiled_offset swizzles aligned groups of 8
// columns, so a lane's columns stay contiguous (and aligned) in both dq_accum layouts.
template <int kHeadDim>
constexpr int kColsPerLane = kHeadDim / 32;
template <class T, int kN>
struct alignas(sizeof(T) * kN) LaneVec {
  T v[kN];
};
// One global access of a whole LaneVec (a struct of cutlass half / bfloat16 elements would
// otherwise be stored element by element).
template <int kBytes>
struct LaneWord;
template <>
struct LaneWord<4> {
  using type = uint32_t;
};
template <>
struct LaneWord<8> {
  using type = uint2;
};
template <>
struct LaneWord<16> {
  using type = uint4;
};
template <class V>
__device__ __forceinline__ V load_lane(const void* src) {
  const auto w = *static_cast<const typename LaneWord<sizeof(V)>::type*>(src);
  V v;
  memcpy(&v, &w, sizeof(V));
  return v;
}
template <class V>
__device__ __forceinline__ void store_lane(void* dst, const V& v) {
  typename LaneWord<sizeof(V)>::type w;
  memcpy(&w, &v, sizeof(V));
  *static_cast<typename LaneWord<sizeof(V)>::type*>(dst) = w;
}

// ---- preprocess: delta[b, h, i] = Σ_c dO·O (fp32); dq_accum[b, h, i, :] = 0; with the padded
// workspaces also lse·log2 e and D in [b, h, s_pad] (+inf / 0 on rows past s and lse·log2 e
// +inf where lse is -inf). A warp per row, rows in q's (b, i, h) order.
template <class Element, int kHeadDim>
__global__ void __launch_bounds__(256) attention_bwd_preprocess(const BwdProblem p) {
  constexpr int kCols = kColsPerLane<kHeadDim>;
  static_assert(kHeadDim % 32 == 0 && (kCols == 2 || kCols == 4), "d = 64 or 128");
  const int seq = preprocess_seq(p);
  const int64_t rows = int64_t(p.batch) * seq * p.heads;
  const int64_t row = int64_t(blockIdx.x) * 8 + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (row >= rows) return;
  const int hh = int(row % p.heads);
  const int64_t bi = row / p.heads;
  const int i = int(bi % seq);
  const int b = int(bi / seq);
  const int64_t bh = int64_t(b) * p.heads + hh;
  const float inf = __int_as_float(0x7f800000);
  if (i >= p.seq_q) {  // a padding row of the padded workspaces
    if (lane == 0) {
      p.lse_log2_pad[bh * seq + i] = inf;
      p.delta_pad[bh * seq + i] = 0.f;
    }
    return;
  }
  const int64_t q_row = (int64_t(b) * p.seq_q + i) * p.heads + hh;
  const int c0 = lane * kCols;
  using Cols = LaneVec<Element, kCols>;
  const Cols o = load_lane<Cols>(static_cast<const Element*>(p.out) + q_row * kHeadDim + c0);
  const Cols dout = load_lane<Cols>(static_cast<const Element*>(p.dout) + q_row * kHeadDim + c0);
  float acc = 0.f;
#pragma unroll
  for (int j = 0; j < kCols; ++j) acc += float(o.v[j]) * float(dout.v[j]);
#pragma unroll
  for (int off = 16; off > 0; off /= 2) acc += __shfl_xor_sync(0xffffffffu, acc, off);
  if (lane == 0) {
    p.delta[bh * p.seq_q + i] = acc;
    if (p.lse_log2_pad != nullptr) {
      const float lse = p.lse[bh * p.seq_q + i];
      p.lse_log2_pad[bh * seq + i] = lse == -inf ? inf : lse * kLog2e;
      p.delta_pad[bh * seq + i] = acc;
    }
  }
  store_lane(p.dq_accum + dq_accum_offset(p, bh, i, c0), LaneVec<float, kCols>{});
}

// ---- dQ conversion: dq[b, i, h, :] = scale * dq_accum[b, h, i, :] in q's dtype.
template <class Element, int kHeadDim>
__global__ void __launch_bounds__(256) attention_bwd_convert_dq(const BwdProblem p) {
  constexpr int kCols = kColsPerLane<kHeadDim>;
  const int64_t rows = int64_t(p.batch) * p.seq_q * p.heads;
  const int64_t row = int64_t(blockIdx.x) * 8 + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (row >= rows) return;
  const int hh = int(row % p.heads);
  const int64_t bi = row / p.heads;
  const int i = int(bi % p.seq_q);
  const int b = int(bi / p.seq_q);
  const int64_t bh = int64_t(b) * p.heads + hh;
  const int c0 = lane * kCols;
  const auto acc = load_lane<LaneVec<float, kCols>>(p.dq_accum + dq_accum_offset(p, bh, i, c0));
  LaneVec<Element, kCols> dq;
#pragma unroll
  for (int j = 0; j < kCols; ++j) dq.v[j] = Element(acc.v[j] * p.softmax_scale);
  store_lane(static_cast<Element*>(p.dq) + row * kHeadDim + c0, dq);
}

// ---- main: CTA (key block n, kv head, batch). Roles of one step (query block m of query head
// qh): the whole CTA loads (cp.async, one step ahead), computes S and dP, forms P and dS in
// registers, stores them to smem, then runs the three gradient GEMMs; dQ's partial goes to
// dq_accum by fp32 atomics (red.global.add), dK/dV stay in registers until the epilogue.
template <class T>
__global__ void __launch_bounds__(T::kThreads, 1) attention_bwd_main(const BwdProblem p) {
  using Element = typename T::Element;
  constexpr int kM = T::kBlockM, kN = T::kBlockN, kD = T::kHeadDim;
  extern __shared__ __align__(128) unsigned char smem_raw[];
  auto& ss = *reinterpret_cast<typename T::SharedStorage*>(smem_raw);
  const int tid = threadIdx.x;
  const int n_block = blockIdx.x, hkv = blockIdx.y, b = blockIdx.z;
  const int n0 = n_block * kN;
  const int s = p.seq_q, skv = p.seq_kv;
  const int group = p.heads / p.heads_kv;
  const int64_t q_row_stride = int64_t(p.heads) * kD;
  const int64_t kv_row_stride = int64_t(p.heads_kv) * kD;
  const float scale_log2 = p.softmax_scale * kLog2e;

  // Causal: query blocks before m_begin see none of this block's keys (i + s_kv - s < n0).
  const int m_begin = T::kCausal ? max(0, n0 - (skv - s)) / kM : 0;
  const int m_count = max(0, (s + kM - 1) / kM - m_begin);
  const int steps = group * m_count;

  Tensor sK = make_tensor(make_smem_ptr(ss.k), typename T::SmemLayoutKV{});
  Tensor sV = make_tensor(make_smem_ptr(ss.v), typename T::SmemLayoutKV{});
  Tensor sKt = make_tensor(make_smem_ptr(ss.k), typename T::SmemLayoutKt{});
  Tensor sP = make_tensor(make_smem_ptr(ss.p), typename T::SmemLayoutPdS{});
  Tensor sdS = make_tensor(make_smem_ptr(ss.ds), typename T::SmemLayoutPdS{});
  Tensor sPt = make_tensor(make_smem_ptr(ss.p), typename T::SmemLayoutPdSt{});
  Tensor sdSt = make_tensor(make_smem_ptr(ss.ds), typename T::SmemLayoutPdSt{});

  {
    const int64_t kv_off = (int64_t(b) * skv + n0) * kv_row_stride + int64_t(hkv) * kD;
    load_tile_async<kN, kD, T::kThreads>(sK, static_cast<const Element*>(p.k) + kv_off,
                                         kv_row_stride, skv - n0, tid);
    load_tile_async<kN, kD, T::kThreads>(sV, static_cast<const Element*>(p.v) + kv_off,
                                         kv_row_stride, skv - n0, tid);
  }

  // Loads of step `step` into ring stage `stage`: Q and dO by cp.async, lse (as lse·log2 e,
  // +inf where the row is past s or sees no key, so P = 2^(x - inf) = 0) and D by plain loads.
  auto issue_step = [&](int step, int stage) {
    const int qh = hkv * group + step / m_count;
    const int m0 = (m_begin + step % m_count) * kM;
    const int64_t q_off = (int64_t(b) * s + m0) * q_row_stride + int64_t(qh) * kD;
    load_tile_async<kM, kD, T::kThreads>(
        make_tensor(make_smem_ptr(ss.q[stage]), typename T::SmemLayoutQ{}),
        static_cast<const Element*>(p.q) + q_off, q_row_stride, s - m0, tid);
    load_tile_async<kM, kD, T::kThreads>(
        make_tensor(make_smem_ptr(ss.dout[stage]), typename T::SmemLayoutQ{}),
        static_cast<const Element*>(p.dout) + q_off, q_row_stride, s - m0, tid);
    cp_async_commit();
    load_row_stats<kM, T::kThreads>(p, b, qh, m0, ss.lse_log2[stage], ss.delta[stage], tid);
  };

  typename T::TiledMmaSdP mma_sdp;
  typename T::TiledMmadKV mma_dkv;
  typename T::TiledMmadQ mma_dq;
  auto thr_sdp = mma_sdp.get_slice(tid);
  auto thr_dkv = mma_dkv.get_slice(tid);
  auto thr_dq = mma_dq.get_slice(tid);

  Tensor acc_dk = partition_fragment_C(mma_dkv, Shape<Int<kN>, Int<kD>>{});
  Tensor acc_dv = partition_fragment_C(mma_dkv, Shape<Int<kN>, Int<kD>>{});
  clear(acc_dk);
  clear(acc_dv);
  Tensor tScS = thr_sdp.partition_C(make_identity_tensor(Shape<Int<kM>, Int<kN>>{}));
  Tensor tSsP = thr_sdp.partition_C(sP);
  Tensor tSsdS = thr_sdp.partition_C(sdS);

  if (steps > 0) issue_step(0, 0);
  for (int step = 0; step < steps; ++step) {
    const int stage = step & 1;
    const int qh = hkv * group + step / m_count;
    const int m0 = (m_begin + step % m_count) * kM;
    cp_async_wait_all();  // this step's Q/dO (and, at step 0, K/V)
    __syncthreads();      // ... visible to all; every thread done with step - 1's smem
    if (step + 1 < steps) issue_step(step + 1, stage ^ 1);

    Tensor sQ = make_tensor(make_smem_ptr(ss.q[stage]), typename T::SmemLayoutQ{});
    Tensor sdO = make_tensor(make_smem_ptr(ss.dout[stage]), typename T::SmemLayoutQ{});
    Tensor sQt = make_tensor(make_smem_ptr(ss.q[stage]), typename T::SmemLayoutQt{});
    Tensor sdOt = make_tensor(make_smem_ptr(ss.dout[stage]), typename T::SmemLayoutQt{});

    // S = Q·Kᵀ, then P in place of S (fp32) and to smem, then dP = dO·Vᵀ and dS = P ∘ (dP - D):
    // the two GEMMs one after the other, so their fragment loads are not all in flight together.
    const float* lse_log2 = ss.lse_log2[stage];
    const float* delta = ss.delta[stage];
    const int diag = skv - s;  // query i sees key j iff j <= i + diag (causal)
    Tensor acc_s = partition_fragment_C(mma_sdp, Shape<Int<kM>, Int<kN>>{});
    clear(acc_s);
    gemm_ss<typename T::LdsmN, typename T::LdsmN>(mma_sdp, acc_s, sQ, sK, tid);
    // P = 2^(S·scale·log2 e - lse·log2 e), masked (keys past s_kv; causal). The mma.sync C
    // fragment holds (row, col), (row, col + 1) at flat indices 2j, 2j + 1 (SM80_16x8_Row's
    // value mode): each pair goes to smem as one 32-bit store (the swizzle keeps 8-element runs
    // contiguous).
#pragma unroll
    for (int j = 0; j < size(acc_s) / 2; ++j) {
      const int r = get<0>(tScS(2 * j));
      const int c = get<1>(tScS(2 * j));
      const float row_lse = lse_log2[r];
      const int last_key = T::kCausal ? min(skv - 1, m0 + r + diag) : skv - 1;
      const int key = n0 + c;
      acc_s(2 * j) = key <= last_key ? fast_exp2(acc_s(2 * j) * scale_log2 - row_lse) : 0.f;
      acc_s(2 * j + 1) = key + 1 <= last_key ? fast_exp2(acc_s(2 * j + 1) * scale_log2 - row_lse) : 0.f;
      store_pair(&tSsP(2 * j), acc_s(2 * j), acc_s(2 * j + 1));
    }
    Tensor acc_dp = partition_fragment_C(mma_sdp, Shape<Int<kM>, Int<kN>>{});
    clear(acc_dp);
    gemm_ss<typename T::LdsmN, typename T::LdsmN>(mma_sdp, acc_dp, sdO, sV, tid);
#pragma unroll
    for (int j = 0; j < size(acc_s) / 2; ++j) {  // dS = P ∘ (dP - D)
      const float row_delta = delta[get<0>(tScS(2 * j))];
      store_pair(&tSsdS(2 * j), acc_s(2 * j) * (acc_dp(2 * j) - row_delta),
                 acc_s(2 * j + 1) * (acc_dp(2 * j + 1) - row_delta));
    }
    __syncthreads();  // P and dS in smem for the transposed reads

    // dV += Pᵀ·dO, dK += dSᵀ·Q.
    gemm_ss<typename T::LdsmT, typename T::LdsmT>(mma_dkv, acc_dv, sPt, sdOt, tid);
    gemm_ss<typename T::LdsmT, typename T::LdsmT>(mma_dkv, acc_dk, sdSt, sQt, tid);

    // dQ (unscaled) = dS·K, added to dq_accum[b, qh, m0 + r, :].
    Tensor acc_dq = partition_fragment_C(mma_dq, Shape<Int<kM>, Int<kD>>{});
    clear(acc_dq);
    gemm_ss<typename T::LdsmN, typename T::LdsmT>(mma_dq, acc_dq, sdS, sKt, tid);
    Tensor tQcQ = thr_dq.partition_C(make_identity_tensor(Shape<Int<kM>, Int<kD>>{}));
    float* dqa = p.dq_accum + ((int64_t(b) * p.heads + qh) * s + m0) * kD;
#pragma unroll
    for (int j = 0; j < size(acc_dq) / 2; ++j) {  // column pairs, as above: 8-byte atomics
      const int r = get<0>(tQcQ(2 * j));
      if (m0 + r < s) {
        atomicAdd(reinterpret_cast<float2*>(dqa + r * kD + get<1>(tQcQ(2 * j))),
                  make_float2(acc_dq(2 * j), acc_dq(2 * j + 1)));
      }
    }
  }

  // Epilogue: dK (scaled) and dV in the input dtype, rows past s_kv dropped.
  Tensor tKcK = thr_dkv.partition_C(make_identity_tensor(Shape<Int<kN>, Int<kD>>{}));
  const int64_t kv_off = (int64_t(b) * skv + n0) * kv_row_stride + int64_t(hkv) * kD;
  Element* dk = static_cast<Element*>(p.dk) + kv_off;
  Element* dv = static_cast<Element*>(p.dv) + kv_off;
#pragma unroll
  for (int j = 0; j < size(acc_dk) / 2; ++j) {  // column pairs, as above
    const int r = get<0>(tKcK(2 * j));
    const int c = get<1>(tKcK(2 * j));
    if (n0 + r < skv) {
      store_pair(dk + r * kv_row_stride + c, acc_dk(2 * j) * p.softmax_scale,
                 acc_dk(2 * j + 1) * p.softmax_scale);
      store_pair(dv + r * kv_row_stride + c, acc_dv(2 * j), acc_dv(2 * j + 1));
    }
  }
}

}  // namespace mkernel::attention::bwd
