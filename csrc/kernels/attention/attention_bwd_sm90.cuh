// The native backward's main kernel on wgmma (sm_90a): dK, dV and dQ's partials of one block of
// 128 keys (attention_bwd_api.h has the math; attention_bwd_sm90_traits.hpp the shapes, the
// operands and why S and dP are computed transposed). The preprocess (D, dq_accum zeroed) and
// dQ's conversion kernels are attention_bwd_kernel.cuh's.
//
// Two kernels share the step (backward_step): attention_bwd_main_sm90, where all 256 threads load
// the next query block's Q and dO by cp.async while the current one is computed (a two-stage
// ring, a CTA barrier per step), and attention_bwd_main_sm90_ws (Traits::kWarpSpecialized), where
// a producer warpgroup loads by TMA into an mbarrier pipeline. The two consumer warpgroups run
// the same step on their own 64 keys:
//   1. S^T and dP^T issued back to back (SS wgmma); P^T formed while dP^T still runs;
//   2. dS^T = P^T ∘ (dP^T - D), stored to shared memory; dV += P^T·dO and dK += dS^T·Q issued
//      from registers (RS);
//   3. once both warpgroups' dS is in shared memory (d = 128: dQ's columns are split, each sums
//      both key halves) or its own is (d = 64: split by keys), dQ = dS·K;
//   4. dQ's 64 x 64 fp32 partial added to dq_accum by float2 atomics (red.global.add), or
//      (Traits::kBulkDq) staged in shared memory and added by one bulk reduce-add.
// Traits::kDqWarp (the warp-specialized kernel only) takes FA3's order instead: dV's GEMM, then
// dQ's (once both dS are in shared memory), then dK's, and dQ's partial is stored while dK's
// GEMM runs; a warp of the producer warpgroup issues the bulk reduce-adds, so the consumers
// never wait on one. Its causal CTAs run longest first (bwd_tile_coord).
#pragma once

#include <cuda_runtime.h>
#include <cutlass/arch/barrier.h>
#include <cutlass/arch/reg_reconfig.h>
#include <cutlass/numeric_conversion.h>

#include <cute/tensor.hpp>
#include <cutlass/pipeline/pipeline.hpp>

#include "../comm/group_sync.cuh"
#include "attention_bwd_kernel.cuh"
#include "attention_bwd_sm90_traits.hpp"

namespace mkernel::attention::bwd {

// fp32 fragment -> Element fragment of the same layout (paired conversions).
template <class Element, class Tensor>
__device__ __forceinline__ auto to_element(Tensor const& t) {
  constexpr int N = decltype(size(t))::value;
  auto out = make_tensor_like<Element>(t);
  cutlass::NumericArrayConverter<Element, float, N> conv;
  *reinterpret_cast<cutlass::Array<Element, N>*>(out.data()) =
      conv(*reinterpret_cast<cutlass::Array<float, N> const*>(t.data()));
  return out;
}

// dQ's staging for the bulk reduce-add (Traits::kBulkDq): the non-tensor bulk copy of `bytes`
// from shared memory added (fp32) into global memory, its bulk group, and the waits: for the
// source to have been read (the buffer may be rewritten) or for the whole operation.
__device__ __forceinline__ void bulk_reduce_add_f32(float* gmem, const float* smem, int bytes) {
  const uint32_t s = static_cast<uint32_t>(__cvta_generic_to_shared(smem));
  asm volatile(
      "cp.reduce.async.bulk.global.shared::cta.bulk_group.add.f32 [%0], [%1], %2;" ::"l"(gmem),
      "r"(s), "r"(bytes)
      : "memory");
  asm volatile("cp.async.bulk.commit_group;" ::: "memory");
}
// The same with an L2 evict-last hint (the dQ warp's: a head's dq_accum rows take every one of its
// key blocks' partials and should stay in L2 between them, as FA3's dQ writer keeps them).
__device__ __forceinline__ void bulk_reduce_add_f32_keep(float* gmem, const float* smem,
                                                         int bytes) {
  const uint32_t s = static_cast<uint32_t>(__cvta_generic_to_shared(smem));
  constexpr uint64_t kEvictLast = 0x14F0000000000000ull;  // cute::TMA::CacheHintSm90::EVICT_LAST
  asm volatile(
      "cp.reduce.async.bulk.global.shared::cta.bulk_group.L2::cache_hint.add.f32 [%0], [%1], %2, "
      "%3;" ::"l"(gmem),
      "r"(s), "r"(bytes), "l"(kEvictLast)
      : "memory");
  asm volatile("cp.async.bulk.commit_group;" ::: "memory");
}
template <int kPending>
__device__ __forceinline__ void bulk_wait_read() {
  asm volatile("cp.async.bulk.wait_group.read %0;" ::"n"(kPending) : "memory");
}
__device__ __forceinline__ void bulk_wait_all() {
  asm volatile("cp.async.bulk.wait_group 0;" ::: "memory");
}

// bar.sync over one warpgroup's 128 threads (ids 1 and 2; 0 is __syncthreads'), and over both
// consumer warpgroups (id 3: the warp-specialized kernel's producer is not in it). Immediate ids:
// a register id makes ptxas reserve all 16 barriers.
__device__ __forceinline__ void warpgroup_barrier(int warp_group) {
  if (warp_group == 0) {
    asm volatile("bar.sync 1, 128;" ::: "memory");
  } else {
    asm volatile("bar.sync 2, 128;" ::: "memory");
  }
}
__device__ __forceinline__ void consumers_barrier() {
  asm volatile("bar.sync 3, 256;" ::: "memory");
}

// dQ's staging handshake (Traits::kDqWarp), between a consumer warpgroup (128 threads) and the
// dQ warp (32): barrier kDqFull + 2 wg + buf says staging buffer buf of warpgroup wg holds a
// partial (the warpgroup arrives, the dQ warp waits), kDqEmpty + 2 wg + buf that the bulk
// reduce-add has read it (the dQ warp arrives, the warpgroup waits before its next store there).
constexpr int kDqFull = 4;   // ids 4..7
constexpr int kDqEmpty = 8;  // ids 8..11
template <int kId, bool kSync>
__device__ __forceinline__ void dq_barrier_id() {
  if constexpr (kSync) {
    asm volatile("bar.sync %0, 160;" ::"n"(kId) : "memory");
  } else {
    asm volatile("bar.arrive %0, 160;" ::"n"(kId) : "memory");
  }
}
template <int kBase, bool kSync>
__device__ __forceinline__ void dq_barrier(int wg, int buf) {
  if (wg == 0) {
    if (buf == 0) {
      dq_barrier_id<kBase, kSync>();
    } else {
      dq_barrier_id<kBase + 1, kSync>();
    }
  } else {
    if (buf == 0) {
      dq_barrier_id<kBase + 2, kSync>();
    } else {
      dq_barrier_id<kBase + 3, kSync>();
    }
  }
}

// dQ's staging store: the 64 x 64 fp32 partial into `buf` in dq_tiled_offset's tile layout
// (column pairs; 8-float chunks XOR-swizzled by row % 8), rows past s too (their dS is 0 and the
// convert kernel never reads them).
template <class Acc, class Coord>
__device__ __forceinline__ void stage_dq(float* buf, const Acc& acc_dq, const Coord& tQcQ) {
#pragma unroll
  for (int j = 0; j < size(acc_dq) / 2; ++j) {
    const int r = get<0>(tQcQ(2 * j));
    const int c = get<1>(tQcQ(2 * j));
    *reinterpret_cast<float2*>(buf + r * 64 + (c ^ ((r % 8) * 8))) =
        make_float2(acc_dq(2 * j), acc_dq(2 * j + 1));
  }
}

// One bulk copy of `bytes` (a multiple of 16) from global to shared memory, completing on the
// transaction count of `mbar` (the warp-specialized kernel's lse·log2 e and D rows).
__device__ __forceinline__ void bulk_load(void* smem, const void* gmem, int bytes, uint64_t* mbar) {
  const uint32_t s = static_cast<uint32_t>(__cvta_generic_to_shared(smem));
  const uint32_t b = static_cast<uint32_t>(__cvta_generic_to_shared(mbar));
  asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::
          "r"(s),
      "l"(gmem), "r"(bytes), "r"(b)
      : "memory");
}

