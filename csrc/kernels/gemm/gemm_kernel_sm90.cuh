// The hooked GEMM kernel for Hopper: persistent, warp-specialized, built
// from CUTLASS's sm90 collectives (TMA + wgmma mainloop, TMA-store epilogue)
// with mkernel's own tile scheduler and communication hooks. Two consumer
// schedules, chosen by the mainloop's TiledMma:
//
//   Producer warpgroup, warp 0 (Mainloop): for each tile, Hooks::producer_wait
//       on the tile's A rows, then TMA loads of A/B k-blocks into the smem ring.
//   Cooperative (a 2-warpgroup TiledMma): Consumer0 and Consumer1 share each
//       tile: wgmma over the ring, epilogue TMA store, Hooks::tile_done.
//   Ping-pong (a 1-warpgroup TiledMma): the consumers take the CTA's tiles in
//       turn and an ordered barrier lets one issue its MMAs while the other
//       runs its epilogue, so the tensor cores never wait for a store. Each
//       stores its tile from registers (store_clipped: no epilogue smem to
//       hand over between them), then Hooks::tile_stored. No split-K.
//
// Packed groups (Scheduler::kPacked, the MoE layout of torch._grouped_mm):
// the producer shifts its view of A to the expert's first row and takes B of
// the expert; the consumers store the tile straight from registers, clipped at
// the expert's last row (a TMA store cannot stop mid-tile, and the rows past
// it belong to the next expert).
//
// Packed groups with gathered A (kGatherA, the MoE dispatch's receive layout): every packed row
// names where it lies (GatherArgs); all four producer warps load, each cp.async-ing a quarter of
// the tile's rows into the swizzled stage, warp 0 also issuing B's TMA (load_gathered).
//
// With split-K (scheduler splits > 1) a work unit covers one K slice of a
// tile; the consumers hand their partial sums to SplitKReduce and only the
// slice that completes the tile runs the epilogue and the tile_done hook.
//
// The kernel is a template over Mainloop, Epilogue, Scheduler and Hooks; it
// holds only glue. Shared memory is one SharedStorage; register budgets move
// from the producer to the consumers (setmaxnreg).
#pragma once

#include <type_traits>

#include "cute/tensor.hpp"
#include "cutlass/arch/reg_reconfig.h"
#include "cutlass/cutlass.h"
#include "cutlass/pipeline/pipeline.hpp"
#include "gemm_hooks.cuh"
#include "split_k_reduce.cuh"
#include "tile_scheduler.hpp"

namespace mkernel::gemm {

// Whether hook policy H loads some A tiles through per-source TMA descriptors (H::kPeerTmaA:
// the fused ag_gemm's MKERNEL_FUSED_AG_PEER_TMA kernels). False for every policy without the
// member, so their kernels and Params are exactly what they were.
template <class H, class = void>
struct HooksPeerTmaA : std::false_type {};
template <class H>
struct HooksPeerTmaA<H, std::void_t<decltype(H::kPeerTmaA)>> : std::bool_constant<H::kPeerTmaA> {};

// Whether hook policy H waits for a tile's A rows given the whole work unit (H::kWaitsForWork:
// producer_wait_work(params, call, work, block_m), for packed groups whose rows are located by the
// unit's group, not by m_block alone — the MoE fused dispatch). False for every policy without it.
template <class H, class = void>
struct HooksWaitForWork : std::false_type {};
template <class H>
struct HooksWaitForWork<H, std::void_t<decltype(H::kWaitsForWork)>>
    : std::bool_constant<H::kWaitsForWork> {};

// Gathered A (kGatherA, packed groups only): row r of the packed A is not read from A but from
// the row its index names, row_map[r] = i: pos + i * row_bytes for i >= 0, neg + (-1 - i) *
// row_bytes for i < 0 (the MoE dispatch's layout: a received token in the receive area, or one
// of this rank's own tokens in x). The dispatch then never expands the received tokens into
// a packed copy; the GEMM reads each row where it landed.
struct GatherArgs {
  const int32_t* row_map = nullptr;  // [M] index of each packed row's source row
  const char* pos = nullptr;
  const char* neg = nullptr;
  int64_t row_bytes = 0;  // K * element size (a multiple of 16)
};

template <class Mainloop_, class Epilogue_, class Hooks_, bool kPackedGroups = false,
          bool kGatherA = false>
class HookedGemmSm90 {
  static_assert(!kGatherA || kPackedGroups, "gathered A rows are a packed-groups mode");

 public:
  using Mainloop = Mainloop_;
  using Epilogue = Epilogue_;
  using Hooks = Hooks_;
  using TileShape = typename Mainloop::TileShape;
  using TiledMma = typename Mainloop::TiledMma;
  using ClusterShape = typename Mainloop::DispatchPolicy::ClusterShape;
  using Scheduler = PersistentTileScheduler<TileShape, ClusterShape, kPackedGroups>;
  using ElementD = typename Epilogue::ElementD;
  using ProblemShape = cute::Shape<int, int, int, int>;

