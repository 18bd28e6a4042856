// Compile-time shape of the native backward's wgmma kernel (attention_bwd_sm90.cuh).
//
// One CTA of two consumer warpgroups owns kBlockN = 128 keys of one kv head; warpgroup w owns
// keys [64w, 64w + 64) of them: their K and V rows, and their dK and dV in registers (64 keys x
// d fp32 each). Query blocks of 64 rows (every query head of the GQA group) stream through a
// two-stage Q/dO ring in shared memory. Scores are computed transposed (S^T = K·Q^T, keys x
// queries) so that the accumulators of P^T and dS^T are already the A operands of the two
// register-sourced (RS) GEMMs that need them: dV += P^T·dO and dK += dS^T·Q (FA3's swapped S/dP
// GEMMs). Only dS goes through shared memory, for dQ = dS·K.
//
// The GEMMs of one (query block, warpgroup) step, wgmma shape M x N x K, operands:
//   S^T  = K_w·Q^T    64 x 64 x d    A sK_w (keys x d, K-major)   B sQ  (queries x d, K-major)
//   dP^T = V_w·dO^T   64 x 64 x d    A sV_w                       B sdO
//   dV_w += P^T·dO    64 x d x 64    A registers                  B sdO^T (d x queries, MN-major)
//   dK_w += dS^T·Q    64 x d x 64    A registers                  B sQ^T
//   dQ  (+)= dS·K     64 x 64 x 64   A sdS_h (queries x keys, MN-major)  B sK_h^T (d cols x keys)
// dQ's 64 x d tile is split between the warpgroups: at d = 128 by columns (warpgroup w: d columns
// [64w, 64w + 64), summing both key halves h: it reads the other warpgroup's dS), at d = 64 by
// keys (warpgroup w: its own half, all 64 columns; both add to the same dQ rows). N = 64 either
// way, the width of one 128-byte swizzle atom of an MN-major operand.
//
// Shared-memory tiles are 64 rows of d (or 64) 16-bit elements in 128-byte-swizzled GMMA atoms;
// the MN-major views are the same bytes with the coordinates swapped (composition with a
// row-major transposer: tests/attention/bwd_layouts_check.cpp checks it on the host).
#pragma once

#include <cutlass/numeric_types.h>

#include <cute/atom/mma_traits_sm90_gmma.hpp>
#include <cute/tensor.hpp>

namespace mkernel::attention::bwd {

using namespace cute;

// kBulkDq: dQ's partial staged in shared memory (two 64 x 64 fp32 buffers per warpgroup, in
// dq_tiled_offset's swizzled tile layout) and added to dq_accum by one bulk reduce-add.
// kWarpSpecialized: a producer warpgroup loads K/V once and Q, dO, lse·log2 e and D per step by
// TMA into a kStages pipeline (mbarriers); the two consumer warpgroups run unsynchronised except
// where one reads the other's dS (d = 128), with dS double-buffered by step parity.
// kDqWarp (with both): FA3's step order and dQ path — the consumers issue dV, then (once both
// dS are in shared memory) dQ, then dK, store dQ's partial while dK runs and go on; warp 1 of the
// producer warpgroup issues its bulk reduce-add (named barriers kDqFull / kDqEmpty per
// warpgroup and buffer hand the staging buffers back and forth).
template <class Element_, int kHeadDim_, bool kCausal_, bool kBulkDq_ = false,
          bool kWarpSpecialized_ = false, bool kDqWarp_ = false>
struct BwdTraitsSm90 {
  using Element = Element_;
  static constexpr bool kBulkDq = kBulkDq_;
  static constexpr bool kWarpSpecialized = kWarpSpecialized_;
  static constexpr bool kDqWarp = kDqWarp_;
  static_assert(!kDqWarp || (kBulkDq && kWarpSpecialized),
                "the dQ warp: warp-specialized, bulk dQ");
  static constexpr int kHeadDim = kHeadDim_;
  static constexpr int kBlockM = 64;  // query rows per step
  static constexpr int kHalfN = 64;   // keys per warpgroup
  static constexpr int kWarpGroups = 2;
  static constexpr int kBlockN = kHalfN * kWarpGroups;  // keys per CTA
  static constexpr int kThreads = 128 * (kWarpGroups + (kWarpSpecialized ? 1 : 0));
  static constexpr int kConsumerThreads = 128 * kWarpGroups;
  // setmaxnreg (kWarpSpecialized): the CTA starts with 168 x 384 registers and the consumers'
  // increase draws only on what the producer released: 24 + 2 x 240 = 3 x 168 (32 / 240 would
  // block the consumers forever). The producer's one issuing thread spills 20-108 bytes at 24.
  static constexpr int kProducerRegisters = 24;
  static constexpr int kConsumerRegisters = 240;
  static_assert(!kWarpSpecialized || kProducerRegisters + 2 * kConsumerRegisters <= 3 * 168,
                "setmaxnreg: the consumers' registers come from the producer's");
  static constexpr bool kCausal = kCausal_;
  static constexpr int kStages = 2;  // Q/dO ring depth
  static_assert(kHeadDim == 64 || kHeadDim == 128, "head dim 64 or 128");

  // dQ split between the warpgroups by keys (d = 64) or by d columns (d = 128).
  static constexpr bool kDqSplitKeys = kHeadDim == 64;
  static constexpr int kDqCols = 64;  // dQ columns per warpgroup either way

