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
#include "tile_handoff.cuh"
#include "tile_scheduler.hpp"

namespace mkernel::attention {

template <class T>
struct TypeTag {
  using type = T;
};

// 128 arrivals (one consumer warpgroup's threads) on the empty barrier of stage `stage` of a
// TMA pipeline without a cluster, by one thread: releases the stage for the whole warpgroup.
template <class PipelineStorage>
CUTLASS_DEVICE void arrive_v_empty(PipelineStorage& storage, int stage) {
  const uint32_t bar = static_cast<uint32_t>(__cvta_generic_to_shared(&storage.empty_barrier_[stage]));
  asm volatile(
      "{\n\t.reg .b64 state;\n\tmbarrier.arrive.release.cta.shared::cta.b64 state, [%0], %1;\n\t}"
      ::"r"(bar), "r"(static_cast<uint32_t>(cutlass::NumThreadsPerWarpGroup)) : "memory");
}

template <class Traits_, class Hooks_>
class AttentionFwdSm90 {
 public:
  using Traits = Traits_;
  using Hooks = Hooks_;
  using Mainloop = MainloopFwdSm90<Traits>;
  using Epilogue = EpilogueFwdSm90<Traits>;
  // The own-shard-first split (tile_scheduler.hpp kPhases) is built into the KV-wait policies
  // with claimed tiles (ring attention's whole mode), on per launch by the scheduler's
  // phase_split.
  static constexpr bool kPhases = Hooks::kWaitsForKV && Hooks::kClaimsTiles;
  using Scheduler = PersistentTileScheduler<Traits::kCausal, Traits::kCausal && Hooks::kZigzag,
                                            Traits::kSplitTail, kPhases>;
  static constexpr int kThreads = Traits::kNumThreads;
  static constexpr int kNumMmaThreads = Traits::kNumMmaThreads;

  struct SharedStorage {
    struct Tensors : cute::aligned_struct<1024, cute::_1> {
      typename Mainloop::TensorStorage mainloop;
      typename Epilogue::TensorStorage epilogue;
    } tensors;
    typename Mainloop::PipelineStorage pipelines;
  };
  // A forwarding hook policy (kv_forward_hooks.cuh) takes its staging buffers past the
  // SharedStorage (128-byte aligned); the other policies add nothing.
  static constexpr int kForwardSmemOffset = (static_cast<int>(sizeof(SharedStorage)) + 127) / 128 * 128;
  // A policy that may claim tiles (tile_handoff.cuh) takes the handoff ring after that.
  using Handoff = TileHandoff<kNumMmaThreads / cutlass::NumThreadsPerWarp>;
  static constexpr int kHandoffOffset = kForwardSmemOffset + Hooks::kForwardSmemBytes;
  // The static order's tile mailbox (Traits::kTileMailbox, plain kernels) takes the same place.
  using Mailbox = TileMailbox<kNumMmaThreads / cutlass::NumThreadsPerWarp>;
  static_assert(!Traits::kTileMailbox ||
                    (!Hooks::kClaimsTiles && !Hooks::kForwardsKV && !Hooks::kWaitsForKV &&
                     !kPhases && !Traits::kCrossTile && Traits::kClusterM == 1),
                "bit 25 (the tile mailbox): plain kernels, static tiles, no cluster, not the "
                "cross-tile walk");
  static constexpr int kHandoffEnd =
      Hooks::kClaimsTiles
          ? kHandoffOffset + static_cast<int>(sizeof(Handoff))
          : (Traits::kTileMailbox
                 ? kHandoffOffset + static_cast<int>(sizeof(Mailbox))
                 : (Hooks::kForwardsKV ? kForwardSmemOffset + Hooks::kForwardSmemBytes
                                       : static_cast<int>(sizeof(SharedStorage))));
  // A policy that waits for KV flags: the load lane's SeenFlags (8-byte aligned) last.
  static constexpr int kSeenOffset = (kHandoffEnd + 7) / 8 * 8;
  static constexpr int kSmemBytes =
      Hooks::kWaitsForKV ? kSeenOffset + static_cast<int>(sizeof(SeenFlags)) : kHandoffEnd;
  static_assert(kSmemBytes <= 227 * 1024, "shared storage exceeds the sm90 opt-in limit");
  static_assert(!Traits::kOInV || Mainloop::kVStageElems >= Epilogue::kOElems,
                "O in a V stage (variant bit 7): a V stage must hold the O tile");