  static constexpr int kMmaThreads = cute::size(TiledMma{});  // threads sharing one tile
  static constexpr bool kPingpong = kMmaThreads == cutlass::NumThreadsPerWarpGroup;
  static_assert(kPingpong || kMmaThreads == 2 * cutlass::NumThreadsPerWarpGroup,
                "HookedGemmSm90 runs a cooperative (2-warpgroup) or ping-pong (1-warpgroup) "
                "mainloop");
  // A producer warpgroup and two consumer warpgroups in both schedules.
  static constexpr int kThreads = 3 * cutlass::NumThreadsPerWarpGroup;
  // Ping-pong: consumer warpgroup g issues its MMAs after the other's (a
  // one-stage ring of two groups).
  using MathOrderBarrier = cutlass::OrderedSequenceBarrier<1, 2>;
  // The producer needs few registers; the consumers hold a 128xN fp32 accumulator each.
  // (A 56/224 split for side-role kernels spilled more, 112 bytes in both fused configs.)
  static constexpr uint32_t kLoadRegisters = 40;
  static constexpr uint32_t kMmaRegisters = 232;

  using MainloopPipeline = typename Mainloop::MainloopPipeline;
  using MainloopState = typename Mainloop::PipelineState;
  using EpiLoadPipeline = typename Epilogue::LoadPipeline;
  using EpiLoadState = typename Epilogue::LoadPipelineState;
  using EpiStorePipeline = typename Epilogue::StorePipeline;
  using EpiStoreState = typename Epilogue::StorePipelineState;

  struct SharedStorage {
    struct Pipelines : cute::aligned_struct<16, cute::_1> {
      alignas(16) typename Mainloop::PipelineStorage mainloop;
      alignas(16) typename Epilogue::PipelineStorage epi_load;
      alignas(16) typename MathOrderBarrier::SharedStorage math_order;
    } pipelines;
    struct Tensors : cute::aligned_struct<128, cute::_1> {
      typename Epilogue::TensorStorage epilogue;
      typename Mainloop::TensorStorage mainloop;
    } tensors;
    int split_last;  // SplitKReduce's verdict, shared by the consumer threads
    int hook_work;   // the hooks' per-CTA work counter (side and tail roles claim items)
    typename Hooks::SideStorage side;  // the side role's own shared memory (empty for most)
  };
  static constexpr int kSmemBytes = sizeof(SharedStorage);
  static_assert(kSmemBytes <= 227 * 1024, "shared storage exceeds the sm90 opt-in limit");

  // One consumer thread's accumulator fragment: BLOCK_M x BLOCK_N fp32 over the MMA threads.
  static constexpr int kFrag =
      cute::size<0>(TileShape{}) * cute::size<1>(TileShape{}) / kMmaThreads;
  using SplitK = SplitKReduce<kMmaThreads, kFrag>;

  struct ParamsBase {
    ProblemShape problem;
    typename Mainloop::Params mainloop;
    typename Epilogue::Params epilogue;
    typename Scheduler::Params scheduler;
    typename Hooks::Params hooks;
    SplitKWorkspace split_k;  // used when scheduler.splits > 1
    // D for the register-store epilogue (store_clipped: packed groups and
    // ping-pong): [M, N] row-major per batch, or every expert's rows when packed.
    ElementD* direct_d = nullptr;
  };
  // Per-source A (Hooks::kPeerTmaA): peer_a[s] is the mainloop's Params with A = source s's
  // [rows, K] block (its own TMA descriptor; B as in `mainloop`). A tile whose rows all come
  // from source s (Hooks::a_source) is loaded through peer_a[s] at row - Hooks::a_source_row0:
  // one descriptor cannot span the ranks' separate IPC allocations, so one per source, kept in
  // the grid-constant parameter space (a TMA descriptor must live in param / const / global
  // memory; taking a __grid_constant__ member's address keeps it there).
  static constexpr bool kPeerTmaA = HooksPeerTmaA<Hooks_>::value;
  struct ParamsPeerA : ParamsBase {
    typename Mainloop::Params peer_a[kPeerTmaA ? Hooks_::kPeerSources : 1];
  };
  static constexpr bool kGathersA = kGatherA;
  // Producer warps that load (kGatherA: all four share the gather of A's rows, warp 0 also
  // issues B; one warp alone was instruction-bound at 0.24x the TMA kernel).
  static constexpr int kGatherWarps = 4;
  static constexpr int kLoadWarps = kGatherA ? kGatherWarps : 1;
  static_assert(!kGatherA || !Hooks_::kSideRole, "gathering A takes the idle producer warps");
  struct ParamsGatherA : ParamsBase {
    GatherArgs gather;
  };
  using Params = std::conditional_t<kPeerTmaA, ParamsPeerA,
                                    std::conditional_t<kGatherA, ParamsGatherA, ParamsBase>>;

  enum class WarpGroupRole { Producer = 0, Consumer0 = 1, Consumer1 = 2 };
  enum class ProducerWarpRole { Mainloop = 0, Idle1 = 1, Idle2 = 2, Idle3 = 3 };