  using TiledMmaSdP = decltype(make_tiled_mma(
      GMMA::ss_op_selector<Element, Element, float, Shape<_64, Int<kBlockM>, Int<kHeadDim>>>()));
  using TiledMmadKV = decltype(make_tiled_mma(
      GMMA::rs_op_selector<Element, Element, float, Shape<_64, Int<kHeadDim>, Int<kBlockM>>,
                           GMMA::Major::K, GMMA::Major::MN>()));
  using TiledMmadQ = decltype(make_tiled_mma(
      GMMA::ss_op_selector<Element, Element, float, Shape<Int<kBlockM>, Int<kDqCols>, Int<kHalfN>>,
                           GMMA::Major::MN, GMMA::Major::MN>()));

  // 64 rows x d: K and V halves; Q and dO with a stage mode.
  using SmemLayoutRows =
      decltype(tile_to_shape(GMMA::Layout_K_SW128_Atom<Element>{}, Shape<_64, Int<kHeadDim>>{}));
  using SmemLayoutQ = decltype(tile_to_shape(GMMA::Layout_K_SW128_Atom<Element>{},
                                             Shape<Int<kBlockM>, Int<kHeadDim>, Int<kStages>>{}));
  // (d, query, stage) -> the same bytes as (query, d, stage).
  using SmemLayoutQt = decltype(composition(
      SmemLayoutQ{}, make_layout(Shape<Int<kHeadDim>, Int<kBlockM>, Int<kStages>>{},
                                 Stride<Int<kBlockM>, _1, Int<kBlockM * kHeadDim>>{})));
  // A 64-key x 64-column block of a K half (columns [64c, 64c + 64) start 64 * 64 elements
  // further per c: the swizzled tile's column atoms are its outermost mode) and its (column,
  // key) view, dQ's B operand.
  using SmemLayoutKBlock =
      decltype(tile_to_shape(GMMA::Layout_K_SW128_Atom<Element>{}, Shape<_64, _64>{}));
  using SmemLayoutKBlockT =
      decltype(composition(SmemLayoutKBlock{}, make_layout(Shape<_64, _64>{}, GenRowMajor{})));
  static constexpr int kKBlockElems = 64 * 64;
  // dS of one warpgroup's keys as dQ's A operand (query, key), queries contiguous; and its
  // (key, query) view, the one its accumulator (dS^T) is stored through.
  using SmemLayoutdS =
      decltype(tile_to_shape(GMMA::Layout_MN_SW128_Atom<Element>{}, Shape<Int<kBlockM>, _64>{}));
  using SmemLayoutdSt =
      decltype(composition(SmemLayoutdS{}, make_layout(Shape<_64, Int<kBlockM>>{}, GenRowMajor{})));

  // The S^T / dP^T accumulator (64 keys x kBlockM queries, fp32) reread as the A operand of a
  // K = kBlockM RS GEMM: the SM90 accumulator holds columns in groups of 8 in register order,
  // and one k-step's A fragment is two such groups (8 values).
  CUTE_HOST_DEVICE static constexpr auto a_operand_layout() {
    return make_layout(make_shape(make_shape(_2{}, _2{}, _2{}), _1{}, Int<kBlockM / 16>{}),
                       make_stride(make_stride(_1{}, _2{}, _4{}), _0{}, _8{}));
  }

  static constexpr int kRowsElems = 64 * kHeadDim;
  static constexpr int kQElems = kBlockM * kHeadDim;
  static constexpr int kDsBuffers = kWarpSpecialized ? 2 : 1;  // by step parity
  // kWarpSpecialized: the bytes one pipeline stage receives (Q, dO, lse·log2 e, D) and the K/V
  // load's.
  static constexpr uint32_t kStageBytes =
      uint32_t(2 * kQElems * sizeof(Element) + 2 * kBlockM * sizeof(float));
  static constexpr uint32_t kKVBytes = uint32_t(2 * kWarpGroups * kRowsElems * sizeof(Element));
  struct SharedStorage {
    alignas(1024) Element k[kWarpGroups][kRowsElems];
    alignas(1024) Element v[kWarpGroups][kRowsElems];
    alignas(1024) Element q[kStages * kQElems];
    alignas(1024) Element dout[kStages * kQElems];
    alignas(1024) Element ds[kDsBuffers][kWarpGroups][kBlockM * kHalfN];
    // kBulkDq: buffer 2w + (step & 1) of warpgroup w (a token array otherwise).
    alignas(128) float dq[kBulkDq ? 2 * kWarpGroups : 1][kBulkDq ? kBlockM * kDqCols : 4];
    alignas(16) float lse_log2[kStages][kBlockM];  // lse·log2 e; +inf: no key seen / past s
    alignas(16) float delta[kStages][kBlockM];     // D = rowsum(dO ∘ O)
    // kWarpSpecialized: cutlass::PipelineTmaAsync<kStages>::SharedStorage (full and empty
    // mbarriers; the kernel checks the size: the pipeline header is device-only).
    alignas(8) uint64_t pipeline_q[2 * kStages];
    uint64_t kv_full;  // kWarpSpecialized: K/V landed
  };
  static constexpr int kSmemBytes = int(sizeof(SharedStorage));
  static_assert(kSmemBytes <= 227 * 1024, "shared memory");
};

}  // namespace mkernel::attention::bwd