// The accumulators a warpgroup keeps over its steps: dK and dV of its 64 keys (fp32).
template <class T>
struct KeyGrads {
  using Acc = decltype(partition_fragment_C(typename T::TiledMmadKV{},
                                            Shape<Int<T::kHalfN>, Int<T::kHeadDim>>{}));
  Acc dk, dv;
};

// The CTA's block of keys, kv head and K/V batch index z (in the ring mode source * batch + the
// queries' batch): blockIdx, or (Traits::kDqWarp with BwdProblem::tile_sections > 0) decoded from
// the 1-D grid's longest-first order.
struct CtaTile {
  int n_block, hkv, z;
};
template <class T>
__device__ __forceinline__ CtaTile cta_tile(const BwdProblem& p) {
  if constexpr (T::kDqWarp) {
    if (p.tile_sections > 0) {
      const int n_blocks = (p.seq_kv + T::kBlockN - 1) / T::kBlockN;
      const BwdTileCoord c =
          bwd_tile_coord(int(blockIdx.x), n_blocks, p.heads_kv * p.kv_batch, p.tile_sections);
      return {c.n_block, c.hb % p.heads_kv, c.hb / p.heads_kv};
    }
  }
  return {int(blockIdx.x), int(blockIdx.y), int(blockIdx.z)};
}

// Which (query, key) pairs of its problem a CTA computes: keys below key_end, queries from
// query_begin, and (kCausal && causal()) key <= query + diag; b_q: the batch of its queries
// (z is its K/V's batch: in the ring mode source * batch + b_q). Every value is recomputed from
// the parameters where used, not held: the step's registers are at the limit at d = 128 (a view
// held in registers cost 50-200 bytes of spills).
template <bool kRing>
struct CtaView;

template <>
struct CtaView<false> {  // the plain problem
  static constexpr bool kRing = false;
  const BwdProblem& p;
  int z;
  __device__ int b_q() const { return z; }
  __device__ int key_end() const { return p.seq_kv; }
  __device__ int query_begin() const { return 0; }
  __device__ bool causal() const { return true; }
  __device__ int diag() const { return p.seq_kv - p.seq_q; }
};

// The ring mode (BwdProblem::ring_world > 0; attention_bwd_api.h's ring_rule): source src =
// z / batch.
template <>
struct CtaView<true> {
  static constexpr bool kRing = true;
  const BwdProblem& p;
  int z;
  __device__ RingRule rule() const {
    return ring_rule(z / p.batch, p.ring_rank, p.causal, p.seq_q);
  }
  __device__ int b_q() const { return z % p.batch; }
  __device__ int key_end() const { return rule().key_end; }
  __device__ int query_begin() const { return rule().query_begin; }
  __device__ bool causal() const { return rule().causal; }
  __device__ int diag() const { return 0; }
};

// One consumer warpgroup's view of the CTA's shared memory as wgmma operands, built once per
// CTA (the descriptors live across the steps, as the forward's mainloop keeps them).
template <class T>
__device__ __forceinline__ auto make_operands(typename T::SharedStorage& ss, int wg, int wg_tid) {
  typename T::TiledMmaSdP mma_sdp;
  typename T::TiledMmadKV mma_dkv;
  auto thr_sdp = mma_sdp.get_thread_slice(wg_tid);
  auto thr_dkv = mma_dkv.get_thread_slice(wg_tid);
  Tensor sQ = make_tensor(make_smem_ptr(ss.q), typename T::SmemLayoutQ{});  // (M, d, stage)
  Tensor sdO = make_tensor(make_smem_ptr(ss.dout), typename T::SmemLayoutQ{});
  Tensor sQt = make_tensor(make_smem_ptr(ss.q), typename T::SmemLayoutQt{});  // (d, M, stage)
  Tensor sdOt = make_tensor(make_smem_ptr(ss.dout), typename T::SmemLayoutQt{});
  // This warpgroup's K and V rows as the A operands of S^T and dP^T; Q and dO (per stage) as
  // their B operands and, transposed, the RS GEMMs'.
  Tensor tSrK = thr_sdp.make_fragment_A(
      thr_sdp.partition_A(make_tensor(make_smem_ptr(ss.k[wg]), typename T::SmemLayoutRows{})));
  Tensor tSrV = thr_sdp.make_fragment_A(
      thr_sdp.partition_A(make_tensor(make_smem_ptr(ss.v[wg]), typename T::SmemLayoutRows{})));
  Tensor tSrQ = thr_sdp.make_fragment_B(thr_sdp.partition_B(sQ));  // (MMA, 1, d/16, stage)
  Tensor tSrdO = thr_sdp.make_fragment_B(thr_sdp.partition_B(sdO));
  Tensor tKVrQt = thr_dkv.make_fragment_B(thr_dkv.partition_B(sQt));  // (MMA, 1, M/16, stage)
  Tensor tKVrdOt = thr_dkv.make_fragment_B(thr_dkv.partition_B(sdOt));
  // (key in this warpgroup's half, query in the block) of each S^T value.
  Tensor tScS = thr_sdp.partition_C(make_identity_tensor(Shape<Int<T::kHalfN>, Int<T::kBlockM>>{}));
  struct Operands {
    decltype(tSrK) k;
    decltype(tSrV) v;
    decltype(tSrQ) q;
    decltype(tSrdO) dout;
    decltype(tKVrQt) qt;
    decltype(tKVrdOt) doutt;
    decltype(tScS) coord_s;
  };
  return Operands{tSrK, tSrV, tSrQ, tSrdO, tKVrQt, tKVrdOt, tScS};
}