  struct Params {
    typename Mainloop::Params mainloop;
    typename Epilogue::Params epilogue;
    typename Scheduler::Params scheduler;
    typename Hooks::Params hooks;
  };

  // The schedule: without a cluster, the scheduler's tiles t = blockIdx.x + k * gridDim.x.
  // With a cluster of 2, the scheduler's tiles are query-block *pairs* (its m_blocks is
  // halved, rounded up) walked by cluster: CTA r of the cluster takes query block 2m + r of
  // pair m (a block past the end, when the count is odd, runs on out-of-range rows: TMA
  // fills Q with zeros and clips the stores, the LSE store skips the rows; the CTA must still
  // load and release its half of every K/V block for its peer).
  static constexpr int kClusterM = Traits::kClusterM;
  CUTLASS_DEVICE static int first_tile() { return static_cast<int>(blockIdx.x) / kClusterM; }
  CUTLASS_DEVICE static int tile_stride() { return static_cast<int>(gridDim.x) / kClusterM; }
  CUTLASS_DEVICE static WorkTile get_tile(typename Scheduler::Params const& sp, int t) {
    WorkTile w = Scheduler::get(sp, t);
    if constexpr (kClusterM > 1) {
      w.m_block = w.m_block * kClusterM + static_cast<int>(cute::block_rank_in_cluster());
    }
    return w;
  }

  // Claimed tiles (hooked kernels with a tile counter): the producer's claim order is the
  // scheduler's linear one (causal: longest tiles first; the zigzag pair order is for static
  // lists only, the host turns it off), handed to the consumers through the Handoff ring.
  CUTLASS_DEVICE static bool claims_tiles(Params const& params) {
    if constexpr (Hooks::kClaimsTiles) return params.hooks.tile_counter != nullptr;
    else return false;
  }
  CUTLASS_DEVICE static int claim_tile(Params const& params) {
    if constexpr (Hooks::kClaimsTiles) return atomicAdd(params.hooks.tile_counter, 1);
    else return 0;
  }

  // A second phase (WorkTile::phase 2) that meets no KV block: nothing to do (its first phase
  // ended the tile). The producer and the consumers skip it alike.
  CUTLASS_DEVICE static bool idle_phase(Params const& params, WorkTile const& work) {
    if constexpr (kPhases) {
      return work.phase == 2 &&
             !Mainloop::template walks_any<Hooks::kZigzag>(params.mainloop, work);
    } else {
      return false;
    }
  }