  CUTLASS_DEVICE void operator()(Params const& params, char* smem_buf) {
    using namespace cute;
    SharedStorage& shared = *reinterpret_cast<SharedStorage*>(smem_buf);
    const int thread_idx = static_cast<int>(threadIdx.x);
    const int warp_idx = cutlass::canonical_warp_idx_sync();
    const int lane_idx = cutlass::canonical_lane_idx();
    const auto role = WarpGroupRole(cutlass::canonical_warp_group_idx());
    const auto producer_role = ProducerWarpRole(warp_idx % cutlass::NumWarpsPerWarpGroup);
    const int warp_group_thread_idx = thread_idx % cutlass::NumThreadsPerWarpGroup;
    const int mma_thread_idx = thread_idx - cutlass::NumThreadsPerWarpGroup;
    const uint32_t block_rank_in_cluster = cute::block_rank_in_cluster();

    if (warp_idx == 0 && cute::elect_one_sync()) {
      Mainloop::prefetch_tma_descriptors(params.mainloop);
      Epilogue::prefetch_tma_descriptors(params.epilogue);
      if constexpr (kPeerTmaA) {
        for (int s = 0; s < Hooks::a_sources(params.hooks); ++s) {
          // (B too: the tiles of source s issue B through this Params' own copy of its
          // descriptor, another address for the descriptor cache.)
          cute::prefetch_tma_descriptor(params.peer_a[s].tma_load_a.get_tma_descriptor());
          cute::prefetch_tma_descriptor(params.peer_a[s].tma_load_b.get_tma_descriptor());
        }
      }
    }

    typename MainloopPipeline::Params mainloop_pipe;
    if (role == WarpGroupRole::Producer && producer_role == ProducerWarpRole::Mainloop) {
      mainloop_pipe.role = MainloopPipeline::ThreadCategory::Producer;
    }
    if (role != WarpGroupRole::Producer) {
      mainloop_pipe.role = MainloopPipeline::ThreadCategory::Consumer;
    }
    mainloop_pipe.is_leader = warp_group_thread_idx == 0;
    mainloop_pipe.num_consumers = kMmaThreads;
    mainloop_pipe.transaction_bytes = params.mainloop.tma_transaction_bytes;
    if constexpr (kGatherA) {
      // A stage fills by B's TMA bytes and, for A, one cp.async arrival per producer lane
      // (load_gathered) besides the leader's arrive-and-expect.
      mainloop_pipe.transaction_bytes = params.mainloop.tma_transaction_bytes_nk;
      // (the leader's arrive comes from warp 0 lane 0, the producer warpgroup's thread 0)
      mainloop_pipe.num_producers = 1 + kGatherWarps * cutlass::NumThreadsPerWarp;
      if (role == WarpGroupRole::Producer && producer_role < ProducerWarpRole(kGatherWarps)) {
        mainloop_pipe.role = MainloopPipeline::ThreadCategory::Producer;
      }
    }
    MainloopPipeline mainloop_pipeline(shared.pipelines.mainloop, mainloop_pipe, ClusterShape{});

    // No C operand is loaded (D = A·Bᵀ), but the epilogue's interface takes a
    // load pipeline: build it with consumers only.
    typename EpiLoadPipeline::Params epi_load_pipe;
    if (role != WarpGroupRole::Producer) {
      epi_load_pipe.role = EpiLoadPipeline::ThreadCategory::Consumer;
    }
    epi_load_pipe.dst_blockid = block_rank_in_cluster;
    epi_load_pipe.producer_arv_count = cutlass::NumThreadsPerWarp;
    epi_load_pipe.consumer_arv_count = kMmaThreads;
    if constexpr (Epilogue::RequiresTransactionBytes) {
      epi_load_pipe.transaction_bytes = params.epilogue.tma_transaction_bytes;
    }
    EpiLoadPipeline epi_load_pipeline(shared.pipelines.epi_load, epi_load_pipe);
    typename EpiStorePipeline::Params epi_store_pipe;
    epi_store_pipe.always_wait = true;
    EpiStorePipeline epi_store_pipeline(epi_store_pipe);

    typename MathOrderBarrier::Params order_params;
    order_params.group_id = role == WarpGroupRole::Consumer1 ? 1 : 0;
    order_params.group_size = cutlass::NumThreadsPerWarpGroup;
    MathOrderBarrier math_order(shared.pipelines.math_order, order_params);

    if constexpr (Hooks::kSideRole) {
      if (thread_idx == 0) shared.hook_work = 0;  // ordered by the barrier below
    }
    // Every CTA of the cluster must see the barriers initialised.
    if constexpr (size(ClusterShape{}) > 1) {
      cute::cluster_arrive_relaxed();
      cute::cluster_wait();
    } else {
      __syncthreads();
    }
    if constexpr (Hooks::kSideRole && size(ClusterShape{}) > 1) {
      __syncthreads();  // hook_work's initial value (the relaxed cluster arrive orders nothing)
    }
    // Under programmatic dependent launch the set-up above overlapped the
    // previous kernel's tail; no global memory (operands, flags, split-K
    // tickets, D) is touched before that kernel's writes are visible. A no-op
    // when launched without PDL. (Not CUTLASS's wrapper: that one compiles to
    // nothing unless CUTLASS_ENABLE_GDC_FOR_SM90 is defined, and a kernel
    // launched with PDL must never skip this wait.)
    asm volatile("griddepcontrol.wait;" ::: "memory");
    if constexpr (Hooks::kSideRole) {
      // A hook policy may let dependent work be scheduled from the start instead of after
      // the consumers' mainloop (the fused ops, for measuring: kernels/fused/README.md).
      // Nothing reads this grid's results before griddepcontrol.wait, so it is always safe.
      if (Hooks::trigger_early(params.hooks)) asm volatile("griddepcontrol.launch_dependents;" :::);
    }
    // Per-launch state of the hooks (the fused ops' call number), read by
    // every thread before any CTA can reach call_end; each thread's own copy.
    typename Hooks::Call call = Hooks::call_begin(params.hooks);

    const auto problem_mnkl = params.problem;
    Mainloop mainloop;
    auto load_inputs = mainloop.load_init(problem_mnkl, params.mainloop);
    Tensor gA_mkl = get<0>(load_inputs);
    constexpr int kBlockM = size<0>(TileShape{});

    if (role == WarpGroupRole::Producer) {
      cutlass::arch::warpgroup_reg_dealloc<kLoadRegisters>();
      if (producer_role >= ProducerWarpRole(kLoadWarps)) {
        // The idle producer warps: the hooks' side role (copy / reduce), or nothing.
        if constexpr (!Hooks::kSideRole) return;
        Hooks::template side_role<Scheduler>(params.hooks, call,
                                             warp_group_thread_idx - cutlass::NumThreadsPerWarp,
                                             params.scheduler, &shared.hook_work, shared.side);
      } else {
      MainloopState write_state = cutlass::make_producer_start_state<MainloopPipeline>();
      typename Scheduler::Cursor cursor;
      for (int unit = Scheduler::first_unit();; unit += Scheduler::unit_stride()) {
        const auto work = Scheduler::get(params.scheduler, unit, cursor);
        if (!work.valid) break;
        if (work.skip) continue;
        if constexpr (HooksWaitForWork<Hooks>::value) {
          if (lane_idx == 0) Hooks::producer_wait_work(params.hooks, call, work, kBlockM);
          __syncwarp();
        } else if constexpr (Hooks::kWaitsForA) {
          if (lane_idx == 0) Hooks::producer_wait(params.hooks, call, work.m_block, kBlockM);
          __syncwarp();
        }
        if constexpr (kGatherA) {
          load_gathered(params, mainloop_pipeline, write_state, get<1>(load_inputs), work,
                        warp_idx % cutlass::NumWarpsPerWarpGroup, lane_idx,
                        block_rank_in_cluster, shared);
          write_state.advance(work.k_count);
          continue;
        }
        auto blk_coord = make_coord(work.m_block, work.n_block, _, work.batch);
        auto k_tile_iter =
            cute::make_coord_iterator(idx2crd(work.k_begin, shape<3>(gA_mkl)), shape<3>(gA_mkl));
        if constexpr (kPeerTmaA) {
          const int src = Hooks::a_source(params.hooks, work.m_block, kBlockM);
          if (src >= 0) {
            // Source src's own descriptor; its rows start at a_source_row0 of the GEMM's M.
            auto const& mp = params.peer_a[src];
            auto [M, N, K, L] = problem_mnkl;
            Tensor mA = mp.tma_load_a.get_tma_tensor(make_shape(M, K, L));
            Tensor gA = local_tile(
                domain_offset(make_coord(-Hooks::a_source_row0(params.hooks, src), 0, 0), mA),
                TileShape{}, make_coord(_, _, _), Step<_1, cute::X, _1>{});
            mainloop.load(mp, mainloop_pipeline, write_state,
                          cute::make_tuple(gA, get<1>(load_inputs)), blk_coord, k_tile_iter,
                          work.k_count, lane_idx, block_rank_in_cluster, shared.tensors.mainloop);
            write_state.advance(work.k_count);
            continue;
          }
        }
        if constexpr (kPackedGroups) {
          // A's rows of this expert start at row_offset and its batch mode is
          // unused (B's is the expert): shift the view so tile (m_block, batch)
          // lands on rows row_offset + m_block * BLOCK_M of batch 0.
          auto [M, N, K, L] = problem_mnkl;
          Tensor mA = params.mainloop.tma_load_a.get_tma_tensor(make_shape(M, K, L));
          Tensor gA = local_tile(domain_offset(make_coord(work.row_offset, 0, -work.batch), mA),
                                 TileShape{}, make_coord(_, _, _), Step<_1, cute::X, _1>{});
          mainloop.load(params.mainloop, mainloop_pipeline, write_state,
                        cute::make_tuple(gA, get<1>(load_inputs)), blk_coord, k_tile_iter,
                        work.k_count, lane_idx, block_rank_in_cluster, shared.tensors.mainloop);
        } else {
          mainloop.load(params.mainloop, mainloop_pipeline, write_state, load_inputs, blk_coord,
                        k_tile_iter, work.k_count, lane_idx, block_rank_in_cluster,
                        shared.tensors.mainloop);
        }
        write_state.advance(work.k_count);
      }
      if constexpr (kGatherA) {
        asm volatile("cp.async.wait_all;" ::: "memory");
        if (producer_role != ProducerWarpRole::Mainloop) return;
      }
      mainloop.load_tail(mainloop_pipeline, write_state);
      }
    } else if constexpr (kPingpong) {
      cutlass::arch::warpgroup_reg_alloc<kMmaRegisters>();
      TiledMma tiled_mma;
      MainloopState read_state;
      typename Scheduler::Cursor cursor;
      const int group = role == WarpGroupRole::Consumer1 ? 1 : 0;
      int turn = 0;  // this CTA's tiles so far: even ones are Consumer0's, odd ones Consumer1's
      for (int unit = Scheduler::first_unit();; unit += Scheduler::unit_stride()) {
        const auto work = Scheduler::get(params.scheduler, unit, cursor);
        if (!work.valid) break;
        if (work.skip) continue;
        if ((turn++ & 1) != group) {  // the other warpgroup's tile: its stages pass by
          read_state.advance(work.k_count);
          continue;
        }
        auto accumulators = partition_fragment_C(tiled_mma, take<0, 2>(TileShape{}));
        math_order.wait();
        mainloop.mma(mainloop_pipeline, read_state, accumulators, work.k_count,
                     warp_group_thread_idx, shared.tensors.mainloop, params.mainloop);
        math_order.arrive();  // the other warpgroup may issue its MMAs
        mainloop.mma_tail(mainloop_pipeline, read_state, work.k_count);
        read_state.advance(work.k_count);
        store_clipped(params, work, accumulators, tiled_mma, warp_group_thread_idx);
        if constexpr (Hooks::kSignalsTiles) {
          // Every thread's stores are issued before one releases the tile.
          cutlass::arch::NamedBarrier::sync(cutlass::NumThreadsPerWarpGroup,
                                            kTileStoredBarrier + group);
          Hooks::tile_stored(params.hooks, call, work.m_block, work.n_block, kBlockM,
                             warp_group_thread_idx);
        }
      }
      asm volatile("griddepcontrol.launch_dependents;" :::);
    } else {
      cutlass::arch::warpgroup_reg_alloc<kMmaRegisters>();
      TiledMma tiled_mma;
      Epilogue epilogue(params.epilogue, shared.tensors.epilogue);
      MainloopState read_state;
      EpiLoadState epi_load_state;
      EpiStoreState epi_store_state = cutlass::make_producer_start_state<EpiStorePipeline>();
      bool stored = false;
      // Hooks::kDeferTileDone: the tile stored last, whose tile_done waits for the next
      // tile's mainloop (its stores are long written by then; waiting for them right after
      // issuing them stalled the warpgroup for the whole store on every tile).
      int pending_m = -1, pending_n = 0;
      typename Scheduler::Cursor cursor;
      for (int unit = Scheduler::first_unit();; unit += Scheduler::unit_stride()) {
        const auto work = Scheduler::get(params.scheduler, unit, cursor);
        if (!work.valid) break;
        if (work.skip) continue;
        auto blk_coord = make_coord(work.m_block, work.n_block, _, work.batch);
        auto accumulators = partition_fragment_C(tiled_mma, take<0, 2>(TileShape{}));
        mainloop.mma(mainloop_pipeline, read_state, accumulators, work.k_count, mma_thread_idx,
                     shared.tensors.mainloop, params.mainloop);
        mainloop.mma_tail(mainloop_pipeline, read_state, work.k_count);
        read_state.advance(work.k_count);
        if constexpr (Hooks::kSignalsTiles && Hooks::kDeferTileDone) {
          if (pending_m >= 0) {
            Hooks::tile_done(params.hooks, call, pending_m, pending_n, kBlockM, mma_thread_idx);
            pending_m = -1;
          }
        }
        if (params.scheduler.splits > 1 &&
            !SplitK::reduce(params.split_k, work.tile, work.split, params.scheduler.splits,
                            accumulators, mma_thread_idx, &shared.split_last)) {
          continue;  // another slice of this tile finishes it
        }
        if constexpr (kPackedGroups) {
          store_clipped(params, work, accumulators, tiled_mma, mma_thread_idx);
          continue;
        }
        auto [next_load, next_store] =
            epilogue.store(epi_load_pipeline, epi_load_state, epi_store_pipeline, epi_store_state,
                           problem_mnkl, TileShape{}, blk_coord, accumulators, tiled_mma,
                           mma_thread_idx, shared.tensors.epilogue);
        epi_load_state = next_load;
        epi_store_state = next_store;
        stored = true;
        if constexpr (Hooks::kSignalsTiles) {
          if constexpr (Hooks::kDeferTileDone) {
            pending_m = work.m_block;
            pending_n = work.n_block;
          } else {
            Hooks::tile_done(params.hooks, call, work.m_block, work.n_block, kBlockM,
                             mma_thread_idx);
          }
        }
      }
      // This CTA's mainloop work is over: the next kernel on the stream may
      // start its set-up on SMs as they free up.
      asm volatile("griddepcontrol.launch_dependents;" :::);
      if (stored) {
        epilogue.store_tail(epi_load_pipeline, epi_load_state, epi_store_pipeline, epi_store_state);
      }
      if constexpr (Hooks::kSignalsTiles && Hooks::kDeferTileDone) {
        if (pending_m >= 0) {
          Hooks::tile_done(params.hooks, call, pending_m, pending_n, kBlockM, mma_thread_idx);
        }
      }
      if constexpr (Hooks::kSideRole) {
        // The consumers' last tile is stored: their warps (full register budget) join the
        // hooks' per-CTA work (the fused reduce), claiming items from hook_work. The
        // mainloop's ring is theirs now: every stage this CTA's consumers waited for has
        // landed (a cluster peer multicasts only stages these consumers consume) and none is
        // loaded again.
        Hooks::template tail_role<Scheduler>(params.hooks, call, mma_thread_idx,
                                             params.scheduler, &shared.hook_work, shared.side,
                                             &shared.tensors.mainloop,
                                             static_cast<int>(sizeof(shared.tensors.mainloop)));
      }
    }
    if constexpr (Hooks::kSideRole) {
      // Every role of the CTA is done (its stores issued, its waits over):
      // one thread ends the call for the CTA.
      __syncthreads();
      if (thread_idx == 0) Hooks::call_end(params.hooks, call);
    }
  }