// dQ (unscaled) = dS·K issued as one wgmma batch (committed, not waited for): d = 128, columns
// [64 wg, 64 wg + 64) over both key halves' dS; d = 64, all columns over this warpgroup's half.
// Both step orders (backward_step, dq_step_fa3_order) issue it once both dS are in shared memory.
template <class T>
__device__ __forceinline__ auto issue_dq_gemm(typename T::SharedStorage& ss,
                                              typename T::TiledMmadQ& mma_dq, int wg, int wg_tid,
                                              int ds_buf) {
  constexpr int kM = T::kBlockM;
  auto thr_dq = mma_dq.get_thread_slice(wg_tid);
  Tensor acc_dq = partition_fragment_C(mma_dq, Shape<Int<kM>, Int<T::kDqCols>>{});
  warpgroup_fence_operand(acc_dq);
  warpgroup_arrive();
  mma_dq.accumulate_ = GMMA::ScaleOut::Zero;
  constexpr int kDqHalves = T::kDqSplitKeys ? 1 : T::kWarpGroups;
#pragma unroll
  for (int hh = 0; hh < kDqHalves; ++hh) {
    const int h = T::kDqSplitKeys ? wg : hh;
    const int col_block = T::kDqSplitKeys ? 0 : wg;
    Tensor tQrdS = thr_dq.make_fragment_A(thr_dq.partition_A(
        make_tensor(make_smem_ptr(ss.ds[ds_buf][h]), typename T::SmemLayoutdS{})));
    Tensor tQrKt = thr_dq.make_fragment_B(thr_dq.partition_B(make_tensor(
        make_smem_ptr(ss.k[h] + col_block * T::kKBlockElems), typename T::SmemLayoutKBlockT{})));
#pragma unroll
    for (int kb = 0; kb < size<2>(tQrdS); ++kb) {
      cute::gemm(mma_dq, tQrdS(_, _, kb), tQrKt(_, _, kb), acc_dq);
      mma_dq.accumulate_ = GMMA::ScaleOut::One;
    }
  }
  warpgroup_commit_batch();
  return acc_dq;
}

// Traits::kDqWarp's end of a step (backward_step's 2-4 in FA3's order): dV += P^T·dO issued;
// once both warpgroups' dS is in shared memory, dQ = dS·K, then dK += dS^T·Q; dQ's partial is
// staged for the dQ warp while dK's GEMM runs. Every GEMM is complete on return.
template <class T, class Operands, class TP, class TdS>
__device__ __forceinline__ void dq_step_fa3_order(typename T::SharedStorage& ss, const Operands& op,
                                                  KeyGrads<T>& grads, TP& tPa, TdS& tdSa, int wg,
                                                  int wg_tid, int step, int stage, int ds_buf) {
  constexpr int kM = T::kBlockM;
  typename T::TiledMmadKV mma_dkv;
  typename T::TiledMmadQ mma_dq;
  auto thr_dq = mma_dq.get_thread_slice(wg_tid);
  mma_dkv.accumulate_ = GMMA::ScaleOut::One;
  warpgroup_fence_operand(grads.dv);
  warpgroup_fence_operand(tPa);
  warpgroup_arrive();
#pragma unroll
  for (int kb = 0; kb < size<2>(tPa); ++kb) {
    cute::gemm(mma_dkv, tPa(_, _, kb), op.doutt(_, _, kb, stage), grads.dv);
  }
  warpgroup_commit_batch();

  if constexpr (T::kDqSplitKeys) {
    warpgroup_barrier(wg);
  } else {
    consumers_barrier();  // both key halves' dS (the producer warpgroup is not in it)
  }
  Tensor acc_dq = issue_dq_gemm<T>(ss, mma_dq, wg, wg_tid, ds_buf);

  warpgroup_fence_operand(grads.dk);
  warpgroup_fence_operand(tdSa);
  warpgroup_arrive();
#pragma unroll
  for (int kb = 0; kb < size<2>(tdSa); ++kb) {
    cute::gemm(mma_dkv, tdSa(_, _, kb), op.qt(_, _, kb, stage), grads.dk);
  }
  warpgroup_commit_batch();

  warpgroup_wait<1>();  // dV and dQ; dK still runs
  warpgroup_fence_operand(acc_dq);
  warpgroup_fence_operand(grads.dv);
  const int buf = step & 1;
  Tensor tQcQ = thr_dq.partition_C(make_identity_tensor(Shape<Int<kM>, Int<T::kDqCols>>{}));
  dq_barrier<kDqEmpty, true>(wg, buf);  // the bulk reduce-add of step - 2 has read it
  stage_dq(ss.dq[2 * wg + buf], acc_dq, tQcQ);
  cutlass::arch::fence_view_async_shared();  // the bulk copy reads through the async proxy
  dq_barrier<kDqFull, false>(wg, buf);
  warpgroup_wait<0>();
  warpgroup_fence_operand(grads.dk);
}

