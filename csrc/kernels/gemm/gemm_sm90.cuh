// The GEMM engine's kernels for one (config, dtype): CUTLASS 3.x sm90
// collectives (TMA loads into a multi-stage smem ring, wgmma consumer
// warpgroups, a producer warp, persistent tile scheduler, TMA-store epilogue)
// assembled for D = A·Bᵀ with A [M,K] K-major, B [N,K] K-major, D row-major.
// Included only by the generated instantiations/*.cu.
#pragma once

#include <mutex>
#include <type_traits>

#include "tma_encode_cached.hpp"  // first: CuTe's TMA encodes without a per-call driver lookup
#include "cutlass/cutlass.h"
#include "cutlass/epilogue/collective/collective_builder.hpp"
#include "cutlass/gemm/collective/collective_builder.hpp"
#include "cutlass/gemm/device/gemm_universal_adapter.h"
#include "cutlass/gemm/kernel/gemm_universal.hpp"
#include "cutlass/util/packed_stride.hpp"
#include "gemm_config.hpp"
#include "gemm_kernel_sm90.cuh"

namespace mkernel::gemm {

// A value computed once per CUDA device of the process (kernel attributes are
// per device: one static for all would leave the second GPU unprepared).
template <class T>
class PerDevice {
 public:
  static constexpr int kMaxDevices = 64;
  template <class Fn>
  T const& get(int device, Fn&& fn) {
    std::call_once(once_[device], [&] { value_[device] = fn(); });
    return value_[device];
  }

 private:
  std::once_flag once_[kMaxDevices];
  T value_[kMaxDevices];
};

inline int current_device(cudaError_t* err) {
  int dev = 0;
  *err = cudaGetDevice(&dev);
  if (*err == cudaSuccess && dev >= PerDevice<int>::kMaxDevices) *err = cudaErrorInvalidDevice;
  return dev;
}

template <DType D>
struct ElementOf;
template <>
struct ElementOf<DType::kBF16> {
  using type = cutlass::bfloat16_t;
};
template <>
struct ElementOf<DType::kFP16> {
  using type = cutlass::half_t;
};

template <ConfigId Id, DType DT>
struct GemmSm90 {
  using Cfg = Config<Id>;
  using Element = typename ElementOf<DT>::type;
  using LayoutA = cutlass::layout::RowMajor;     // A [M,K]: K contiguous
  using LayoutB = cutlass::layout::ColumnMajor;  // B [N,K] row-major is K×N column-major
  using LayoutD = cutlass::layout::RowMajor;
  // 16-byte TMA alignment: 8 bf16/fp16 elements (N and K multiples of 8).
  static constexpr int kAlign = 16 / sizeof(Element);
  // Whether this instantiation's CUTLASS kernel was compiled with griddepcontrol
  // (generate_instantiations.py): only then may it launch with PDL — without the
  // wait it could read operands the previous kernel is still writing.
#ifdef CUTLASS_ENABLE_GDC_FOR_SM90
  static constexpr bool kGdc = true;
#else
  static constexpr bool kGdc = false;
#endif

  using CollectiveEpilogue = typename cutlass::epilogue::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, typename Cfg::TileShape,
      typename Cfg::ClusterShape, cutlass::epilogue::collective::EpilogueTileAuto, float, float,
      void, LayoutD, kAlign,  // no C operand: D = acc
      Element, LayoutD, kAlign, typename Cfg::EpilogueSchedule>::CollectiveOp;

  using CollectiveMainloop = typename cutlass::gemm::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, Element, LayoutA, kAlign, Element,
      LayoutB, kAlign, float, typename Cfg::TileShape, typename Cfg::ClusterShape,
      cutlass::gemm::collective::StageCountAutoCarveout<static_cast<int>(
          sizeof(typename CollectiveEpilogue::SharedStorage))>,
      typename Cfg::KernelSchedule>::CollectiveOp;

  using Kernel =
      cutlass::gemm::kernel::GemmUniversal<cute::Shape<int, int, int, int>, CollectiveMainloop,
                                           CollectiveEpilogue, typename Cfg::Scheduler>;
  using Device = cutlass::gemm::device::GemmUniversalAdapter<Kernel>;

