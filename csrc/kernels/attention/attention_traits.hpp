// Compile-time shape of one attention kernel: element type, head dim, tile sizes, pipeline
// depth, masking; and the CuTe types they imply (the two TiledMMAs, shared-memory layouts).
//
// A CTA owns a kBlockM x d tile of queries (kBlockM = 128: two consumer warpgroups of 64 rows,
// FA3's layout) and streams kBlockN x d blocks of K and V through a kStages-deep shared-memory
// ring. S = Q·Kᵀ is an SS wgmma (both operands in shared memory); O += P·V takes P from
// registers (RS wgmma: the fp32 accumulator of S, converted, is already in the A-operand
// register layout) and V as an MN-major B operand (V's rows are keys, the GEMM's K mode).
#pragma once

#include "cute/tensor.hpp"
#include "cutlass/numeric_types.h"

namespace mkernel::attention {

template <class Element_, int kHeadDim_, bool kCausal_>
struct AttnTraits {
  using Element = Element_;
  static constexpr int kHeadDim = kHeadDim_;
  static constexpr bool kCausal = kCausal_;
  static_assert(kHeadDim == 64 || kHeadDim == 128, "shipped head dims: 64 and 128");

  static constexpr int kNumMmaWarpGroups = 2;
  static constexpr int kNumMmaThreads = kNumMmaWarpGroups * 128;
  static constexpr int kNumThreads = kNumMmaThreads + 128;  // + the producer warpgroup
  static constexpr int kBlockM = 64 * kNumMmaWarpGroups;
  static constexpr int kBlockN = 128;
  // Shared memory: Q and O tiles (kBlockM x d each) plus the K/V ring (2 x kBlockN x d a
  // stage): d=128 -> 64 KiB + 2 x 64 KiB; d=64 -> 32 KiB + 4 x 32 KiB.
  static constexpr int kStages = kHeadDim == 128 ? 2 : 4;

  using TileShapeMNK = cute::Shape<cute::Int<kBlockM>, cute::Int<kBlockN>, cute::Int<kHeadDim>>;
  // Two warpgroups stacked along M; each issues its own 64-row wgmma.
  using AtomLayoutMma = cute::Layout<cute::Shape<cute::Int<kNumMmaWarpGroups>, cute::_1, cute::_1>>;
  using TiledMmaQK = decltype(cute::make_tiled_mma(
      cute::GMMA::ss_op_selector<Element, Element, float,
                                 cute::Shape<cute::_64, cute::Int<kBlockN>, cute::Int<kHeadDim>>>(),
      AtomLayoutMma{}));
  using TiledMmaPV = decltype(cute::make_tiled_mma(
      cute::GMMA::rs_op_selector<Element, Element, float,
                                 cute::Shape<cute::_64, cute::Int<kHeadDim>, cute::Int<kBlockN>>,
                                 cute::GMMA::Major::K, cute::GMMA::Major::MN>(),
      AtomLayoutMma{}));

  using SmemLayoutQ = decltype(cute::tile_to_shape(
      cute::GMMA::Layout_K_SW128_Atom<Element>{},
      cute::Shape<cute::Int<kBlockM>, cute::Int<kHeadDim>>{}));
  using SmemLayoutO = SmemLayoutQ;
  using SmemLayoutK = decltype(cute::tile_to_shape(
      cute::GMMA::Layout_K_SW128_Atom<Element>{},
      cute::Shape<cute::Int<kBlockN>, cute::Int<kHeadDim>, cute::Int<kStages>>{}));
  // V^T as the PV GEMM's B operand: (d, kBlockN) with d contiguous (MN-major).
  using SmemLayoutVt = decltype(cute::tile_to_shape(
      cute::GMMA::Layout_MN_SW128_Atom<Element>{},
      cute::Shape<cute::Int<kHeadDim>, cute::Int<kBlockN>, cute::Int<kStages>>{}));

  static constexpr uint32_t kTmaBytesQ = kBlockM * kHeadDim * sizeof(Element);
  static constexpr uint32_t kTmaBytesKV = kBlockN * kHeadDim * sizeof(Element);

  // Register budgets (setmaxnreg): the producer only issues TMA; each consumer thread holds
  // S (kBlockN/2 fp32), O (d/2 fp32) and P.  128 x (24 + 2 x 240) = 64512 <= 65536.
  static constexpr uint32_t kLoadRegisters = 24;
  static constexpr uint32_t kMmaRegisters = 240;
};

}  // namespace mkernel::attention