// One step of one consumer warpgroup: query block m0 of query head qh against this warpgroup's
// 64 keys (from nw0), Q/dO/lse·log2 e/D in ring stage `stage`, dS into buffer `ds_buf` (the
// warp-specialized kernel alternates two). Every GEMM of the step is complete on return: the
// stage's Q and dO are no longer read.
template <class T, class View, class Operands>
__device__ __forceinline__ void backward_step(const BwdProblem& p, const View& view,
                                              typename T::SharedStorage& ss, const Operands& op,
                                              KeyGrads<T>& grads, int wg, int wg_tid, int step,
                                              int stage, int ds_buf, int qh, int m0, int nw0) {
  using Element = typename T::Element;
  constexpr int kM = T::kBlockM, kD = T::kHeadDim, kHalf = T::kHalfN;
  const int s = p.seq_q;
  const float scale_log2 = p.softmax_scale * kLog2e;
  const bool causal = T::kCausal && view.causal();  // query i sees key j iff j <= i + diag

  typename T::TiledMmaSdP mma_sdp;
  typename T::TiledMmadKV mma_dkv;
  typename T::TiledMmadQ mma_dq;
  auto thr_sdp = mma_sdp.get_thread_slice(wg_tid);
  auto thr_dq = mma_dq.get_thread_slice(wg_tid);
  mma_dkv.accumulate_ = GMMA::ScaleOut::One;
  auto const& tSrK = op.k;
  auto const& tSrV = op.v;
  auto const& tSrQ = op.q;
  auto const& tSrdO = op.dout;
  auto const& tKVrQt = op.qt;
  auto const& tKVrdOt = op.doutt;
  auto const& tScS = op.coord_s;
  // This warpgroup's dS through its (key, query) view.
  Tensor tSsdS = thr_sdp.partition_C(
      make_tensor(make_smem_ptr(ss.ds[ds_buf][wg]), typename T::SmemLayoutdSt{}));
  constexpr auto kALayout = T::a_operand_layout();
  static_assert(decltype(size(tScS))::value == decltype(size(kALayout))::value,
                "P^T and dS^T reuse the S^T accumulator's registers one to one");

  // 1. S^T = K_w·Q^T and dP^T = V_w·dO^T, two commit groups.
  Tensor acc_s = partition_fragment_C(mma_sdp, Shape<Int<kHalf>, Int<kM>>{});
  Tensor acc_dp = partition_fragment_C(mma_sdp, Shape<Int<kHalf>, Int<kM>>{});
  warpgroup_fence_operand(acc_s);
  warpgroup_fence_operand(acc_dp);
  warpgroup_arrive();
  mma_sdp.accumulate_ = GMMA::ScaleOut::Zero;
#pragma unroll
  for (int kb = 0; kb < size<2>(tSrK); ++kb) {
    cute::gemm(mma_sdp, tSrK(_, _, kb), tSrQ(_, _, kb, stage), acc_s);
    mma_sdp.accumulate_ = GMMA::ScaleOut::One;
  }
  warpgroup_commit_batch();
  mma_sdp.accumulate_ = GMMA::ScaleOut::Zero;
#pragma unroll
  for (int kb = 0; kb < size<2>(tSrV); ++kb) {
    cute::gemm(mma_sdp, tSrV(_, _, kb), tSrdO(_, _, kb, stage), acc_dp);
    mma_sdp.accumulate_ = GMMA::ScaleOut::One;
  }
  warpgroup_commit_batch();

  // P^T = 2^(S^T·scale·log2 e - lse·log2 e), masked (keys past key_end, queries before
  // query_begin, causal), while dP^T runs. Queries past s have lse·log2 e = +inf: P = 0, D = 0.
  warpgroup_wait<1>();
  warpgroup_fence_operand(acc_s);
  const float* lse_log2 = ss.lse_log2[stage];
  const float* delta = ss.delta[stage];
  // (The query bound only in the ring mode: `m0 + c >= 0` is not provable, and at d = 128 the
  // plain kernels' registers do not spare the compare.)
  const int key_end = view.key_end(), diag = view.diag();
  bool need_mask = nw0 + kHalf > key_end || (causal && nw0 + kHalf - 1 > m0 + diag);
  if constexpr (View::kRing) need_mask = need_mask || m0 < view.query_begin();
  // The mask in offsets from the thread's first value. The wgmma C layout places value i at the
  // thread's offset plus i's (thread 0's coordinates: compile-time constants), so with dr, dc
  // those constants, (key, query) = (nw0 + r0 + dr, m0 + c0 + dc) is visible iff dr < key_room
  // and, causal, dr - dc <= diag_room. dr takes 2 values a thread: the key bound folds into the
  // diagonal's room per dr, and a step without a mask opens every room; a value's test is then
  // one compare and one select, where the direct form took ~4 (s38's SASS: ~140 instructions a
  // thread a causal step). No branch: one around the mask cost every step its schedule (s39b/c).
  constexpr int kNever = -(1 << 29), kAlways = 1 << 29;
  typename T::TiledMmaSdP mma_sdp0;
  Tensor tScS0 =
      mma_sdp0.get_thread_slice(0).partition_C(make_identity_tensor(Shape<Int<kHalf>, Int<kM>>{}));
  const int r0 = get<0>(tScS(0)), c0 = get<1>(tScS(0));
  const int key_room = need_mask ? key_end - nw0 - r0 : kAlways;
  const int diag_room = need_mask && causal ? m0 + diag + c0 - nw0 - r0 : kAlways;
  const int query_room = need_mask ? view.query_begin() - m0 - c0 : kNever;  // ring: dc >= it
#pragma unroll
  for (int i = 0; i < size(acc_s); ++i) {
    const int dr = get<0>(tScS0(i)), dc = get<1>(tScS0(i));
    float x = fast_exp2(acc_s(i) * scale_log2 - lse_log2[get<1>(tScS(i))]);
    bool visible;
    if constexpr (T::kCausal) {
      visible = dr - dc <= (dr < key_room ? diag_room : kNever);
    } else {
      visible = dr < key_room;
    }
    if constexpr (View::kRing) visible = visible && dc >= query_room;
    acc_s(i) = visible ? x : 0.f;
  }
  warpgroup_wait<0>();
  warpgroup_fence_operand(acc_dp);
#pragma unroll
  for (int i = 0; i < size(acc_dp); ++i) {  // dS^T = P^T ∘ (dP^T - D), in place of dP^T
    acc_dp(i) = acc_s(i) * (acc_dp(i) - delta[get<1>(tScS(i))]);
  }

  auto p_elems = to_element<Element>(acc_s);
  auto ds_elems = to_element<Element>(acc_dp);

  // dS^T to shared memory (query pairs: one 32-bit store each, the values the RS GEMM uses),
  // before that GEMM is issued: the PTX ISA leaves any access to a pending wgmma's A registers
  // undefined.
  {
    const uint32_t* packed = reinterpret_cast<const uint32_t*>(ds_elems.data());
#pragma unroll
    for (int j = 0; j < size(acc_dp) / 2; ++j) {
      *reinterpret_cast<uint32_t*>(&tSsdS(2 * j)) = packed[j];
    }
  }
  cutlass::arch::fence_view_async_shared();

  // 2. dV += P^T·dO, dK += dS^T·Q with A from registers.
  Tensor tPa = make_tensor(p_elems.data(), kALayout);
  Tensor tdSa = make_tensor(ds_elems.data(), kALayout);
  if constexpr (T::kDqWarp) {
    dq_step_fa3_order<T>(ss, op, grads, tPa, tdSa, wg, wg_tid, step, stage, ds_buf);
    return;
  }
  warpgroup_fence_operand(grads.dv);
  warpgroup_fence_operand(grads.dk);
  warpgroup_fence_operand(tPa);
  warpgroup_fence_operand(tdSa);
  warpgroup_arrive();
#pragma unroll
  for (int kb = 0; kb < size<2>(tPa); ++kb) {
    cute::gemm(mma_dkv, tPa(_, _, kb), tKVrdOt(_, _, kb, stage), grads.dv);
  }
#pragma unroll
  for (int kb = 0; kb < size<2>(tdSa); ++kb) {
    cute::gemm(mma_dkv, tdSa(_, _, kb), tKVrQt(_, _, kb, stage), grads.dk);
  }
  warpgroup_commit_batch();

  // 3. dQ once every dS it reads is in shared memory.
  if constexpr (T::kDqSplitKeys) {
    warpgroup_barrier(wg);
  } else if constexpr (T::kWarpSpecialized) {
    consumers_barrier();  // both key halves' dS (the producer is not in it)
  } else {
    __syncthreads();  // both key halves' dS
  }

  Tensor acc_dq = issue_dq_gemm<T>(ss, mma_dq, wg, wg_tid, ds_buf);
  warpgroup_wait<0>();  // dQ, and the dV / dK GEMMs before it
  warpgroup_fence_operand(acc_dq);
  warpgroup_fence_operand(grads.dv);
  warpgroup_fence_operand(grads.dk);

  // 4. dQ's partial added to dq_accum (column pairs: 8-byte stores or atomics).
  Tensor tQcQ = thr_dq.partition_C(make_identity_tensor(Shape<Int<kM>, Int<T::kDqCols>>{}));
  const int dq_col0 = T::kDqSplitKeys ? 0 : wg * T::kDqCols;
  const int64_t bh = int64_t(view.b_q()) * p.heads + qh;
  if constexpr (T::kBulkDq) {
    // Staged in the tile layout of dq_tiled_offset (rows past s too: their dS is 0, and the
    // convert kernel never reads them), then one bulk reduce-add of the 16 KiB tile. The
    // buffer was last read by the reduce-add of step - 2.
    float* buf = ss.dq[2 * wg + (step & 1)];
    if (wg_tid == 0) bulk_wait_read<1>();
    warpgroup_barrier(wg);
    stage_dq(buf, acc_dq, tQcQ);
    cutlass::arch::fence_view_async_shared();  // the bulk copy reads through the async proxy
    warpgroup_barrier(wg);
    if (wg_tid == 0) {
      bulk_reduce_add_f32(p.dq_accum + dq_tiled_offset(bh, m0, dq_col0, s, kD), buf,
                          kM * T::kDqCols * int(sizeof(float)));
    }
  } else {
    float* dqa = p.dq_accum + (bh * s + m0) * kD + dq_col0;
#pragma unroll
    for (int j = 0; j < size(acc_dq) / 2; ++j) {
      const int r = get<0>(tQcQ(2 * j));
      if (m0 + r < s) {
        atomicAdd(reinterpret_cast<float2*>(dqa + r * kD + get<1>(tQcQ(2 * j))),
                  make_float2(acc_dq(2 * j), acc_dq(2 * j + 1)));
      }
    }
  }
}