  static typename Device::Arguments arguments(const Problem& p, const Launch& l) {
    const int sm_count = l.sm_count;
    using StrideA = typename Kernel::StrideA;
    using StrideB = typename Kernel::StrideB;
    using StrideD = typename Kernel::StrideD;
    auto sa = cutlass::make_cute_packed_stride(StrideA{}, {p.m, p.k, 1});
    auto sb = cutlass::make_cute_packed_stride(StrideB{}, {p.n, p.k, 1});
    auto sd = cutlass::make_cute_packed_stride(StrideD{}, {p.m, p.n, 1});
    // sm_count is always set (gemm_dispatch's complete()), so CUTLASS never
    // queries the device: no device id needed.
    cutlass::KernelHardwareInfo hw;
    hw.device_id = 0;
    hw.sm_count = sm_count;
    typename Device::Arguments args{
        cutlass::gemm::GemmUniversalMode::kGemm,
        {p.m, p.n, p.k, 1},
        {static_cast<const Element*>(p.a), sa, static_cast<const Element*>(p.b), sb},
        {{1.0f, 0.0f}, nullptr, sd, static_cast<Element*>(p.d), sd},
        hw};
    using Raster = typename Kernel::TileScheduler::RasterOrderOptions;
    args.scheduler.max_swizzle_size = l.swizzle > 0 ? l.swizzle : 8;
    args.scheduler.raster_order = l.raster == 1   ? Raster::AlongM
                                  : l.raster == 2 ? Raster::AlongN
                                                  : Raster::Heuristic;
    return args;
  }

  static const char* can_implement(const Problem& p, const Launch& l) {
    auto args = arguments(p, l);
    return Device::can_implement(args) == cutlass::Status::kSuccess
               ? nullptr
               : "CUTLASS can_implement failed";
  }

  static size_t workspace_size(const Problem& p, const Launch& l) {
    return Device::get_workspace_size(arguments(p, l));
  }

  // CUTLASS's adapter (initialize + run) without its per-call
  // cudaFuncSetAttribute: the shared-memory opt-in is set once per device.
  static cudaError_t run(const Problem& p, const Launch& l, const char** reason) {
    cudaError_t err = cudaSuccess;
    const int dev = current_device(&err);
    if (err != cudaSuccess) return err;
    static PerDevice<cudaError_t> smem_opt_in;
    err = smem_opt_in.get(dev, [] {
      return cudaFuncSetAttribute(cutlass::device_kernel<Kernel>,
                                  cudaFuncAttributeMaxDynamicSharedMemorySize,
                                  static_cast<int>(Kernel::SharedStorageSize));
    });
    if (err != cudaSuccess) return err;
    auto args = arguments(p, l);
    cutlass::Status st = Kernel::initialize_workspace(args, l.workspace, l.stream, nullptr);
    if (st != cutlass::Status::kSuccess) {
      if (reason) *reason = cutlassGetStatusString(st);
      return cudaErrorInvalidValue;
    }
    typename Kernel::Params params = Kernel::to_underlying_arguments(args, l.workspace);
    st = Device::run(params, l.stream, /*cuda_adapter=*/nullptr, /*launch_with_pdl=*/l.pdl && kGdc);
    if (st != cutlass::Status::kSuccess) {
      if (reason) *reason = cutlassGetStatusString(st);
      cudaError_t e = cudaGetLastError();
      return e != cudaSuccess ? e : cudaErrorLaunchFailure;
    }
    return cudaGetLastError();
  }

  // A launch of the hooked kernel K with its cluster shape (and programmatic
  // dependent launch if pdl); attr[2] must outlive the config.
  template <class K>
  static cudaLaunchConfig_t cluster_launch_config(cudaLaunchAttribute* attr, dim3 grid,
                                                  cudaStream_t stream, bool pdl = false) {
    attr[0].id = cudaLaunchAttributeClusterDimension;
    attr[0].val.clusterDim.x = K::Scheduler::kClusterM;
    attr[0].val.clusterDim.y = K::Scheduler::kClusterN;
    attr[0].val.clusterDim.z = 1;
    attr[1].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[1].val.programmaticStreamSerializationAllowed = 1;
    cudaLaunchConfig_t cfg = {};
    cfg.attrs = attr;
    cfg.numAttrs = pdl ? 2 : 1;
    cfg.gridDim = grid;
    cfg.blockDim = dim3(K::kThreads, 1, 1);
    cfg.dynamicSmemBytes = K::kSmemBytes;
    cfg.stream = stream;
    return cfg;
  }

