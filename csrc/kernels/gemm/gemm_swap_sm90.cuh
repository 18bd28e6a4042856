// The swapped-operand GEMM's kernels (gemm_swap_api.h): CUTLASS 3.x sm90
// collectives for Dᵀ[N,M] = B[N,K] · A[M,K]ᵀ with B and A K-major (as in the
// engine, gemm_sm90.cuh) and Dᵀ column-major, which is D [M,N] row-major: the
// same memory, so no transpose anywhere. Included only by the per-variant
// gemm_swap_*.cu files (one per tile: parallel builds).
#pragma once

// wgmma's N may be any multiple of 8 up to 256; CuTe's selector offers the
// ones that are not powers of two (176: two tiles cover 333 tokens with 5.7%
// padding) only with this set. Only the swapped GEMM's translation units
// include this header, and their tile widths are their own.
#ifndef CUTE_SM90_EXTENDED_MMA_SHAPES_ENABLED
#define CUTE_SM90_EXTENDED_MMA_SHAPES_ENABLED
#endif

#include <mutex>

#include "tma_encode_cached.hpp"  // first: CuTe's TMA encodes without a per-call driver lookup
#include "cute/tensor.hpp"
#include "cutlass/cutlass.h"
#include "cutlass/epilogue/collective/collective_builder.hpp"
#include "cutlass/gemm/collective/collective_builder.hpp"
#include "cutlass/gemm/device/gemm_universal_adapter.h"
#include "cutlass/gemm/kernel/gemm_universal.hpp"
#include "cutlass/util/packed_stride.hpp"
#include "gemm_swap_api.h"
#include "sm90_mma_stage2d.hpp"

namespace mkernel::gemm_swap {

// The builder's collective with its dispatch policy renamed to MainloopSm90Stage2D (naming the
// builder's type does not instantiate CUTLASS's collective, whose Params would not build at 168).
template <class Op, int Hints>
struct RebindStage2D {
  using type = Op;  // not CUTLASS's TMA warp-specialized mainloop: SwapGemm's static_assert fires
};
template <int Hints, int S, class C, class K, class... Rest>
struct RebindStage2D<cutlass::gemm::collective::CollectiveMma<
                         cutlass::gemm::MainloopSm90TmaGmmaWarpSpecialized<S, C, K>, Rest...>,
                     Hints> {
  using type = cutlass::gemm::collective::CollectiveMma<MainloopSm90Stage2D<S, C, K, Hints>, Rest...>;
};

template <gemm::DType D>
struct ElementOf;
template <>
struct ElementOf<gemm::DType::kBF16> {
  using type = cutlass::bfloat16_t;
};
template <>
struct ElementOf<gemm::DType::kFP16> {
  using type = cutlass::half_t;
};

// Tile (weights rows x tokens x k), cluster, tile scheduler of one variant; cooperative
// consumers (two warpgroups split a 128-row tile) unless `Pingpong` (each warpgroup its own
// 64-row tile, taking turns at the tensor cores). `DirectStore`: the epilogue stores from the
// registers (no shared-memory stage, no TMA store): its smem goes to one more mainloop stage
// (a 256x176 tile's stages are 55 KB: 4 fit with it, 3 with the TMA epilogue).
// `Stages` > 0 pins the mainloop's stage count (else as many as fit beside the epilogue).
// `OneConsumer`: CUTLASS's non-persistent kernel (KernelTmaWarpSpecialized: one consumer
// warpgroup, one tile per CTA, a data-parallel grid, mainloop and epilogue sharing their smem);
// it takes 64-row tiles, which the cooperative kernel does not (gemm14: cuBLAS's 64x168 tile).
// `Stage2D` (gemm15): 1 = CUTLASS's mainloop with each stage's TMA layout built 2-D
// (sm90_mma_stage2d.hpp), so a token tile of an odd number of 8-row atoms builds (168 = 21);
// 2 = the same with TMA cache hints (weights evict-first, tokens evict-last).
template <class TileShape_, class ClusterShape_, class Scheduler_, bool Pingpong = false,
          bool DirectStore = false, int Stages = 0, bool OneConsumer = false, int Stage2D = 0,
          class EpilogueTile_ = cutlass::epilogue::collective::EpilogueTileAuto>
struct SwapConfig {
  using EpilogueTile = EpilogueTile_;
  using TileShape = TileShape_;
  using ClusterShape = ClusterShape_;
  using Scheduler = Scheduler_;
  static constexpr int kStages = Stages;
  static constexpr bool kStage2D = Stage2D > 0;
  static constexpr int kStage2DHints = Stage2D > 1 ? 1 : 0;
  using KernelSchedule = cute::conditional_t<
      OneConsumer, cutlass::gemm::KernelTmaWarpSpecialized,
      cute::conditional_t<Pingpong, cutlass::gemm::KernelTmaWarpSpecializedPingpong,
                          cutlass::gemm::KernelTmaWarpSpecializedCooperative>>;
  using EpilogueSchedule = cute::conditional_t<
      DirectStore, cutlass::epilogue::NoSmemWarpSpecialized,
      cute::conditional_t<Pingpong || OneConsumer, cutlass::epilogue::TmaWarpSpecialized,
                          cutlass::epilogue::TmaWarpSpecializedCooperative>>;
};

// Opts `kKernel` in to `smem_bytes` of dynamic shared memory once per device (not per call, as
// CUTLASS's adapter does); later calls return the first call's result on that device.
template <auto kKernel>
cudaError_t opt_in_smem_once(int smem_bytes) {
  constexpr int kMaxDevices = 64;
  static std::once_flag once[kMaxDevices];
  static cudaError_t opt_in[kMaxDevices];
  int dev = 0;
  cudaError_t err = cudaGetDevice(&dev);
  if (err != cudaSuccess) return err;
  if (dev >= kMaxDevices) return cudaErrorInvalidDevice;
  std::call_once(once[dev], [&] {
    opt_in[dev] =
        cudaFuncSetAttribute(kKernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem_bytes);
  });
  return opt_in[dev];
}

template <class Cfg, gemm::DType DT>
struct SwapGemm {
  using Element = typename ElementOf<DT>::type;
  using LayoutW = cutlass::layout::RowMajor;     // B [N,K] as the MMA's A: K contiguous
  using LayoutX = cutlass::layout::ColumnMajor;  // A [M,K] as the MMA's B (K x M, K contiguous)
  using LayoutD = cutlass::layout::ColumnMajor;  // Dᵀ [N,M] column-major = D [M,N] row-major
  static constexpr int kAlign = 16 / sizeof(Element);