// Epilogue of one warpgroup: its 64 rows of dK (scaled) and dV as Out (the input dtype; fp32 in
// the ring mode, whose partials are summed over the ranks in fp32), rows past s_kv dropped (keys
// no query sees: zeros); every bulk reduce-add done before the CTA's shared memory goes.
template <class Out>
__device__ __forceinline__ void store_grad_pair(Out* dst, float a, float b) {
  if constexpr (std::is_same_v<Out, float>) {
    *reinterpret_cast<float2*>(dst) = make_float2(a, b);
  } else {
    store_pair(dst, a, b);
  }
}
template <class T, class Out>
__device__ __forceinline__ void store_key_grads(const BwdProblem& p, const KeyGrads<T>& grads,
                                                const CtaTile& tile, int wg_tid, int nw0) {
  constexpr int kD = T::kHeadDim;
  if constexpr (T::kBulkDq) {
    if (wg_tid == 0) bulk_wait_all();
  }
  typename T::TiledMmadKV mma_dkv;
  Tensor tKcK = mma_dkv.get_thread_slice(wg_tid).partition_C(
      make_identity_tensor(Shape<Int<T::kHalfN>, Int<kD>>{}));
  const int64_t kv_row_stride = int64_t(p.heads_kv) * kD;
  int64_t z = tile.z;
  Out* dk = static_cast<Out*>(p.dk);
  Out* dv = static_cast<Out*>(p.dv);
  if constexpr (std::is_same_v<Out, float>) {
    if (p.ring_dk_dst[0] != nullptr) {  // dK/dV travelling: this rank's slot at the source
      const int src = tile.z / p.batch;
      z = tile.z - src * p.batch;
      dk = p.ring_dk_dst[src];
      dv = dk + p.ring_dv_offset;
    }
  }
  const int64_t kv_off = (z * p.seq_kv + nw0) * kv_row_stride + int64_t(tile.hkv) * kD;
  dk += kv_off;
  dv += kv_off;
#pragma unroll
  for (int j = 0; j < size(grads.dk) / 2; ++j) {
    const int r = get<0>(tKcK(2 * j));
    const int c = get<1>(tKcK(2 * j));
    if (nw0 + r < p.seq_kv) {
      store_grad_pair(dk + r * kv_row_stride + c, grads.dk(2 * j) * p.softmax_scale,
                      grads.dk(2 * j + 1) * p.softmax_scale);
      store_grad_pair(dv + r * kv_row_stride + c, grads.dv(2 * j), grads.dv(2 * j + 1));
    }
  }
}

// dK/dV travelling (BwdProblem::ring_dk_dst): once every thread of the warpgroup has stored its
// part of the 64-row partial at the source, one thread releases the tile's flag there — after
// a system-scope fence, since the owner may be another GPU's process reading through NVLink.
__device__ __forceinline__ void release_key_grads(const BwdProblem& p, const CtaTile& tile, int wg,
                                                  int wg_tid, int nw0) {
  if (nw0 >= p.seq_kv) return;  // a half past the shard: no rows, no flag (the owner's count)
  warpgroup_barrier(wg);
  if (wg_tid == 0) {
    const int src = tile.z / p.batch, bi = tile.z - src * p.batch;
    const uint64_t e = __ldg(p.ring_kv_epoch) + 1;  // the call's number (ring_kv_api.h)
    __threadfence_system();
    comm::st_release_sys(
        p.ring_dkv_flag[src] + ring_travel_flag(bi, tile.hkv, nw0, p.heads_kv, p.seq_kv), e);
  }
}

// The query blocks a CTA of keys [n0, n0 + kBlockN) walks: blocks before m_begin see none of
// its keys (causal: i + diag < n0; ring mode: i < query_begin), none at all when its first key
// is past key_end; steps = every query head of the GQA group x m_count.
struct StepRange {
  int m_begin, m_count, steps;
};
template <class T, class View>
__device__ __forceinline__ StepRange step_range(const BwdProblem& p, const View& view, int n0) {
  constexpr int kM = T::kBlockM;
  if constexpr (!View::kRing) {
    const int m_begin = T::kCausal ? max(0, n0 - (p.seq_kv - p.seq_q)) / kM : 0;
    const int m_count = max(0, (p.seq_q + kM - 1) / kM - m_begin);
    return {m_begin, m_count, (p.heads / p.heads_kv) * m_count};
  }
  int m_lo = (T::kCausal && view.causal()) ? max(0, n0 - view.diag()) : 0;
  m_lo = max(m_lo, view.query_begin());
  const int m_begin = m_lo / kM;
  const int m_count = n0 < view.key_end() ? max(0, (p.seq_q + kM - 1) / kM - m_begin) : 0;
  return {m_begin, m_count, (p.heads / p.heads_kv) * m_count};
}