  // The running state of a first phase in workspace slot `slot` (Hooks::Params::phase_ws,
  // state_floats() floats per slot, value-major: value i of consumer thread j at i * kNumMmaThreads
  // + j, so each warp's store is one 128-byte line), then one release count per consumer thread
  // on the tile's flag (phase_flags[slot]).
  template <class AccO, class Softmax>
  CUTLASS_DEVICE static void save_state(Params const& params, int slot, int mma_thread_idx,
                                        AccO const& acc_o, Softmax const& softmax) {
    constexpr int kO = decltype(cute::size(acc_o))::value;
    constexpr int kRows = decltype(cute::size<0>(rowcol(acc_o.layout())))::value;
    float* ws = params.hooks.phase_ws + static_cast<int64_t>(slot) * state_floats(kO, kRows) +
                mma_thread_idx;
    CUTLASS_PRAGMA_UNROLL
    for (int i = 0; i < kO; ++i) __stcg(ws + i * kNumMmaThreads, acc_o(i));
    CUTLASS_PRAGMA_UNROLL
    for (int r = 0; r < kRows; ++r) {
      __stcg(ws + (kO + r) * kNumMmaThreads, softmax.row_max[r]);
      __stcg(ws + (kO + kRows + r) * kNumMmaThreads, softmax.row_sum[r]);
    }
    uint64_t* flag = params.hooks.phase_flags + slot;
    asm volatile("red.release.gpu.global.add.u64 [%0], 1;" ::"l"(flag) : "memory");
  }
  // The load lane, before a second phase's Q load: waits (bounded, comm::wait_geq) until every
  // consumer thread of the first phase saved. Its acquire, then its release-arrive on Q's full
  // barrier, which the consumers acquire before restore_state, order the state before their
  // loads (the consumers hold no wait and no failure call: no registers saved around one).
  CUTLASS_DEVICE static void wait_first_phase(Params const& params, int slot) {
    comm::WaitSite site;
    site.op = comm::kOpRingAttention;
    site.what = comm::kWaitTilePhase;
    site.peer = -1;  // this rank's own engine
    site.index = slot;
    comm::wait_geq(params.hooks.phase_flags + slot, kNumMmaThreads, params.hooks.timeout_ns,
                   params.hooks.diag, params.hooks.group, params.hooks.rank, site);
  }
  // A second phase's consumers, once Q's stage is full: the first phase's state.
  template <class AccO, class Softmax>
  CUTLASS_DEVICE static void restore_state(Params const& params, int slot, int mma_thread_idx,
                                           AccO& acc_o, Softmax& softmax) {
    constexpr int kO = decltype(cute::size(acc_o))::value;
    constexpr int kRows = decltype(cute::size<0>(rowcol(acc_o.layout())))::value;
    const float* ws = params.hooks.phase_ws + static_cast<int64_t>(slot) * state_floats(kO, kRows) +
                      mma_thread_idx;
    CUTLASS_PRAGMA_UNROLL
    for (int i = 0; i < kO; ++i) acc_o(i) = __ldcg(ws + i * kNumMmaThreads);
    CUTLASS_PRAGMA_UNROLL
    for (int r = 0; r < kRows; ++r) {
      softmax.row_max[r] = __ldcg(ws + (kO + r) * kNumMmaThreads);
      softmax.row_sum[r] = __ldcg(ws + (kO + kRows + r) * kNumMmaThreads);
    }
  }
  // Floats per workspace slot: per consumer thread its O accumulator and two floats per row it
  // holds (attention_api.h phase_ws_floats: kBlockM * (d + 8) for 64-row warpgroups).
  CUTLASS_HOST_DEVICE static constexpr int state_floats(int acc_values, int rows) {
    return kNumMmaThreads * (acc_values + 2 * rows);
  }

