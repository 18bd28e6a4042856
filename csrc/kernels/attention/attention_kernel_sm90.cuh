// The attention forward kernel for Hopper: persistent, warp-specialized, a template over its
// parts (FlashAttention-3's structure):
//
//   Producer warpgroup, warp 0 (Load): for each work tile of this CTA, the TMA loads of Q and
//       of the visible K/V blocks into the shared-memory ring (Mainloop::load; the Hooks may
//       wait for a KV block to arrive first).
//   Consumer0 / Consumer1 warpgroups: the tile's 128 query rows, 64 each: S = Q·Kᵀ, masking,
//       online softmax, O += P·V per KV block (Mainloop::mma), then the epilogue (O via TMA
//       store, LSE) — while the producer already loads the next tile's Q and K/V.
//
// Registers move from the producer to the consumers (setmaxnreg). Shared memory is one
// SharedStorage (tensors 1024-byte aligned for the 128-byte swizzle; pipelines apart).
#pragma once

#include "attention_hooks.cuh"
#include "attention_traits.hpp"
#include "cute/tensor.hpp"
#include "cutlass/arch/reg_reconfig.h"
#include "cutlass/cutlass.h"
#include "cutlass/pipeline/pipeline.hpp"
#include "epilogue_fwd_sm90.hpp"
#include "mainloop_fwd_sm90.hpp"
#include "softmax.hpp"
#include "tile_scheduler.hpp"

namespace mkernel::attention {

template <class Traits_, class Hooks_>
class AttentionFwdSm90 {
 public:
  using Traits = Traits_;
  using Hooks = Hooks_;
  using Mainloop = MainloopFwdSm90<Traits>;
  using Epilogue = EpilogueFwdSm90<Traits>;
  using Scheduler = PersistentTileScheduler<Traits::kCausal, Traits::kCausal && Hooks::kZigzag>;
  static constexpr int kThreads = Traits::kNumThreads;
  static constexpr int kNumMmaThreads = Traits::kNumMmaThreads;

  struct SharedStorage {
    struct Tensors : cute::aligned_struct<1024, cute::_1> {
      typename Mainloop::TensorStorage mainloop;
      typename Epilogue::TensorStorage epilogue;
    } tensors;
    typename Mainloop::PipelineStorage pipelines;
  };
  static constexpr int kSmemBytes = sizeof(SharedStorage);
  static_assert(kSmemBytes <= 227 * 1024, "shared storage exceeds the sm90 opt-in limit");

  struct Params {
    typename Mainloop::Params mainloop;
    typename Epilogue::Params epilogue;
    typename Scheduler::Params scheduler;
    typename Hooks::Params hooks;
  };

  enum class WarpGroupRole { Producer = 0, Consumer0 = 1, Consumer1 = 2 };
  enum class ProducerWarpRole { Load = 0, Idle1 = 1, Idle2 = 2, Idle3 = 3 };