// ---- cp.async kernel: CTA (key block, kv head, batch) of 256 threads.
template <class T, bool kRing>
__global__ void __launch_bounds__(T::kThreads, 1)
    attention_bwd_main_sm90(CUTE_GRID_CONSTANT const BwdProblem p) {
  static_assert(!T::kWarpSpecialized, "attention_bwd_main_sm90_ws");
  using Element = typename T::Element;
  constexpr int kM = T::kBlockM, kN = T::kBlockN, kD = T::kHeadDim, kHalf = T::kHalfN;
  extern __shared__ __align__(1024) unsigned char smem_sm90[];
  auto& ss = *reinterpret_cast<typename T::SharedStorage*>(smem_sm90);
  const int tid = threadIdx.x;
  const int wg = tid / 128;
  const int wg_tid = tid % 128;
  const CtaTile tile = cta_tile<T>(p);
  const int n0 = tile.n_block * kN, hkv = tile.hkv, b_kv = tile.z;
  const int nw0 = n0 + wg * kHalf;  // this warpgroup's first key
  const int s = p.seq_q, skv = p.seq_kv;
  const int group = p.heads / p.heads_kv;
  const int64_t q_row_stride = int64_t(p.heads) * kD;
  const int64_t kv_row_stride = int64_t(p.heads_kv) * kD;
  const CtaView<kRing> view{p, tile.z};
  const int b = view.b_q();
  const StepRange range = step_range<T>(p, view, n0);

#pragma unroll
  for (int h = 0; h < T::kWarpGroups; ++h) {
    const int64_t kv_off =
        (int64_t(b_kv) * skv + n0 + h * kHalf) * kv_row_stride + int64_t(hkv) * kD;
    const int valid = skv - n0 - h * kHalf;
    load_tile_async<kHalf, kD, T::kThreads>(
        make_tensor(make_smem_ptr(ss.k[h]), typename T::SmemLayoutRows{}),
        static_cast<const Element*>(p.k) + kv_off, kv_row_stride, valid, tid);
    load_tile_async<kHalf, kD, T::kThreads>(
        make_tensor(make_smem_ptr(ss.v[h]), typename T::SmemLayoutRows{}),
        static_cast<const Element*>(p.v) + kv_off, kv_row_stride, valid, tid);
  }

  Tensor sQ = make_tensor(make_smem_ptr(ss.q), typename T::SmemLayoutQ{});  // (M, d, stage)
  Tensor sdO = make_tensor(make_smem_ptr(ss.dout), typename T::SmemLayoutQ{});
  // Loads of step `step` into ring stage `stage`: Q and dO by cp.async, lse·log2 e and D by
  // plain loads and stores.
  auto issue_step = [&](int step, int stage) {
    const int qh = hkv * group + step / range.m_count;
    const int m0 = (range.m_begin + step % range.m_count) * kM;
    const int64_t q_off = (int64_t(b) * s + m0) * q_row_stride + int64_t(qh) * kD;
    load_tile_async<kM, kD, T::kThreads>(sQ(_, _, stage), static_cast<const Element*>(p.q) + q_off,
                                         q_row_stride, s - m0, tid);
    load_tile_async<kM, kD, T::kThreads>(
        sdO(_, _, stage), static_cast<const Element*>(p.dout) + q_off, q_row_stride, s - m0, tid);
    cp_async_commit();
    load_row_stats<kM, T::kThreads>(p, b, qh, m0, ss.lse_log2[stage], ss.delta[stage], tid);
  };

  const auto operands = make_operands<T>(ss, wg, wg_tid);
  KeyGrads<T> grads;
  clear(grads.dk);
  clear(grads.dv);
  if (range.steps > 0) issue_step(0, 0);
  for (int step = 0; step < range.steps; ++step) {
    const int stage = step & 1;
    cp_async_wait_all();  // this step's Q/dO (and, at step 0, K/V) from this thread's copies
    // cp.async wrote through the generic proxy; wgmma reads shared memory through the async one.
    cutlass::arch::fence_view_async_shared();
    __syncthreads();  // every thread's copies visible; every thread done with step - 1's smem
    if (step + 1 < range.steps) issue_step(step + 1, stage ^ 1);
    const int qh = hkv * group + step / range.m_count;
    const int m0 = (range.m_begin + step % range.m_count) * kM;
    backward_step<T>(p, view, ss, operands, grads, wg, wg_tid, step, stage, 0, qh, m0, nw0);
  }
  // A CTA without steps (the ring mode: keys no query sees) never committed its K/V copies, and
  // wait_group waits for committed groups only.
  cp_async_commit();
  cp_async_wait_all();
  store_key_grads<T, std::conditional_t<kRing, float, typename T::Element>>(p, grads, tile, wg_tid,
                                                                            nw0);
}

// Traits::kDqWarp: warp 1 of the producer warpgroup. Per step, as each consumer warpgroup's dQ
// partial lands in its staging buffer (kDqFull), one bulk reduce-add of the 64 x 64 fp32 tile
// into dq_accum; once both are read, the buffers go back to the warpgroups for step + 2
// (kDqEmpty). Both buffers start free. At d = 64 both warpgroups' partials (their key halves)
// add into the same tile.
template <class T, class View>
__device__ __forceinline__ void dq_warp(const BwdProblem& p, const View& view,
                                        typename T::SharedStorage& ss, const StepRange& range,
                                        int hkv) {
  const bool leader = threadIdx.x % 32 == 0;
  const int group = p.heads / p.heads_kv;
  for (int buf = 0; buf < 2 && buf < range.steps; ++buf) {
    dq_barrier<kDqEmpty, false>(0, buf);
    dq_barrier<kDqEmpty, false>(1, buf);
  }
  for (int step = 0; step < range.steps; ++step) {
    const int buf = step & 1;
    const int qh = hkv * group + step / range.m_count;
    const int m0 = (range.m_begin + step % range.m_count) * T::kBlockM;
    const int64_t bh = int64_t(view.b_q()) * p.heads + qh;
#pragma unroll
    for (int wg = 0; wg < T::kWarpGroups; ++wg) {
      dq_barrier<kDqFull, true>(wg, buf);
      if (leader) {
        const int col0 = T::kDqSplitKeys ? 0 : wg * T::kDqCols;
        bulk_reduce_add_f32_keep(p.dq_accum + dq_tiled_offset(bh, m0, col0, p.seq_q, T::kHeadDim),
                                 ss.dq[2 * wg + buf], T::kBlockM * T::kDqCols * int(sizeof(float)));
      }
      __syncwarp();
    }
    if (step + 2 < range.steps) {
      if (leader) bulk_wait_read<0>();
      __syncwarp();
      dq_barrier<kDqEmpty, false>(0, buf);
      dq_barrier<kDqEmpty, false>(1, buf);
    }
  }
  if (leader) bulk_wait_all();  // before the CTA's shared memory goes
  __syncwarp();
}