  // The hooked kernel runs the cooperative persistent configs and one
  // ping-pong config (128x128 tiles, 1x2 clusters: the fastest CUTLASS config
  // on most large shapes); each hooked kernel is another minute of nvcc.
  static constexpr bool kHookable = cute::is_same_v<typename Cfg::Scheduler, Persistent> &&
                                    (cute::is_same_v<typename Cfg::KernelSchedule, Coop> ||
                                     Id == ConfigId::kPing128x128Cluster1x2);
  using Hooked = HookedGemmSm90<CollectiveMainloop, CollectiveEpilogue, FlagHooks>;
  using HookedPacked = HookedGemmSm90<CollectiveMainloop, CollectiveEpilogue, FlagHooks, true>;
  using HookedPackedGather =
      HookedGemmSm90<CollectiveMainloop, CollectiveEpilogue, FlagHooks, true, true>;
  // Packed groups are compiled for the configs the grouped plan uses only
  // (each kernel is a minute of nvcc). coop_128x256_c1x2: 128-row units (no padding to 256
  // rows per expert, unlike a 2x1 cluster) with A multicast along N: 40 KB of L2 -> SM
  // traffic per 128x256x64 k-block (105 flop/B) against 24 KB per 128x128x64 (87 flop/B);
  // s8run2 found the MoE GEMM bound by that traffic (two ranks' GEMMs each ran at ~0.5x
  // their solo speed, and 64x256 tiles at 52 flop/B 1.36x slower than 128x128 ones).
  // coop_256x128_c1x2: 256-row units (more padding on experts of few rows) at 32 KB per
  // 256x128x64 k-block (131 flop/B): for experts of many rows (Mixtral-like, 32k tokens).
  static constexpr bool kPackable = kHookable && (Id == ConfigId::kCoop128x256Cluster2x1 ||
                                                  Id == ConfigId::kCoop128x128Cluster2x1 ||
                                                  Id == ConfigId::kCoop128x256Cluster1x2 ||
                                                  Id == ConfigId::kCoop256x128Cluster1x2 ||
                                                  Id == ConfigId::kPing128x128Cluster1x2);