  using CollectiveEpilogue = typename cutlass::epilogue::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, typename Cfg::TileShape,
      typename Cfg::ClusterShape, typename Cfg::EpilogueTile, float, float,
      void, LayoutD, kAlign,  // no C operand: D = acc
      Element, LayoutD, kAlign, typename Cfg::EpilogueSchedule>::CollectiveOp;

  using BuiltMainloop = typename cutlass::gemm::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, Element, LayoutW, kAlign, Element,
      LayoutX, kAlign, float, typename Cfg::TileShape, typename Cfg::ClusterShape,
      cute::conditional_t<(Cfg::kStages > 0),
                          cutlass::gemm::collective::StageCount<(Cfg::kStages > 0 ? Cfg::kStages : 1)>,
                          cutlass::gemm::collective::StageCountAutoCarveout<static_cast<int>(
                              sizeof(typename CollectiveEpilogue::SharedStorage))>>,
      typename Cfg::KernelSchedule>::CollectiveOp;
  using CollectiveMainloop =
      cute::conditional_t<Cfg::kStage2D, typename RebindStage2D<BuiltMainloop, Cfg::kStage2DHints>::type, BuiltMainloop>;
  static_assert(!Cfg::kStage2D || !cute::is_same_v<CollectiveMainloop, BuiltMainloop>,
                "Stage2D needs the builder's MainloopSm90TmaGmmaWarpSpecialized collective");

  using Kernel =
      cutlass::gemm::kernel::GemmUniversal<cute::Shape<int, int, int, int>, CollectiveMainloop,
                                           CollectiveEpilogue, typename Cfg::Scheduler>;
  using Device = cutlass::gemm::device::GemmUniversalAdapter<Kernel>;

  static constexpr bool kStreamK =
      cute::is_same_v<typename Cfg::Scheduler, cutlass::gemm::StreamKScheduler>;

  static typename Device::Arguments arguments(const gemm::Problem& p, int sm_count,
                                              Decomposition dec) {
    // The swapped problem: M' = N (weights rows), N' = M (tokens).
    auto sw = cutlass::make_cute_packed_stride(typename Kernel::StrideA{}, {p.n, p.k, 1});
    auto sx = cutlass::make_cute_packed_stride(typename Kernel::StrideB{}, {p.m, p.k, 1});
    auto sd = cutlass::make_cute_packed_stride(typename Kernel::StrideD{}, {p.n, p.m, 1});
    cutlass::KernelHardwareInfo hw;
    hw.device_id = 0;
    hw.sm_count = sm_count;  // always set: CUTLASS never queries the device
    typename Device::Arguments args{
        cutlass::gemm::GemmUniversalMode::kGemm,
        {p.n, p.m, p.k, 1},
        {static_cast<const Element*>(p.b), sw, static_cast<const Element*>(p.a), sx},
        {{1.0f, 0.0f}, nullptr, sd, static_cast<Element*>(p.d), sd},
        hw};
    // Along the weights rows: the tokens' tiles (the small operand) stay in L2
    // while B streams through once.
    using Raster = typename Kernel::TileScheduler::RasterOrderOptions;
    args.scheduler.max_swizzle_size = 1;
    args.scheduler.raster_order = Raster::AlongM;
    if constexpr (kStreamK) {
      // A stream-K kernel's decomposition is a launch argument: one kernel serves the
      // heuristic, data-parallel, forced stream-K and split-K variants. Partial tiles are
      // always summed in the turnstile order of their K ranges (same bits every run).
      using Mode = cutlass::gemm::kernel::detail::DecompositionMode;
      args.scheduler.reduction_mode = cutlass::gemm::kernel::detail::ReductionMode::Deterministic;
      args.scheduler.decomposition_mode = dec.mode == Decomposition::kDataParallel ? Mode::DataParallel
                                          : dec.mode == Decomposition::kStreamK    ? Mode::StreamK
                                          : dec.mode == Decomposition::kSplitK     ? Mode::SplitK
                                                                                   : Mode::Heuristic;
      args.scheduler.splits = dec.mode == Decomposition::kSplitK ? dec.splits : 1;
    }
    return args;
  }