// The ring mode on arrival (BwdProblem::ring_kv_ready): the loader waits, before its K/V loads,
// for the arrival flag of every key chunk in [key0, key_end) of K/V batch index kv_z (a CTA
// whose keys no query sees has none to wait for), then fences the async proxy: the peers' send
// kernels wrote the rows with generic stores, and the TMA reads them. Out of line: the loader
// runs at 24 registers.
static __device__ __noinline__ void wait_ring_kv(const BwdProblem& p, int kv_z, int key0,
                                                 int key_end) {
  if (key0 >= key_end) return;
  const uint64_t expected = __ldg(p.ring_kv_epoch) + 1;  // the call's epoch (ring_kv_api.h)
  for (int c = key0 / p.ring_chunk_rows; c <= (key_end - 1) / p.ring_chunk_rows; ++c) {
    const int slot = kv_z * p.ring_chunks + c;
    comm::WaitSite site;
    site.op = comm::kOpRingAttention;
    site.what = comm::kWaitPeerFlag;
    site.peer = p.ring_peer;
    site.index = slot;
    comm::wait_geq(p.ring_kv_ready + slot, expected, p.ring_timeout_ns,
                   static_cast<comm::WaitDiagnostic*>(p.ring_diag), p.ring_group, p.ring_rank,
                   site);
  }
  comm::fence_proxy_async_global();
}

// ---- Warp-specialized kernel: the TMA descriptors beside the problem.
template <class T>
struct WsParams {
  using Element = typename T::Element;
  // Q / dO / K / V as TMA sees them: (seq, d, (head, batch)), 64-row boxes.
  using ShapeSeqD = Shape<int32_t, int32_t, Shape<int32_t, int32_t>>;
  using StrideSeqD = Stride<int64_t, _1, Stride<int64_t, int64_t>>;
  using TmaRows = decltype(make_tma_copy(
      SM90_TMA_LOAD{},
      make_tensor(make_gmem_ptr(static_cast<Element const*>(nullptr)), ShapeSeqD{}, StrideSeqD{}),
      typename T::SmemLayoutRows{}, Shape<_64, Int<T::kHeadDim>>{}, _1{}));

  BwdProblem p;
  TmaRows tma_q, tma_do, tma_k, tma_v;
  ShapeSeqD shape_q, shape_kv;
};

template <class T>
WsParams<T> make_ws_params(const BwdProblem& p) {
  using Element = typename T::Element;
  using P = WsParams<T>;
  const int64_t d = T::kHeadDim;
  typename P::ShapeSeqD shape_q = make_shape(p.seq_q, int32_t(d), make_shape(p.heads, p.batch));
  typename P::StrideSeqD stride_q =
      make_stride(int64_t(p.heads) * d, _1{}, make_stride(d, int64_t(p.seq_q) * p.heads * d));
  typename P::ShapeSeqD shape_kv =
      make_shape(p.seq_kv, int32_t(d), make_shape(p.heads_kv, p.kv_batch));
  typename P::StrideSeqD stride_kv = make_stride(
      int64_t(p.heads_kv) * d, _1{}, make_stride(d, int64_t(p.seq_kv) * p.heads_kv * d));
  auto tma = [&](const void* ptr, auto shape, auto stride) {
    return make_tma_copy(
        SM90_TMA_LOAD{},
        make_tensor(make_gmem_ptr(static_cast<Element const*>(ptr)), make_layout(shape, stride)),
        typename T::SmemLayoutRows{}, Shape<_64, Int<T::kHeadDim>>{}, _1{});
  };
  return P{p,
           tma(p.q, shape_q, stride_q),
           tma(p.dout, shape_q, stride_q),
           tma(p.k, shape_kv, stride_kv),
           tma(p.v, shape_kv, stride_kv),
           shape_q,
           shape_kv};
}