  enum class WarpGroupRole { Producer = 0, Consumer0 = 1, Consumer1 = 2 };
  // Forward (warp 1): only with a forwarding hook policy (ring attention, kv_forward_hooks.cuh).
  enum class ProducerWarpRole { Load = 0, Forward = 1, Idle2 = 2, Idle3 = 3 };

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
    using PipelineK = typename Mainloop::PipelineK;
    using PipelineV = typename Mainloop::PipelineV;
    const bool is_loader = role == WarpGroupRole::Producer && producer_role == ProducerWarpRole::Load;
    // The Params of pipeline type Pipe (Q's, K's and V's differ in their stage count).
    auto pipe_params = [&](auto pipe_tag, uint32_t bytes) {
      using Pipe = typename decltype(pipe_tag)::type;
      typename Pipe::Params pp;
      pp.transaction_bytes = bytes;
      pp.role = is_loader ? Pipe::ThreadCategory::Producer
                          : (role == WarpGroupRole::Producer ? Pipe::ThreadCategory::NonParticipant
                                                             : Pipe::ThreadCategory::Consumer);
      pp.is_leader = is_loader && lane_idx == 0;
      pp.num_consumers = kNumMmaThreads;
      return pp;
    };
    constexpr TypeTag<PipelineQ> kTagQ{};
    constexpr TypeTag<PipelineK> kTagK{};
    constexpr TypeTag<PipelineV> kTagV{};
    const typename PipelineQ::Params q_params = pipe_params(kTagQ, Traits::kTmaBytesQ);
    // With a cluster, a stage's empty barrier counts the releases of both CTAs' consumers
    // (each CTA's producer multicasts into both); Q is loaded by each CTA for itself, but its
    // pipeline takes the cluster shape too so that its releases follow the same protocol (the
    // CTAs run the same tile sequence, so Q's releases come in step).
    using ClusterShape = Shape<Int<Traits::kClusterM>, _1, _1>;
    PipelineQ::init_barriers(shared.pipelines.q, q_params, ClusterShape{});
    PipelineK::init_barriers(shared.pipelines.k, pipe_params(kTagK, Traits::kTmaBytesKV), ClusterShape{});
    PipelineV::init_barriers(shared.pipelines.v, pipe_params(kTagV, Traits::kTmaBytesKV), ClusterShape{});
    // Each role makes its pipeline handles after its register reconfiguration: a consumer's
    // release targets (which CTA of the cluster a thread signals) would otherwise be live
    // through the producer's 24-register section, and spill.
    struct Pipelines {
      PipelineQ q;
      PipelineK k;
      PipelineV v;
    };
    auto make_pipelines = [&] {
      return Pipelines{
          PipelineQ(shared.pipelines.q, q_params, ClusterShape{}, cute::false_type{}, cute::true_type{}),
          PipelineK(shared.pipelines.k, pipe_params(kTagK, Traits::kTmaBytesKV), ClusterShape{},
                    cute::false_type{}, cute::true_type{}),
          PipelineV(shared.pipelines.v, pipe_params(kTagV, Traits::kTmaBytesKV), ClusterShape{},
                    cute::false_type{}, cute::true_type{})};
    };
    Handoff* handoff = reinterpret_cast<Handoff*>(smem_buf + kHandoffOffset);
    const bool claimed = claims_tiles(params);
    if constexpr (Hooks::kClaimsTiles) {
      if (claimed && threadIdx.x == 0) handoff->init();
    }
    [[maybe_unused]] Mailbox* mailbox = reinterpret_cast<Mailbox*>(smem_buf + kHandoffOffset);
    if constexpr (Traits::kTileMailbox) {
      if (threadIdx.x == 0) mailbox->init();
    }
    // Barriers initialised before any thread (of the cluster: remote releases) uses them.
    if constexpr (Traits::kClusterM > 1) {
      cute::cluster_arrive_relaxed();
      cute::cluster_wait();
    } else {
      __syncthreads();
    }

