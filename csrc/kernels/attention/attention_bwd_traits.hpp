// Compile-time shape of the native backward's main kernel (attention_bwd_kernel.cuh).
//
// First version (session 9 prep, unverified on the GPU): FlashAttention-2's dataflow with
// warp-level mma.sync (SM80 16x8x16 atoms, which sm_90a runs) and ldmatrix from swizzled shared
// memory; cp.async loads. One CTA of kWarps warps owns kBlockN keys of one kv head: K and V stay
// in shared memory, dK and dV in registers; the query blocks (kBlockM rows, each query head of
// the GQA group) stream through a two-stage Q/dO ring. wgmma (FA3's backward) is the next step.
//
// The five GEMMs of one (query block, key block) step, their operands and smem views:
//   S  = Q·Kᵀ     A sQ   (M x d, K-major)  B sK   (N x d, K-major)   ldmatrix
//   dP = dO·Vᵀ    A sdO  (M x d)           B sV   (N x d)            ldmatrix
//   dV += Pᵀ·dO   A sPt  (N x M, MN-major) B sdOt (d x M, MN-major)  ldmatrix.trans
//   dK += dSᵀ·Q   A sdSt (N x M)           B sQt  (d x M)            ldmatrix.trans
//   dQ  = dS·K    A sdS  (M x N, K-major)  B sKt  (d x N, MN-major)  ldmatrix / .trans
// P and dS go through shared memory (bf16/fp16) because two GEMMs read them transposed.
#pragma once

#include <cute/tensor.hpp>
#include <cutlass/numeric_types.h>

namespace mkernel::attention::bwd {

using namespace cute;

template <class Element_, int kHeadDim_, int kBlockM_, int kBlockN_, int kWarps_, bool kCausal_>
struct BwdTraits {
  using Element = Element_;
  static constexpr int kHeadDim = kHeadDim_;
  static constexpr int kBlockM = kBlockM_;  // query rows per step
  static constexpr int kBlockN = kBlockN_;  // keys per CTA
  static constexpr int kWarps = kWarps_;
  static constexpr int kThreads = kWarps * 32;
  static constexpr bool kCausal = kCausal_;
  static_assert(kHeadDim % 64 == 0, "head dim: a multiple of 64 (the swizzle atom's width)");
  static_assert(kBlockM % 64 == 0 && kBlockN % 64 == 0, "tiles: multiples of 64");

  using MmaAtom = MMA_Atom<std::conditional_t<std::is_same_v<Element, cutlass::bfloat16_t>,
                                              SM80_16x8x16_F32BF16BF16F32_TN,
                                              SM80_16x8x16_F32F16F16F32_TN>>;
  // Warps 4 (rows) x 2 (cols) for every GEMM; the permutation tile gives each warp 16 columns
  // (two n8 atoms), the shape one ldmatrix.x4 of B feeds.
  static constexpr int kWarpsM = 4;
  static constexpr int kWarpsN = kWarps / kWarpsM;
  static_assert(kWarps % kWarpsM == 0, "kWarps: a multiple of 4");
  using WarpLayout = Layout<Shape<Int<kWarpsM>, Int<kWarpsN>, _1>>;
  using PermTile = Tile<Int<16 * kWarpsM>, Int<16 * kWarpsN>, _16>;
  using TiledMmaSdP = TiledMMA<MmaAtom, WarpLayout, PermTile>;  // (M x N) outputs
  using TiledMmadKV = TiledMMA<MmaAtom, WarpLayout, PermTile>;  // (N x d) outputs
  using TiledMmadQ = TiledMMA<MmaAtom, WarpLayout, PermTile>;   // (M x d) outputs

  // 64-element rows in 8-row swizzled atoms: 16-byte chunks permuted so ldmatrix (8 rows of one
  // chunk column) and its .trans form hit 8 different bank groups.
  using SmemAtom =
      decltype(composition(Swizzle<3, 3, 3>{}, Layout<Shape<_8, _64>, Stride<_64, _1>>{}));
  using SmemLayoutQ = decltype(tile_to_shape(SmemAtom{}, Shape<Int<kBlockM>, Int<kHeadDim>>{}));
  using SmemLayoutKV = decltype(tile_to_shape(SmemAtom{}, Shape<Int<kBlockN>, Int<kHeadDim>>{}));
  using SmemLayoutPdS = decltype(tile_to_shape(SmemAtom{}, Shape<Int<kBlockM>, Int<kBlockN>>{}));
  // Transposed views of the same bytes: (x, y) -> (y, x) of the stored layout.
  using SmemLayoutQt = decltype(composition(
      SmemLayoutQ{}, make_layout(Shape<Int<kHeadDim>, Int<kBlockM>>{}, GenRowMajor{})));
  using SmemLayoutKt = decltype(composition(
      SmemLayoutKV{}, make_layout(Shape<Int<kHeadDim>, Int<kBlockN>>{}, GenRowMajor{})));
  using SmemLayoutPdSt = decltype(composition(
      SmemLayoutPdS{}, make_layout(Shape<Int<kBlockN>, Int<kBlockM>>{}, GenRowMajor{})));

  using LdsmN = Copy_Atom<SM75_U32x4_LDSM_N, Element>;  // K-major operands
  using LdsmT = Copy_Atom<SM75_U16x8_LDSM_T, Element>;  // MN-major operands (transposed views)

  static constexpr int kStages = 2;  // Q/dO ring depth
  static constexpr int kQElems = kBlockM * kHeadDim;
  static constexpr int kKVElems = kBlockN * kHeadDim;
  static constexpr int kPElems = kBlockM * kBlockN;

  struct SharedStorage {
    alignas(128) Element k[kKVElems];
    alignas(128) Element v[kKVElems];
    alignas(128) Element q[kStages][kQElems];
    alignas(128) Element dout[kStages][kQElems];
    alignas(128) Element p[kPElems];
    alignas(128) Element ds[kPElems];
    float lse_log2[kStages][kBlockM];  // lse * log2(e); +inf for rows that see no key / past s
    float delta[kStages][kBlockM];     // D = rowsum(dO ∘ O)
  };
  static constexpr int kSmemBytes = int(sizeof(SharedStorage));
};

}  // namespace mkernel::attention::bwd