// CTA (key block, kv head, batch) of 384 threads: warpgroup 0 the producer (one thread issues
// every copy), warpgroups 1 and 2 the consumers of key halves 0 and 1. Rows past s / s_kv come
// in as zeros (TMA's out-of-bounds fill); lse·log2 e and D come from the preprocess's padded rows
// (BwdProblem::lse_log2_pad / delta_pad: +inf and 0 past s).
template <class T, bool kRing>
__global__ void __launch_bounds__(T::kThreads, 1)
    attention_bwd_main_sm90_ws(CUTE_GRID_CONSTANT WsParams<T> const params) {
  static_assert(T::kWarpSpecialized, "attention_bwd_main_sm90");
  using PipelineQ = cutlass::PipelineTmaAsync<T::kStages>;
  static_assert(sizeof(typename PipelineQ::SharedStorage) ==
                    sizeof(std::declval<typename T::SharedStorage&>().pipeline_q),
                "SharedStorage::pipeline_q holds the pipeline's mbarriers");
  constexpr int kM = T::kBlockM, kN = T::kBlockN, kHalf = T::kHalfN;
  extern __shared__ __align__(1024) unsigned char smem_sm90[];
  auto& ss = *reinterpret_cast<typename T::SharedStorage*>(smem_sm90);
  const BwdProblem& p = params.p;
  const int warp_group = threadIdx.x / 128;
  CtaTile tile = cta_tile<T>(p);
  if constexpr (kRing) {  // on arrival: the shards in the order they arrive, the own one first
    if (p.ring_kv_ready != nullptr)
      tile.z = ring_arrival_z(tile.z, p.batch, p.ring_world, p.ring_rank);
  }
  const int n0 = tile.n_block * kN, hkv = tile.hkv;
  const int group = p.heads / p.heads_kv;
  const int s_pad = (p.seq_q + kM - 1) / kM * kM;
  const CtaView<kRing> view{p, tile.z};
  const int b = view.b_q();
  const StepRange range = step_range<T>(p, view, n0);
  const bool is_loader = warp_group == 0 && threadIdx.x % 128 == 0;

  auto& pipe_storage = *reinterpret_cast<typename PipelineQ::SharedStorage*>(ss.pipeline_q);
  typename PipelineQ::Params pipe_params;
  pipe_params.transaction_bytes = T::kStageBytes;
  pipe_params.role = warp_group == 0 ? (is_loader ? PipelineQ::ThreadCategory::Producer
                                                  : PipelineQ::ThreadCategory::NonParticipant)
                                     : PipelineQ::ThreadCategory::Consumer;
  pipe_params.is_leader = is_loader;
  pipe_params.num_consumers = T::kConsumerThreads;
  auto& kv_full = *reinterpret_cast<cutlass::arch::ClusterTransactionBarrier*>(&ss.kv_full);
  if (threadIdx.x == 0) {
    kv_full.init(1);
    cutlass::arch::fence_barrier_init();
  }
  PipelineQ pipeline(pipe_storage, pipe_params, Shape<_1, _1, _1>{});  // inits its barriers
  __syncthreads();  // barriers initialised before any thread uses them

  if (warp_group == 0) {
    cutlass::arch::warpgroup_reg_dealloc<T::kProducerRegisters>();
    if constexpr (T::kDqWarp) {
      if (threadIdx.x / 32 == 1) {
        dq_warp<T>(p, view, ss, range, hkv);
        return;
      }
    }
    if (!is_loader) return;
    // K and V halves once; then per step Q, dO (TMA boxes) and the lse·log2 e / D rows (bulk).
    Tensor mQ = params.tma_q.get_tma_tensor(params.shape_q);
    Tensor mdO = params.tma_do.get_tma_tensor(params.shape_q);
    Tensor mK = params.tma_k.get_tma_tensor(params.shape_kv);
    Tensor mV = params.tma_v.get_tma_tensor(params.shape_kv);
    // K and V halves: SmemLayoutQ's (64, d, 2) is the two halves' (ss.k[0], ss.k[1]) layout.
    Tensor sK = make_tensor(make_smem_ptr(&ss.k[0][0]), typename T::SmemLayoutQ{});
    Tensor sV = make_tensor(make_smem_ptr(&ss.v[0][0]), typename T::SmemLayoutQ{});
    Tensor sQ = make_tensor(make_smem_ptr(ss.q), typename T::SmemLayoutQ{});
    Tensor sdO = make_tensor(make_smem_ptr(ss.dout), typename T::SmemLayoutQ{});
    auto rows_tile = Shape<_64, Int<T::kHeadDim>>{};
    const int b_kv = kRing ? ring_kv_index(tile.z, p.batch, p.ring_world, p.ring_rank,
                                           p.ring_kv_ready != nullptr)
                           : tile.z;
    if constexpr (kRing) {
      if (p.ring_kv_ready != nullptr) wait_ring_kv(p, b_kv, n0, min(n0 + kN, view.key_end()));
    }
    Tensor gK = local_tile(mK(_, _, make_coord(hkv, b_kv)), rows_tile, make_coord(_, _0{}));
    Tensor gV = local_tile(mV(_, _, make_coord(hkv, b_kv)), rows_tile, make_coord(_, _0{}));
    auto [tKgK, tKsK] = tma_partition(params.tma_k, _0{}, Layout<_1>{}, group_modes<0, 2>(sK),
                                      group_modes<0, 2>(gK));
    auto [tVgV, tVsV] = tma_partition(params.tma_v, _0{}, Layout<_1>{}, group_modes<0, 2>(sV),
                                      group_modes<0, 2>(gV));
    uint64_t& kv_bar = ss.kv_full;
    kv_full.arrive_and_expect_tx(T::kKVBytes);
#pragma unroll
    for (int h = 0; h < T::kWarpGroups; ++h) {
      copy(params.tma_k.with(kv_bar, 0), tKgK(_, n0 / kHalf + h), tKsK(_, h));
      copy(params.tma_v.with(kv_bar, 0), tVgV(_, n0 / kHalf + h), tVsV(_, h));
    }
    auto write = cutlass::make_producer_start_state<PipelineQ>();
    for (int step = 0; step < range.steps; ++step) {
      const int qh = hkv * group + step / range.m_count;
      const int m_block = range.m_begin + step % range.m_count;
      Tensor gQ = local_tile(mQ(_, _, make_coord(qh, b)), rows_tile, make_coord(_, _0{}));
      Tensor gdO = local_tile(mdO(_, _, make_coord(qh, b)), rows_tile, make_coord(_, _0{}));
      auto [tQgQ, tQsQ] = tma_partition(params.tma_q, _0{}, Layout<_1>{}, group_modes<0, 2>(sQ),
                                        group_modes<0, 2>(gQ));
      auto [tOgO, tOsO] = tma_partition(params.tma_do, _0{}, Layout<_1>{}, group_modes<0, 2>(sdO),
                                        group_modes<0, 2>(gdO));
      pipeline.producer_acquire(write);
      uint64_t* bar = pipeline.producer_get_barrier(write);
      const int stage = write.index();
      copy(params.tma_q.with(*bar, 0), tQgQ(_, m_block), tQsQ(_, stage));
      copy(params.tma_do.with(*bar, 0), tOgO(_, m_block), tOsO(_, stage));
      const int64_t row0 = (int64_t(b) * p.heads + qh) * s_pad + int64_t(m_block) * kM;
      bulk_load(ss.lse_log2[stage], p.lse_log2_pad + row0, kM * int(sizeof(float)), bar);
      bulk_load(ss.delta[stage], p.delta_pad + row0, kM * int(sizeof(float)), bar);
      ++write;
    }
    pipeline.producer_tail(write);  // the consumers' last releases before this CTA may exit
    return;
  }

  cutlass::arch::warpgroup_reg_alloc<T::kConsumerRegisters>();
  const int wg = warp_group - 1;  // key half
  const int wg_tid = threadIdx.x % 128;
  const int nw0 = n0 + wg * kHalf;
  const auto operands = make_operands<T>(ss, wg, wg_tid);
  KeyGrads<T> grads;
  clear(grads.dk);
  clear(grads.dv);
  kv_full.wait(0);
  auto read = cutlass::PipelineState<T::kStages>{};
  for (int step = 0; step < range.steps; ++step) {
    pipeline.consumer_wait(read);
    const int qh = hkv * group + step / range.m_count;
    const int m0 = (range.m_begin + step % range.m_count) * kM;
    backward_step<T>(p, view, ss, operands, grads, wg, wg_tid, step, read.index(), step & 1, qh, m0,
                     nw0);
    pipeline.consumer_release(read);
    ++read;
  }
  store_key_grads<T, std::conditional_t<kRing, float, typename T::Element>>(p, grads, tile, wg_tid,
                                                                            nw0);
  if constexpr (kRing) {
    if (p.ring_dk_dst[0] != nullptr) release_key_grads(p, tile, wg, wg_tid, nw0);
  }
}

template <class Element, int kHeadDim, bool kCausal, bool kBulkDq, bool kWarpSpecialized,
          bool kDqWarp, bool kRing>
cudaError_t launch_main_sm90(const BwdProblem& p, cudaStream_t stream) {
  using T = BwdTraitsSm90<Element, kHeadDim, kCausal, kBulkDq, kWarpSpecialized, kDqWarp>;
  const int n_blocks = (p.seq_kv + T::kBlockN - 1) / T::kBlockN;
  // tile_sections > 0 (kDqWarp only, can_implement_backward): bwd_tile_coord's 1-D order.
  const dim3 grid = p.tile_sections > 0
                        ? dim3(unsigned(n_blocks) * unsigned(p.heads_kv) * unsigned(p.kv_batch))
                        : dim3(n_blocks, p.heads_kv, p.kv_batch);
  cudaError_t err;
  if constexpr (kWarpSpecialized) {
    auto* kernel = attention_bwd_main_sm90_ws<T, kRing>;
    err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, T::kSmemBytes);
    if (err != cudaSuccess) return err;
    kernel<<<grid, T::kThreads, T::kSmemBytes, stream>>>(make_ws_params<T>(p));
  } else {
    auto* kernel = attention_bwd_main_sm90<T, kRing>;
    err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, T::kSmemBytes);
    if (err != cudaSuccess) return err;
    kernel<<<grid, T::kThreads, T::kSmemBytes, stream>>>(p);
  }
  return cudaGetLastError();
}

}  // namespace mkernel::attention::bwd