  static const char* can_implement(const gemm::Problem& p, int sm_count, Decomposition dec) {
    if (!kStreamK && dec.mode != Decomposition::kHeuristic) {
      return "only a stream-K kernel takes a decomposition";
    }
    return Device::can_implement(arguments(p, sm_count, dec)) == cutlass::Status::kSuccess
               ? nullptr
               : "CUTLASS can_implement failed";
  }

  static size_t workspace_size(const gemm::Problem& p, int sm_count, Decomposition dec) {
    return Device::get_workspace_size(arguments(p, sm_count, dec));
  }

  // CUTLASS's adapter without its per-call cudaFuncSetAttribute (once per device).
  static cudaError_t run(const gemm::Problem& p, int sm_count, Decomposition dec, void* workspace,
                         cudaStream_t stream, const char** reason) {
    const cudaError_t err = opt_in_smem_once<cutlass::device_kernel<Kernel>>(
        static_cast<int>(Kernel::SharedStorageSize));
    if (err != cudaSuccess) return err;
    auto args = arguments(p, sm_count, dec);
    cutlass::Status st = Kernel::initialize_workspace(args, workspace, stream, nullptr);
    if (st != cutlass::Status::kSuccess) {
      if (reason) *reason = cutlassGetStatusString(st);
      return cudaErrorInvalidValue;
    }
    typename Kernel::Params params = Kernel::to_underlying_arguments(args, workspace);
    st = Device::run(params, stream, /*cuda_adapter=*/nullptr, /*launch_with_pdl=*/false);
    if (st != cutlass::Status::kSuccess) {
      if (reason) *reason = cutlassGetStatusString(st);
      const cudaError_t e = cudaGetLastError();
      return e != cudaSuccess ? e : cudaErrorLaunchFailure;
    }
    return cudaGetLastError();
  }
};

}  // namespace mkernel::gemm_swap

// The entry points gemm_swap_dispatch.cu declares for one variant (both dtypes), given the
// alias template SUFFIX##_t<DT> of its host side (SwapGemm, SwapTicketGemm or SwapWideGemm).
#define MKERNEL_GEMM_SWAP_ENTRY_POINTS(SUFFIX)                                           \
  const char* can_implement_##SUFFIX(const gemm::Problem& p, int sms, Decomposition d) { \
    return p.dtype == gemm::DType::kBF16                                                 \
               ? SUFFIX##_t<gemm::DType::kBF16>::can_implement(p, sms, d)                \
               : SUFFIX##_t<gemm::DType::kFP16>::can_implement(p, sms, d);               \
  }                                                                                      \
  size_t workspace_size_##SUFFIX(const gemm::Problem& p, int sms, Decomposition d) {     \
    return p.dtype == gemm::DType::kBF16                                                 \
               ? SUFFIX##_t<gemm::DType::kBF16>::workspace_size(p, sms, d)               \
               : SUFFIX##_t<gemm::DType::kFP16>::workspace_size(p, sms, d);              \
  }                                                                                      \
  cudaError_t run_##SUFFIX(const gemm::Problem& p, int sms, Decomposition d, void* ws,   \
                           cudaStream_t s, const char** r) {                             \
    return p.dtype == gemm::DType::kBF16                                                 \
               ? SUFFIX##_t<gemm::DType::kBF16>::run(p, sms, d, ws, s, r)                \
               : SUFFIX##_t<gemm::DType::kFP16>::run(p, sms, d, ws, s, r);               \
  }

// One variant (both dtypes) per .cu: defines the entry points gemm_swap_dispatch.cu declares.
#define MKERNEL_GEMM_SWAP_INSTANTIATE(CFG, SUFFIX) \
  namespace mkernel::gemm_swap::detail {           \
  template <gemm::DType DT>                        \
  using SUFFIX##_t = SwapGemm<CFG, DT>;            \
  MKERNEL_GEMM_SWAP_ENTRY_POINTS(SUFFIX)           \
  }