  // Per-kernel launch facts, queried once: the occupancy query alone costs
  // more than a small GEMM.
  struct LaunchFacts {
    cudaError_t err;
    int max_active_clusters;
  };
  template <class K>
  static LaunchFacts const& hooked_launch_facts() {
    constexpr int kCM = K::Scheduler::kClusterM, kCN = K::Scheduler::kClusterN;
    static PerDevice<LaunchFacts> per_device;
    static const LaunchFacts no_device{cudaErrorInvalidDevice, 0};
    cudaError_t err = cudaSuccess;
    const int dev = current_device(&err);
    if (err != cudaSuccess) return no_device;
    return per_device.get(dev, [dev] {
      auto kernel = hooked_gemm_kernel<K>;
      LaunchFacts f{cudaSuccess, 0};
      int sms = 0;
      cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev);
      f.err =
          cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, K::kSmemBytes);
      if (f.err != cudaSuccess) return f;
      cudaLaunchAttribute attrs[2];
      const cudaLaunchConfig_t probe =
          cluster_launch_config<K>(attrs, dim3(kCM * (sms / (kCM * kCN)), kCN, 1), nullptr);
      if (cudaOccupancyMaxActiveClusters(&f.max_active_clusters, kernel, &probe) != cudaSuccess) {
        cudaGetLastError();
        f.max_active_clusters = 0;
      }
      return f;
    });
  }

  // Clusters the persistent grid of K may hold on l.sm_count SMs.
  template <class K = Hooked>
  static int hooked_clusters(const Launch& l) {
    constexpr int kCM = K::Scheduler::kClusterM, kCN = K::Scheduler::kClusterN;
    int clusters = l.sm_count / (kCM * kCN);
    const int fit = hooked_launch_facts<K>().max_active_clusters;
    return fit > 0 && fit < clusters ? fit : clusters;
  }

  // The scheduler of a launch, split-K slices included (l.splits 0: enough
  // slices that about every cluster gets a unit, each slice >= 4 k-blocks).
  // (A template so that configs without a hooked kernel never instantiate one.)
  template <class K = Hooked>
  static typename K::Scheduler::Params hooked_schedule(const Problem& p, const Launch& l,
                                                       const int* m_order) {
    using Sched = typename K::Scheduler;
    const int batches = p.batches < 1 ? 1 : p.batches;
    auto sp = Sched::make_params(p.m, p.n, p.k, l.swizzle > 0 ? l.swizzle : 8, l.raster != 1,
                                 m_order, batches, p.batch_rows, 1);
    int splits = l.splits;
    if (splits <= 0 && K::kPingpong) splits = 1;  // ping-pong consumers have no split-K
    if (splits <= 0) {
      const int units = Sched::total_units(sp), clusters = hooked_clusters<K>(l);
      splits = 1;
      if (p.batch_rows == nullptr && units > 0 && 2 * units <= clusters) {
        splits = clusters / units;
        splits = splits < sp.k_tiles / 4 ? splits : sp.k_tiles / 4;
        splits = splits < 8 ? splits : 8;
        splits = splits < 1 ? 1 : splits;
      }
    }
    return Sched::make_params(p.m, p.n, p.k, l.swizzle > 0 ? l.swizzle : 8, l.raster != 1, m_order,
                              batches, p.batch_rows, splits);
  }

  static size_t hooked_workspace_size(const Problem& p, const Launch& l) {
    if constexpr (!kHookable) {
      return 0;
    } else {
      const auto sp = hooked_schedule(p, l, nullptr);
      if (sp.splits <= 1) return 0;
      return Hooked::SplitK::workspace_bytes(Hooked::Scheduler::padded_tiles(sp), sp.splits);
    }
  }

  static cudaError_t run_hooked(const Problem& p, const Launch& l, const HookArgs& h,
                                const char** reason) {
    if (p.group_end == nullptr) {
      if constexpr (kHookable) {
        return launch_hooked<Hooked>(p, l, h, reason);
      } else {
        if (reason) *reason = "the hooked kernel needs a cooperative, persistent config";
        return cudaErrorInvalidValue;
      }
    }
    if constexpr (kPackable) {
      if (p.a_row_map != nullptr) return launch_hooked<HookedPackedGather>(p, l, h, reason);
      return launch_hooked<HookedPacked>(p, l, h, reason);
    } else {
      if (reason) {
        *reason =
            "packed groups run on coop_128x256_c2x1, coop_128x128_c2x1, coop_128x256_c1x2, "
            "coop_256x128_c1x2 and ping_128x128_c1x2 only";
      }
      return cudaErrorInvalidValue;
    }
  }

  template <class K>
  static cudaError_t launch_hooked(const Problem& p, const Launch& l, const HookArgs& h,
                                   const char** reason) {
    constexpr bool kPacked = K::Scheduler::kPacked;
    if constexpr (kPacked) {
      if (h.a_ready != nullptr || h.tile_done != nullptr || h.m_order != nullptr) {
        if (reason) *reason = "packed groups take no communication hooks";
        return cudaErrorInvalidValue;
      }
    }
    typename K::Params params;
    cudaError_t err = prepare_hooked<K>(p, l, h.m_order, params, reason);
    if (err != cudaSuccess) return err;
    static_cast<FlagHookArgs&>(params.hooks) =
        FlagHookArgs{h.a_ready,
                     h.rows_per_flag,
                     h.a_ready_value,
                     h.tile_done,
                     h.tile_done_value,
                     0,
                     static_cast<comm::WaitDiagnostic*>(h.diag)};
    params.hooks.m = p.m;
    params.hooks.tiles_n = (p.n + K::Scheduler::kBlockN - 1) / K::Scheduler::kBlockN;
    params.hooks.timeout_ns = static_cast<uint64_t>(h.timeout_s * 1e9);
    if constexpr (K::kGathersA) {
      if (p.a_neg == nullptr || (reinterpret_cast<uintptr_t>(p.a) |
                                 reinterpret_cast<uintptr_t>(p.a_neg)) % 16 != 0) {
        if (reason) *reason = "gathered A: a and a_neg must be non-null and 16-byte aligned";
        return cudaErrorInvalidValue;
      }
      const int64_t row_bytes = static_cast<int64_t>(p.k) * sizeof(Element);
      params.gather.row_map = p.a_row_map;
      params.gather.pos = static_cast<const char*>(p.a);
      params.gather.neg = static_cast<const char*>(p.a_neg);
      params.gather.row_bytes = row_bytes;
    }
    return launch_prepared<K>(params, l, reason);
  }

  // The hooked kernel with another hook policy H (the fused ops, kernels/fused/): its Params
  // come filled from the caller. Instantiated only by the .cu files that name H.
  template <class H>
  using HookedWith = HookedGemmSm90<CollectiveMainloop, CollectiveEpilogue, H>;

  template <class H>
  static cudaError_t run_with_hooks(const Problem& p, const Launch& l, const int* m_order,
                                    typename H::Params const& hooks, const char** reason) {
    if constexpr (!kHookable) {
      if (reason) *reason = "the hooked kernel needs a cooperative, persistent config";
      return cudaErrorInvalidValue;
    } else {
      using K = HookedWith<H>;
      typename K::Params params;
      cudaError_t err = prepare_hooked<K>(p, l, m_order, params, reason);
      if (err != cudaSuccess) return err;
      params.hooks = hooks;
      return launch_prepared<K>(params, l, reason);
    }
  }

  // The packed-groups hooked kernel with another hook policy H (the MoE fused dispatch,
  // kernels/moe/moe_fused_hooks.cuh): p's packed groups / row segments as run_hooked takes them,
  // the hooks' Params from the caller. Instantiated only by the .cu files that name H.
  template <class H>
  using HookedPackedWith = HookedGemmSm90<CollectiveMainloop, CollectiveEpilogue, H, true>;

  template <class H>
  static cudaError_t run_packed_with_hooks(const Problem& p, const Launch& l,
                                           typename H::Params const& hooks, const char** reason) {
    if constexpr (!kPackable) {
      if (reason) *reason = "packed groups need a packable config (run_hooked's list)";
      return cudaErrorInvalidValue;
    } else {
      if (p.group_end == nullptr || p.a_row_map != nullptr) {
        if (reason) *reason = "run_packed_with_hooks: packed groups (group_end), A not gathered";
        return cudaErrorInvalidValue;
      }
      using K = HookedPackedWith<H>;
      typename K::Params params;
      cudaError_t err = prepare_hooked<K>(p, l, nullptr, params, reason);
      if (err != cudaSuccess) return err;
      params.hooks = hooks;
      return launch_prepared<K>(params, l, reason);
    }
  }

  // Clusters (CTAs) the persistent grid of the packed kernel with hooks H takes on l.sm_count.
  template <class H>
  static int packed_grid_ctas_with_hooks(const Launch& l) {
    using K = HookedPackedWith<H>;
    return hooked_clusters<K>(l) * K::Scheduler::kClusterM * K::Scheduler::kClusterN;
  }

  // The hooked kernel with a per-source-A hook policy H (H::kPeerTmaA: the fused ag_gemm's
  // MKERNEL_FUSED_AG_PEER_TMA kernels): as run_with_hooks, plus one mainloop Params per source
  // s < sources with A = a_src[s] as [rows_per_source, K] (its own TMA descriptor; B as p.b).
  template <class H>
  static cudaError_t run_with_peer_a(const Problem& p, const Launch& l, const int* m_order,
                                     typename H::Params const& hooks, const void* const* a_src,
                                     int sources, int rows_per_source, const char** reason) {
    if constexpr (!kHookable) {
      if (reason) *reason = "the hooked kernel needs a cooperative, persistent config";
      return cudaErrorInvalidValue;
    } else {
      using K = HookedWith<H>;
      static_assert(K::kPeerTmaA, "run_with_peer_a needs a hook policy with kPeerTmaA");
      if (sources < 1 || sources > H::kPeerSources || rows_per_source < 1 ||
          (p.batches > 1)) {
        if (reason) *reason = "per-source A: 1..kPeerSources sources of >= 1 rows, one batch";
        return cudaErrorInvalidValue;
      }
      typename K::Params params;
      cudaError_t err = prepare_hooked<K>(p, l, m_order, params, reason);
      if (err != cudaSuccess) return err;
      const typename K::ProblemShape shape{rows_per_source, p.n, p.k, 1};
      auto sa = cutlass::make_cute_packed_stride(typename CollectiveMainloop::StrideA{},
                                                 {rows_per_source, p.k, 1});
      auto sb = cutlass::make_cute_packed_stride(typename CollectiveMainloop::StrideB{},
                                                 {p.n, p.k, 1});
      for (int s = 0; s < sources; ++s) {
        if (a_src[s] == nullptr || reinterpret_cast<uintptr_t>(a_src[s]) % 16 != 0) {
          if (reason) *reason = "per-source A: a source pointer is null or not 16-byte aligned";
          return cudaErrorInvalidValue;
        }
        typename CollectiveMainloop::Arguments ma{static_cast<const Element*>(a_src[s]), sa,
                                                  static_cast<const Element*>(p.b), sb};
        params.peer_a[s] = CollectiveMainloop::to_underlying_arguments(shape, ma, nullptr);
      }
      params.hooks = hooks;
      return launch_prepared<K>(params, l, reason);
    }
  }

  // Clusters (CTAs) the persistent grid of the kernel with hooks H takes for p under l.
  template <class H>
  static int grid_ctas_with_hooks(const Problem& p, const Launch& l) {
    using K = HookedWith<H>;
    const int units = K::Scheduler::total_units(hooked_schedule<K>(p, l, nullptr));
    int clusters = hooked_clusters<K>(l);
    clusters = units < clusters ? units : clusters;
    return clusters * K::Scheduler::kClusterM * K::Scheduler::kClusterN;
  }

  // Everything of a hooked launch's Params but the hooks: problem, collectives, scheduler,
  // split-K workspace.
  template <class K>
  static cudaError_t prepare_hooked(const Problem& p, const Launch& l, const int* m_order,
                                    typename K::Params& params, const char** reason) {
    constexpr bool kPacked = K::Scheduler::kPacked;
    // Packed groups: A [M, K] and D [M, N] hold every expert's rows (batch 0),
    // B [batches, N, K] one matrix per expert.
    const int batches = p.batches < 1 ? 1 : p.batches;
    params.problem = {p.m, p.n, p.k, batches};
    auto sa = cutlass::make_cute_packed_stride(typename CollectiveMainloop::StrideA{},
                                               {p.m, p.k, batches});
    auto sb = cutlass::make_cute_packed_stride(typename CollectiveMainloop::StrideB{},
                                               {p.n, p.k, batches});
    auto sd = cutlass::make_cute_packed_stride(typename CollectiveEpilogue::StrideD{},
                                               {p.m, p.n, batches});
    typename CollectiveMainloop::Arguments ma{static_cast<const Element*>(p.a), sa,
                                              static_cast<const Element*>(p.b), sb};
    typename CollectiveEpilogue::Arguments ea{
        {1.0f, 0.0f}, nullptr, sd, static_cast<Element*>(p.d), sd};
    params.mainloop = CollectiveMainloop::to_underlying_arguments(params.problem, ma, nullptr);
    params.epilogue = CollectiveEpilogue::to_underlying_arguments(params.problem, ea, nullptr);
    if constexpr (kPacked) {
      // (Row segments: batches * groups_per_b groups over the batches B matrices.)
      const int per_b = p.group_begin != nullptr && p.groups_per_b > 1 ? p.groups_per_b : 1;
      const int head = p.group_begin != nullptr && p.group_b_head > 0 ? p.group_b_head : 0;
      params.scheduler = K::Scheduler::make_params(
          p.m, p.n, p.k, l.swizzle > 0 ? l.swizzle : 8, l.raster != 1, nullptr,
          head + batches * per_b, nullptr, 1, p.group_end, p.group_begin, per_b, head);
    } else {
      params.scheduler = hooked_schedule<K>(p, l, m_order);
    }
    params.direct_d = static_cast<Element*>(p.d);
    if (K::kPingpong && params.scheduler.splits > 1) {
      if (reason) *reason = "the ping-pong hooked kernel runs without split-K (use splits=1)";
      return cudaErrorInvalidValue;
    }
    if (params.scheduler.splits > 1) {
      const int tiles = K::Scheduler::padded_tiles(params.scheduler);
      if (tiles > kSplitKMaxTiles) {
        if (reason) *reason = "split-K runs on at most 16384 output tiles (use splits=1)";
        return cudaErrorInvalidValue;
      }
      const size_t need = K::SplitK::workspace_bytes(tiles, params.scheduler.splits);
      if (l.workspace == nullptr || l.workspace_bytes < need) {
        if (reason) *reason = "split-K needs a zero-initialised workspace (hooked_workspace_size)";
        return cudaErrorInvalidValue;
      }
      params.split_k = K::SplitK::carve(l.workspace);
    }
    return cudaSuccess;
  }

  template <class K>
  static cudaError_t launch_prepared(typename K::Params const& params, const Launch& l,
                                     const char** reason) {
    const LaunchFacts& facts = hooked_launch_facts<K>();
    if (facts.err != cudaSuccess) return facts.err;
    constexpr int kCM = K::Scheduler::kClusterM, kCN = K::Scheduler::kClusterN;
    int clusters = hooked_clusters<K>(l);
    const int units = K::Scheduler::total_units(params.scheduler);
    clusters = units < clusters ? units : clusters;
    if (clusters < 1) {
      if (reason) *reason = "no thread-block cluster fits the SMs given";
      return cudaErrorInvalidConfiguration;
    }
    cudaLaunchAttribute attrs[2];
    const cudaLaunchConfig_t cfg =
        cluster_launch_config<K>(attrs, dim3(kCM * clusters, kCN, 1), l.stream, l.pdl);
    return cudaLaunchKernelEx(&cfg, hooked_gemm_kernel<K>, params);
  }

  static TileCounts tile_counts(int m, int n) {
    using Sched = PersistentTileScheduler<typename Cfg::TileShape, typename Cfg::ClusterShape>;
    const int tm = (m + Sched::kBlockM - 1) / Sched::kBlockM;
    const int tn = (n + Sched::kBlockN - 1) / Sched::kBlockN;
    return {tm, tn, (tm + Sched::kClusterM - 1) / Sched::kClusterM, Sched::kBlockM, Sched::kBlockN};
  }
};

}  // namespace mkernel::gemm