    Mainloop mainloop;
    if (role == WarpGroupRole::Producer) {
      cutlass::arch::warpgroup_reg_dealloc<Traits::kLoadRegisters>();
      if constexpr (Hooks::kForwardsKV) {
        // Independent of the loads and the MMAs: this CTA's share of the K/V forwarding to the
        // next rank (the CTA stays resident until it is done).
        if (producer_role == ProducerWarpRole::Forward) {
          if (lane_idx == 0) {
            Hooks::forward(params.hooks, reinterpret_cast<uint8_t*>(smem_buf) + kForwardSmemOffset);
          }
          __syncwarp();
          return;
        }
      }
      if constexpr (Hooks::kClaimsTiles) {
        // Claimed tiles: warp 2 claims them and hands each index to the load lane and the
        // consumers (tile_handoff.cuh). Not the load lane itself: with the handoff's barrier
        // wait and store in its tile loop, ptxas formed every TMA's operands with R2UR inside
        // the issue loop (256 R2UR per K/V block instead of 5; the block loop 464 -> 628
        // instructions), the cause of every hooked ring variant's 20-29% slowdown from session 8
        // run 2 on (benchmarks/NOTES.md, session 9). The load lane only takes (compiles as the
        // static loop does).
        if (claimed && producer_role == ProducerWarpRole::Idle2) {
          if (lane_idx == 0) {
            for (uint32_t k = 0;; ++k) {
              // Every taker has handoff k - 1: the CTA is on its tile (with Hooks::late_claim
              // the load lane has also issued that tile's last load).
              handoff->wait_free(k);
              const int t = claim_tile(params);
              handoff->publish(k, t);  // the past-the-end index too: the takers stop
              if (!get_tile(params.scheduler, t).valid) break;
            }
          }
          __syncwarp();
          return;
        }
      }
      if constexpr (Traits::kTileMailbox) {
        // The static tile sequence, decoded here and handed to the consumers (tile_handoff.cuh
        // TileMailbox); the load lane decodes it for itself as before (it runs ahead).
        if (producer_role == ProducerWarpRole::Idle2) {
          if (lane_idx == 0) {
            int t = first_tile();
            for (uint32_t k = 0;; ++k, t += tile_stride()) {
              const WorkTile w = get_tile(params.scheduler, t);
              mailbox->publish(k, w);  // the past-the-end tile too: the takers stop
              if (!w.valid) break;
            }
          }
          __syncwarp();
          return;
        }
      }
      if (producer_role != ProducerWarpRole::Load) return;
      Pipelines pipes = make_pipelines();
      auto& pipeline_q = pipes.q;
      auto& pipeline_k = pipes.k;
      auto& pipeline_v = pipes.v;
      auto q_write = cutlass::make_producer_start_state<PipelineQ>();
      auto kv_write = Mainloop::producer_start_kv();
      if (lane_idx == 0) {
        SeenFlags* seen = reinterpret_cast<SeenFlags*>(smem_buf + kSeenOffset);
        if constexpr (Hooks::kWaitsForKV) seen->clear();
        int t = first_tile();
        for (uint32_t k = 0;; ++k, t += tile_stride()) {
          if constexpr (Hooks::kClaimsTiles) {
            if (claimed) {
              t = Hooks::late_claim(params.hooks) ? handoff->peek_lane(k) : handoff->take_lane(k);
            }
          }
          const WorkTile work = get_tile(params.scheduler, t);
          if (!work.valid) break;
          if (idle_phase(params, work)) {
            if constexpr (Hooks::kClaimsTiles) {
              if (claimed && Hooks::late_claim(params.hooks)) handoff->release_lane(k);
            }
            continue;
          }
          if constexpr (kPhases) {
            if (work.phase == 2) wait_first_phase(params, work.slot);
          }
          if constexpr (Traits::kPrefetchNextQ && !Hooks::kClaimsTiles) {
            // The static order's next tile (its Q goes to L2 after this tile's last K/V load).
            const WorkTile next = get_tile(params.scheduler, t + tile_stride());
            mainloop.template load<Hooks>(params.mainloop, params.hooks, pipeline_q, pipeline_k,
                                          pipeline_v, q_write, kv_write, shared.tensors.mainloop,
                                          work, seen, next);
          } else {
            mainloop.template load<Hooks>(params.mainloop, params.hooks, pipeline_q, pipeline_k,
                                          pipeline_v, q_write, kv_write, shared.tensors.mainloop,
                                          work, seen);
          }
          // Late claim: this tile's loads are issued, so the next tile may be claimed now.
          if constexpr (Hooks::kClaimsTiles) {
            if (claimed && Hooks::late_claim(params.hooks)) handoff->release_lane(k);
          }
        }
        // Keep the CTA alive until the consumers released every stage this warp filled.
        pipeline_k.producer_tail(Mainloop::k_state(kv_write));
        pipeline_v.producer_tail(Mainloop::v_state(kv_write));
        pipeline_q.producer_tail(q_write);
      }
      __syncwarp();
    } else {
      cutlass::arch::warpgroup_reg_alloc<Traits::kMmaRegisters>();
      Pipelines pipes = make_pipelines();
      auto& pipeline_q = pipes.q;
      auto& pipeline_k = pipes.k;
      auto& pipeline_v = pipes.v;
      const int mma_thread_idx = static_cast<int>(threadIdx.x) - cutlass::NumThreadsPerWarpGroup;
      typename Mainloop::StateQ q_read;
      typename Mainloop::StateKV kv_read;
      Epilogue epilogue;
      typename Traits::TiledMmaPV tiled_mma_pv;
      Mainloop::scheduler_barrier_init(mma_thread_idx / cutlass::NumThreadsPerWarpGroup);
      // Traits::kOInV: the V stage holding this warpgroup's last O tile until its TMA store has
      // read it (-1: none). Its store thread then arrives for the warpgroup's 128 threads on
      // the stage's empty barrier (the pipeline counts every consumer thread).
      int o_stage_held = -1;
      // Traits::kTimeline: the phase sums of CTAs 0-7 to timeline_buffer (first thread of each
      // consumer warpgroup), once at the end.
      auto store_timeline = [&]() {
        if constexpr (Traits::kTimeline) {
          const int wg = mma_thread_idx / cutlass::NumThreadsPerWarpGroup;
          if (blockIdx.x < kTimelineCtas && mma_thread_idx % cutlass::NumThreadsPerWarpGroup == 0) {
            uint32_t* row = timeline_buffer<Traits::kVariant>() + (blockIdx.x * 2 + wg) * kTimelineSlots;
            CUTLASS_PRAGMA_UNROLL
            for (int i = 0; i < kTimelineSlots; ++i) row[i] = mainloop.timeline.sum[i];
          }
        }
      };
      if constexpr (Traits::kTimeline) mainloop.timeline.last = static_cast<uint32_t>(clock());
      // The epilogue's points as timeline phases (no-ops without Traits::kTimeline).
      auto store_marks = [&](auto point) {
        if constexpr (decltype(point)::value == kStoreAfterLse) {
          mainloop.template mark<Mainloop::kPhaseLse>();
        } else {
          mainloop.template mark<Mainloop::kPhaseMeet>();
        }
      };
      auto release_prev_o = [&]() {
        if (o_stage_held >= 0 && mma_thread_idx % cutlass::NumThreadsPerWarpGroup == 0) {
          cute::tma_store_wait<0>();
          arrive_v_empty(shared.pipelines.v, o_stage_held);
        }
        o_stage_held = -1;
      };
      if constexpr (Traits::kCrossTile) {
        // The cross-tile overlap (variant bit 21): the mainloop walks the CTA's whole static tile
        // sequence and hands each finished tile here (O held in V stage o_stage; -1: none).
        static_assert(!Hooks::kClaimsTiles && !Hooks::kWaitsForKV && !Hooks::kForwardsKV && !kPhases,
                      "bit 21 (cross-tile overlap): plain kernels only");
        auto on_tile_end = [&](WorkTile const& work, auto& acc_o, auto& softmax, int o_stage) {
          constexpr int kRows = decltype(size<0>(rowcol(acc_o.layout())))::value;
          Tensor acc_o_rc = rowcol_view(acc_o);
          float lse[kRows];
          softmax.finalize(acc_o_rc, lse, params.mainloop.softmax_scale);
          mainloop.template mark<Mainloop::kPhaseFinalize>();
          typename Traits::Element* smem_o =
              o_stage >= 0 ? Mainloop::v_stage_data(shared.tensors.mainloop, o_stage) : nullptr;
          o_stage_held = o_stage;
          epilogue.store(params.epilogue, smem_o, work, mma_thread_idx, acc_o, lse, store_marks);
        };
        mainloop.mma_stream(params.mainloop, pipeline_q, pipeline_k, pipeline_v, shared.tensors.mainloop,
                            mma_thread_idx, first_tile(), tile_stride(),
                            [&](int t) { return get_tile(params.scheduler, t); }, on_tile_end,
                            release_prev_o);
        release_prev_o();  // the producer's tail waits for it
        store_timeline();
        Epilogue::store_tail(mma_thread_idx);
        return;
      }
      int t = first_tile();
      // Traits::kEarlyNextTile: the next static tile, worked out before this one's epilogue.
      static_assert(!Traits::kEarlyNextTile || (!Hooks::kClaimsTiles && !kPhases),
                    "bit 24 (the next tile early): static tiles, one phase");
      [[maybe_unused]] WorkTile next_work{};
      if constexpr (Traits::kEarlyNextTile) next_work = get_tile(params.scheduler, t);
      for (uint32_t k = 0;; ++k, t += tile_stride()) {
        if constexpr (Hooks::kClaimsTiles) {
          if (claimed) t = handoff->take(k, lane_idx);
        }
        const WorkTile work = [&] {
          if constexpr (Traits::kTileMailbox) return mailbox->take(k, lane_idx);
          else if constexpr (Traits::kEarlyNextTile) return next_work;
          else return get_tile(params.scheduler, t);
        }();
        if (!work.valid) break;
        if (idle_phase(params, work)) continue;
        Tensor acc_o = partition_fragment_C(tiled_mma_pv, select<0, 2>(typename Traits::TileShapeMNK{}));
        constexpr int kRows = decltype(size<0>(rowcol(acc_o.layout())))::value;
        OnlineSoftmax<kRows, Traits::kTreeReduce, Traits::kExpEmuPer8, Traits::kLazyRescale> softmax(
            params.mainloop.scale_log2);
        // A second phase resumes its first's state (once Q's stage is full: see wait_first_phase).
        auto resume = [&](auto& o, auto& sm) {
          if constexpr (kPhases) {
            if (work.phase == 2) restore_state(params, work.slot, mma_thread_idx, o, sm);
          }
        };
        int o_stage = -1;
        mainloop.template mma<Hooks::kZigzag>(params.mainloop, pipeline_q, pipeline_k, pipeline_v,
                                              q_read, kv_read, shared.tensors.mainloop, work,
                                              mma_thread_idx, acc_o, softmax, o_stage,
                                              release_prev_o, resume);
        if constexpr (Traits::kEarlyNextTile) next_work = get_tile(params.scheduler, t + tile_stride());
        if constexpr (kPhases) {
          // A first phase whose second walks blocks: the state goes to the workspace, no O.
          // (The item is rebuilt from t: fewer registers live across the main loop.)
          const WorkTile item = get_tile(params.scheduler, t);
          if (item.phase == 1 && Mainloop::template walks_any<Hooks::kZigzag>(
                                     params.mainloop, Mainloop::second_phase(item))) {
            save_state(params, item.slot, mma_thread_idx, acc_o, softmax);
            if constexpr (Traits::kOInV) o_stage_held = o_stage;  // freed as after a store
            continue;
          }
        }
        Tensor acc_o_rc = rowcol_view(acc_o);
        float lse[kRows];
        softmax.finalize(acc_o_rc, lse, params.mainloop.softmax_scale);
        mainloop.template mark<Mainloop::kPhaseFinalize>();
        typename Traits::Element* smem_o = Epilogue::o_data(shared.tensors.epilogue);
        if constexpr (Traits::kOInV) {
          smem_o = o_stage >= 0 ? Mainloop::v_stage_data(shared.tensors.mainloop, o_stage) : nullptr;
          o_stage_held = o_stage;
        }
        epilogue.store(params.epilogue, smem_o, work, mma_thread_idx, acc_o, lse, store_marks);
        mainloop.template mark<Mainloop::kPhaseEpilogue>();
      }
      store_timeline();
      if constexpr (Traits::kOInV) release_prev_o();  // the producer's tail waits for it
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