  // Named barriers (user ids) of the ping-pong consumers, one per warpgroup.
  static constexpr uint32_t kTileStoredBarrier = 0;

  // The producer warps' loads of one work unit with gathered A rows (kGatherA): B by TMA as
  // the collective issues it (its cluster multicast included), A by cp.async, 16 bytes per
  // lane, into the very layout the TMA would write (SW128 K-major: row r of a stage at r * 128
  // bytes, its 16-byte chunk q at (q ^ (r % 8)) * 16). Warp w gathers rows [w, w + 1) * BM / 4
  // of the tile; eight lanes cover one row's 128 bytes of a k-block, so each warp-wide cp.async
  // reads four whole row segments. Rows past the expert's end are not loaded: their
  // accumulator rows are never stored (store_clipped), and each output row depends on its own
  // A row only. The stage's full barrier counts the leader's arrive-and-expect (B's bytes) and
  // one cp.async arrival per gathering thread (.noinc: counted in num_producers), so the
  // consumers see the stage only once both have landed.
  //
  // Measured on one H200 (benchmarks/micro/gemm_gather.cu, seed shape 32768 x 2048 x 7168 over
  // 128 experts, NOTES.md session 23): one warp with CuTe-addressed copies ran at 0.24x the
  // TMA kernel on a packed copy, four warps 0.57-0.64x, the hand-addressed copies without
  // compiler barriers 0.85-0.98x, with the L2::128B prefetch hint 0.97x on coop_128x256_c1x2
  // (0.89x on _c2x1); one TMA per row ([1, 64] boxes) 0.35-0.60x.
  template <class TensorB>
  CUTLASS_DEVICE static void load_gathered(Params const& params, MainloopPipeline& pipeline,
                                           MainloopState write_state, TensorB const& gB_nkl,
                                           typename Scheduler::Work const& work, int warp,
                                           int lane_idx, uint32_t block_rank_in_cluster,
                                           SharedStorage& shared) {
    using namespace cute;
    using ElementA = typename Mainloop::ElementA;
    constexpr int kBlockM = size<0>(TileShape{});
    constexpr int kBlockK = size<2>(TileShape{});
    constexpr int kRowBytes = kBlockK * static_cast<int>(sizeof(ElementA));
    static_assert(kRowBytes == 128, "a k-block row is one 128-byte swizzle atom row");
    static_assert(cute::is_same_v<typename Mainloop::SmemLayoutAtomA,
                                  decltype(GMMA::Layout_K_SW128_Atom<ElementA>{})>,
                  "the gather writes the SW128 K-major layout");
    constexpr int kChunks = kRowBytes / 16;  // cp.async chunks per row
    constexpr int kRowsPerWarp = kBlockM / kGatherWarps;
    constexpr int kPerLane = kRowsPerWarp * kChunks / cutlass::NumThreadsPerWarp;
    constexpr int kRowStep = cutlass::NumThreadsPerWarp / kChunks;  // rows per warp-wide copy
    static_assert(kRowsPerWarp % kRowStep == 0, "the gathering warps split a tile's rows");
    constexpr int kStageBytes = kBlockM * kRowBytes;
    // The tile's source rows, in the epilogue's shared memory (packed groups store from
    // registers and never use it); each warp its own part: no barrier across the warps.
    static_assert(sizeof(typename Epilogue::TensorStorage) >= kBlockM * sizeof(const char*),
                  "the gathered rows' pointers must fit the unused epilogue storage");
    const char** rows = reinterpret_cast<const char**>(&shared.tensors.epilogue);
    const GatherArgs& g = params.gather;
    const int row0 = warp * kRowsPerWarp;
    __syncwarp();  // every lane issued the previous unit's copies (read its pointers)
    for (int r = row0 + lane_idx; r < row0 + kRowsPerWarp; r += cutlass::NumThreadsPerWarp) {
      const int local = work.m_block * kBlockM + r;
      const char* src = nullptr;
      if (local < work.rows) {
        const int64_t i = __ldg(g.row_map + work.row_offset + local);
        src = i >= 0 ? g.pos + i * g.row_bytes : g.neg + (-1 - i) * g.row_bytes;
      }
      rows[r] = src;
    }
    __syncwarp();

    Tensor sB = make_tensor(make_smem_ptr(shared.tensors.mainloop.smem_B.data()),
                            typename Mainloop::SmemLayoutB{});  // (BLK_N, BLK_K, PIPE)
    constexpr uint32_t kClusterX = size<0>(ClusterShape{});
    const uint32_t cta_m = block_rank_in_cluster % kClusterX;
    const uint32_t cta_n = block_rank_in_cluster / kClusterX;
    auto block_tma_b = params.mainloop.tma_load_b.get_slice(cta_m);
    Tensor gB = gB_nkl(_, _, work.n_block, _, work.batch);  // (BLK_N, BLK_K, k)
    Tensor tBgB = block_tma_b.partition_S(gB);
    Tensor tBsB = block_tma_b.partition_D(sB);
    uint16_t mcast_mask_b = 0;
    if constexpr (cute::is_same_v<typename Mainloop::GmemTiledCopyB, SM90_TMA_LOAD_MULTICAST>) {
      auto block_layout = Layout<ClusterShape>{};  // (m, n) -> block id
      for (int m = 0; m < size<0>(block_layout); ++m) {
        mcast_mask_b |= static_cast<uint16_t>(1u << block_layout(m, cta_n, Int<0>{}));
      }
    }
    const bool leader = warp == 0 && lane_idx == 0;
    const uint32_t smem_a = cute::cast_smem_ptr_to_uint(shared.tensors.mainloop.smem_A.data());
    const int q = lane_idx % kChunks;
    for (int kt = work.k_begin; kt < work.k_begin + work.k_count; ++kt) {
      // Every gathering thread waits for the stage to be free; the leader also arrives with
      // B's expected bytes.
      pipeline.producer_acquire(write_state);
      const int stage = write_state.index();
      const uint32_t stage_base = smem_a + stage * kStageBytes;
      const int64_t col = static_cast<int64_t>(kt) * kRowBytes + q * 16;
      // A chunk past K (the last k-block when K is not a multiple of BLOCK_K) is zero-filled
      // (src-size 0: nothing is read), as the TMA fills its out-of-bounds columns: B's are
      // zero there too, but A's must be finite.
      const uint32_t bytes = col < g.row_bytes ? 16u : 0u;
      // A batch of pointers first, then its copies: no compiler barrier between them (the
      // copies' asm has no memory clobber), so the shared loads are not serialised behind the
      // copies; batches of 4 keep 8 registers of pointers in the 40-register producer (16
      // pointers per lane at 256-row tiles spilled).
      constexpr int kBatch = kPerLane < 4 ? kPerLane : 4;
      static_assert(kPerLane % kBatch == 0, "whole batches of copies per lane");
#pragma unroll
      for (int b = 0; b < kPerLane; b += kBatch) {
        const char* src[kBatch];
#pragma unroll
        for (int i = 0; i < kBatch; ++i) {
          src[i] = rows[row0 + lane_idx / kChunks + (b + i) * kRowStep];
        }
#pragma unroll
        for (int i = 0; i < kBatch; ++i) {
          const int r = row0 + lane_idx / kChunks + (b + i) * kRowStep;
          const uint32_t dst = stage_base + r * kRowBytes + ((q ^ (r & 7)) << 4);
          if (src[i] != nullptr) {
            asm volatile("cp.async.cg.shared.global.L2::128B [%0], [%1], 16, %2;" ::"r"(dst),
                         "l"(src[i] + (bytes ? col : 0)), "r"(bytes));
          }
        }
      }
      auto* full = pipeline.producer_get_barrier(write_state);
      asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];" ::"r"(
                       cute::cast_smem_ptr_to_uint(full))
                   : "memory");
      if (leader) {
        copy(params.mainloop.tma_load_b.with(*full, mcast_mask_b), tBgB(_, _, _, kt),
             tBsB(_, _, _, stage));
      }
      ++write_state;
    }
  }


  // Register -> global stores of one tile, rows clipped at M (packed groups:
  // at the expert's end), columns at N. Every thread of the tile's MMA calls it.
  //
  // In the wgmma accumulator layout the 4 lanes of a quad hold one row, two
  // adjacent columns each of every 8-column block. Storing those pairs as
  // they are is 4 bytes per lane and 16 bytes per row per instruction; a 4x4
  // transpose inside the quad (3 shuffles) gives each lane all 8 columns of
  // one block instead, so every store is 16 bytes and a warp writes 64
  // contiguous bytes of each of its 8 rows: a quarter of the transactions.
  template <class Accumulators>
  CUTLASS_DEVICE static void store_clipped(Params const& params,
                                           typename Scheduler::Work const& work,
                                           Accumulators const& acc, TiledMma const& tiled_mma,
                                           int mma_thread_idx) {
    using namespace cute;
    constexpr int kBM = size<0>(TileShape{}), kBN = size<1>(TileShape{});
    const int m = get<0>(params.problem), n = get<1>(params.problem);
    const int row0 = work.m_block * kBM, col0 = work.n_block * kBN;
    // Offsets that run backwards or past M (bad input) must not write outside D.
    const int rows = min(work.rows, m - work.row_offset);
    if (work.row_offset < 0 || row0 >= rows || col0 >= n) return;
    // Packed: the expert's rows start at row_offset; batched: batch b's D follows b-1's.
    const int64_t first_row = kPackedGroups ? static_cast<int64_t>(work.row_offset) + row0
                                            : static_cast<int64_t>(work.batch) * m + row0;
    ElementD* base = params.direct_d + first_row * n + col0;
    Tensor gD =
        make_tensor(make_gmem_ptr(base), make_shape(Int<kBM>{}, Int<kBN>{}), make_stride(n, _1{}));
    Tensor cD = make_identity_tensor(make_shape(Int<kBM>{}, Int<kBN>{}));
    Tensor tDcD = tiled_mma.get_thread_slice(mma_thread_idx).partition_C(cD);
    const int rows_left = rows - row0, cols_left = n - col0;
    // Fragment: ((2 columns, 2 row halves, kBlocks 8-column blocks), MMA_M, MMA_N).
    constexpr int kBlocks = size<0, 2>(Accumulators{});
    static_assert(
        size<0, 0>(Accumulators{}) == 2 && size<0, 1>(Accumulators{}) == 2 && kBlocks % 4 == 0,
        "store_clipped expects the sm90 wgmma accumulator layout");
    const int quad_lane = mma_thread_idx % 4;
    cutlass::NumericArrayConverter<ElementD, float, 2> to_pair;
    auto packed = [&](auto const& lo, auto const& hi) {
      cutlass::Array<float, 2> f;
      f[0] = lo;
      f[1] = hi;
      const cutlass::Array<ElementD, 2> d = to_pair(f);
      return reinterpret_cast<uint32_t const&>(d);
    };
    CUTLASS_PRAGMA_UNROLL
    for (int mm = 0; mm < size<1>(acc); ++mm) {
      CUTLASS_PRAGMA_UNROLL
      for (int nn = 0; nn < size<2>(acc); ++nn) {
        CUTLASS_PRAGMA_UNROLL
        for (int h = 0; h < 2; ++h) {
          CUTLASS_PRAGMA_UNROLL
          for (int g = 0; g < kBlocks / 4; ++g) {
            uint32_t x[4];  // this lane's pair in blocks 4g .. 4g+3
            CUTLASS_PRAGMA_UNROLL
            for (int i = 0; i < 4; ++i) {
              x[i] = packed(acc(make_coord(make_coord(0, h, 4 * g + i), mm, nn)),
                            acc(make_coord(make_coord(1, h, 4 * g + i), mm, nn)));
            }
            auto pick = [&](int i) { return i == 0 ? x[0] : i == 1 ? x[1] : i == 2 ? x[2] : x[3]; };
            // From lane q^k: its pair of block 4g+q (it sends the block of its partner).
            const uint32_t r1 = __shfl_xor_sync(0xffffffffu, pick(quad_lane ^ 1), 1);
            const uint32_t r2 = __shfl_xor_sync(0xffffffffu, pick(quad_lane ^ 2), 2);
            const uint32_t r3 = __shfl_xor_sync(0xffffffffu, pick(quad_lane ^ 3), 3);
            const uint32_t own = pick(quad_lane);
            auto from_lane = [&](int i) {
              const int k = i ^ quad_lane;
              return k == 0 ? own : k == 1 ? r1 : k == 2 ? r2 : r3;
            };
            const uint4 chunk = make_uint4(from_lane(0), from_lane(1), from_lane(2), from_lane(3));
            // This lane's column pair in block 4g+q starts 2q columns into the block.
            const auto rc = tDcD(make_coord(make_coord(0, h, 4 * g + quad_lane), mm, nn));
            const int r = get<0>(rc), c = get<1>(rc) - 2 * quad_lane;
            if (r < rows_left && c < cols_left) {
              *reinterpret_cast<uint4*>(&gD(r, c)) = chunk;
            }
          }
        }
      }
    }
  }
};

template <class Kernel>
__global__ void __launch_bounds__(Kernel::kThreads, 1)
    hooked_gemm_kernel(CUTLASS_GRID_CONSTANT typename Kernel::Params const params) {
  extern __shared__ char smem[];
  Kernel{}(params, smem);
}

}  // namespace mkernel::gemm