// One instantiation = one (config, dtype): defines the entry points the
// dispatcher (gemm_dispatch.cu) declares.
#define MKERNEL_GEMM_INSTANTIATE(ID, DT, SUFFIX)                                                \
  namespace mkernel::gemm::detail {                                                             \
  const char* can_implement_##SUFFIX(const Problem& p, const Launch& l) {                       \
    return GemmSm90<ID, DT>::can_implement(p, l);                                               \
  }                                                                                             \
  size_t workspace_size_##SUFFIX(const Problem& p, const Launch& l) {                           \
    return GemmSm90<ID, DT>::workspace_size(p, l);                                              \
  }                                                                                             \
  cudaError_t run_##SUFFIX(const Problem& p, const Launch& l, const char** r) {                 \
    return GemmSm90<ID, DT>::run(p, l, r);                                                      \
  }                                                                                             \
  cudaError_t run_hooked_##SUFFIX(const Problem& p, const Launch& l, const HookArgs& h,         \
                                  const char** r) {                                             \
    return GemmSm90<ID, DT>::run_hooked(p, l, h, r);                                            \
  }                                                                                             \
  size_t hooked_workspace_size_##SUFFIX(const Problem& p, const Launch& l) {                    \
    return GemmSm90<ID, DT>::hooked_workspace_size(p, l);                                       \
  }                                                                                             \
  TileCounts tile_counts_##SUFFIX(int m, int n) { return GemmSm90<ID, DT>::tile_counts(m, n); } \
  }