  CUTLASS_DEVICE void operator()(Params const& params, char* smem_buf) {
    using namespace cute;
    SharedStorage& shared = *reinterpret_cast<SharedStorage*>(smem_buf);
    const int warp_idx = cutlass::canonical_warp_idx_sync();
    const int lane_idx = cutlass::canonical_lane_idx();
    const auto role = WarpGroupRole(cutlass::canonical_warp_group_idx());
    const auto producer_role = ProducerWarpRole(warp_idx % cutlass::NumWarpsPerWarpGroup);

    if (warp_idx == 0 && lane_idx == 0) {
      Mainloop::prefetch_tma_descriptors(params.mainloop);
      Epilogue::prefetch_tma_descriptors(params.epilogue);
    }

    using PipelineQ = typename Mainloop::PipelineQ;
    using PipelineKV = typename Mainloop::PipelineKV;
    const bool is_loader = role == WarpGroupRole::Producer && producer_role == ProducerWarpRole::Load;
    auto pipe_params = [&](uint32_t bytes) {
      typename PipelineKV::Params pp;
      pp.transaction_bytes = bytes;
      pp.role = is_loader ? PipelineKV::ThreadCategory::Producer
                          : (role == WarpGroupRole::Producer ? PipelineKV::ThreadCategory::NonParticipant
                                                             : PipelineKV::ThreadCategory::Consumer);
      pp.is_leader = is_loader && lane_idx == 0;
      pp.num_consumers = kNumMmaThreads;
      return pp;
    };
    typename PipelineQ::Params q_params;
    {
      auto pp = pipe_params(Traits::kTmaBytesQ);
      q_params.transaction_bytes = pp.transaction_bytes;
      q_params.role = static_cast<typename PipelineQ::ThreadCategory>(pp.role);
      q_params.is_leader = pp.is_leader;
      q_params.num_consumers = pp.num_consumers;
    }
    PipelineQ pipeline_q(shared.pipelines.q, q_params, Shape<_1, _1, _1>{});
    PipelineKV pipeline_k(shared.pipelines.k, pipe_params(Traits::kTmaBytesKV), Shape<_1, _1, _1>{});
    PipelineKV pipeline_v(shared.pipelines.v, pipe_params(Traits::kTmaBytesKV), Shape<_1, _1, _1>{});
    __syncthreads();  // barriers initialised before any thread uses them

    Mainloop mainloop;
    if (role == WarpGroupRole::Producer) {
      cutlass::arch::warpgroup_reg_dealloc<Traits::kLoadRegisters>();
      if (producer_role != ProducerWarpRole::Load) return;
      auto q_write = cutlass::make_producer_start_state<PipelineQ>();
      auto kv_write = cutlass::make_producer_start_state<PipelineKV>();
      if (lane_idx == 0) {
        for (int t = Scheduler::first_tile();; t += Scheduler::tile_stride()) {
          const WorkTile work = Scheduler::get(params.scheduler, t);
          if (!work.valid) break;
          mainloop.template load<Hooks>(params.mainloop, params.hooks, pipeline_q, pipeline_k,
                                        pipeline_v, q_write, kv_write, shared.tensors.mainloop,
                                        work);
        }
        // Keep the CTA alive until the consumers released every stage this warp filled.
        pipeline_k.producer_tail(kv_write);
        pipeline_v.producer_tail(kv_write);
        pipeline_q.producer_tail(q_write);
      }
      __syncwarp();
    } else {
      cutlass::arch::warpgroup_reg_alloc<Traits::kMmaRegisters>();
      const int mma_thread_idx = static_cast<int>(threadIdx.x) - cutlass::NumThreadsPerWarpGroup;
      typename Mainloop::StateQ q_read;
      typename Mainloop::StateKV kv_read;
      Epilogue epilogue;
      typename Traits::TiledMmaPV tiled_mma_pv;
      Mainloop::scheduler_barrier_init(mma_thread_idx / cutlass::NumThreadsPerWarpGroup);
      for (int t = Scheduler::first_tile();; t += Scheduler::tile_stride()) {
        const WorkTile work = Scheduler::get(params.scheduler, t);
        if (!work.valid) break;
        Tensor acc_o = partition_fragment_C(tiled_mma_pv, select<0, 2>(typename Traits::TileShapeMNK{}));
        constexpr int kRows = decltype(size<0>(rowcol(acc_o.layout())))::value;
        OnlineSoftmax<kRows> softmax(params.mainloop.scale_log2);
        mainloop.template mma<Hooks::kZigzag>(params.mainloop, pipeline_q, pipeline_k, pipeline_v, q_read, kv_read,
                     shared.tensors.mainloop, work, mma_thread_idx, acc_o, softmax);
        Tensor acc_o_rc = rowcol_view(acc_o);
        float lse[kRows];
        softmax.finalize(acc_o_rc, lse, params.mainloop.softmax_scale);
        epilogue.store(params.epilogue, shared.tensors.epilogue, work, mma_thread_idx, acc_o, lse);
      }
      Epilogue::store_tail(mma_thread_idx);
    }
  }
};

template <class Kernel>
__global__ void __launch_bounds__(Kernel::kThreads, 1)
    attention_fwd_kernel(CUTE_GRID_CONSTANT typename Kernel::Params const params) {
  extern __shared__ __align__(1024) char smem[];
  Kernel{}(params, smem);
}

}  // namespace mkernel::attention
