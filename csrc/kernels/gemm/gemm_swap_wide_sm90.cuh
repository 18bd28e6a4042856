// The swapped-operand GEMM (gemm_swap_api.h) with every token in one tile: a 128-row block of
// the weights against all of A's rows (up to kBoxes x kBox tokens; 333 in 3 x 112 = 336), the
// weights' k-blocks spread over every SM by BalancedK (gemm_swap_ticket_sm90.cuh) and split
// tiles summed through tickets in slice order (TicketReduce: no CTA waits for another, the same
// bits whichever slice comes last). Included only by the gemm_swap_*_wide.cu files.
//
// Why (session 13, issue 12 item 3, M = 333): the 128x176 data-parallel tile (swap:1, the pick
// at 8192 weight rows) pads 333 tokens to 352 (4.8% more FMAs than 336) and leaves 4 of 132 SMs
// idle (128 tiles); s12's model puts cuBLAS at that per-FMA rate over 336 tokens on 132 SMs.
// Here each CTA's tile holds all 336 tokens, so each weight k-block is read from L2/HBM by one
// CTA only (no group to keep side by side), and 64 (8192 rows) or 28 (3584) weight blocks x 128
// k-blocks spread evenly over the 132 SMs: 62.1 / 27.2 k-blocks of 128x336 per CTA, 7.4% fewer
// FMAs per SM than swap:1's 128 k-blocks of 128x176 at 8192.
//
// Why not CUTLASS's collective for this tile: wgmma's N is at most 256 and a TMA box at most
// 256 rows, so the 336 tokens are three boxes of 112 (the 128x112 tile's proven smem layout:
// each box its own ring, box j's ring after box j-1's) and three m64n112k16 wgmmas per k-step
// per consumer warpgroup, one accumulator set of 3 x 56 floats per thread. The mainloop below
// is CUTLASS's (sm90_mma_tma_gmma_ss_warpspecialized.hpp: same pipeline, same waits), with the
// producer issuing 1 + kBoxes TMA loads per stage. The epilogue stores from the registers
// (bounds-checked; the tile is 336 wide, no TMA-store box fits it).
//
//   Warpgroups 0 and 1: 64 weight rows each x all tokens; ticketed reduction when the tile is
//   split; bf16/fp16 stores of D = (weights . tokens^T)^T. Thread 0 also issues the TMA loads
//   (weights 128x64, tokens kBoxes x (kBox x 64)), kStages k-blocks ahead: it refills each stage
//   once both warpgroups have released it.
// 256 threads, no producer warp: ptxas sizes registers for whole warpgroups (a 288-thread
// kernel got 168 per thread, as 384 threads do: compiled here), and the 168 accumulators need
// more (the first build, with a producer warpgroup, spilled 2.7 KB).
#pragma once

#include <cstdint>

#include "gemm_swap_ticket_sm90.cuh"  // BalancedK, TicketReduce, ElementOf, the ticket area

namespace mkernel::gemm_swap {

// TicketReduce (gemm_swap_ticket_sm90.cuh) for a 168-float fragment: the same protocol (every
// slice stores its fp32 partial, takes a ticket; the last sums slices 0, 1, ... in order, its
// own from the registers) and the same sum, p0 + p1 + ... + p(last), computed with fewer live
// registers: the slices before this CTA's own are summed chunk by chunk into a temporary that
// is then added to the registers (t + acc == acc + t, so the bits are the in-order sum's),
// and the slices after it are added into the registers one slice at a time. The slice loops
// stay rolled: TicketReduce's loop, unrolled by the compiler around 168 accumulators, spilled
// 1.6 KB here.
template <int kThreads, int kFrag, int kChunk, int kAddChunk>
struct WideReduce {
  static_assert(kFrag % (4 * kChunk) == 0 && kFrag % (4 * kAddChunk) == 0, "whole chunks of float4");
  static constexpr int kVecs = kFrag / 4;
  static constexpr size_t partial_floats() { return static_cast<size_t>(kThreads) * kFrag; }
  static size_t workspace_bytes(int tiles, int slots) {
    return gemm::kSplitKCounterBytes + static_cast<size_t>(tiles) * slots * partial_floats() * 4;
  }

  // acc += one slice's partial, kAddChunk float4 loads in flight per thread (no temporary: more
  // in flight than the chunked in-order sum below; the partial comes from L2 at the rate the
  // loads in flight allow, ~one L2 round trip per chunk).
  template <class Accum>
  CUTLASS_DEVICE static void add_slice(Accum& acc, float4 const* part) {
    CUTLASS_PRAGMA_UNROLL
    for (int v0 = 0; v0 < kVecs; v0 += kAddChunk) {
      float4 q[kAddChunk];
      CUTLASS_PRAGMA_UNROLL
      for (int j = 0; j < kAddChunk; ++j) q[j] = __ldcg(part + (v0 + j) * kThreads);
      CUTLASS_PRAGMA_UNROLL
      for (int j = 0; j < kAddChunk; ++j) {
        const int v = v0 + j;
        acc(4 * v) += q[j].x;
        acc(4 * v + 1) += q[j].y;
        acc(4 * v + 2) += q[j].z;
        acc(4 * v + 3) += q[j].w;
      }
    }
  }

  template <class Accum>
  CUTLASS_DEVICE static bool reduce(int* counters, float* partials_base, int tile, int slice,
                                    int slices, int slots, Accum& acc, int thread,
                                    int* smem_last) {
    static_assert(decltype(cute::size(acc))::value == kFrag, "fragment size mismatch");
    constexpr int stride = static_cast<int>(partial_floats() / 4);  // float4s per partial
    float4* partials = reinterpret_cast<float4*>(partials_base) +
                       static_cast<size_t>(tile) * slots * stride + thread;
    float4* mine = partials + slice * stride;
    // First look: if every other slice has already arrived, this one is the last and its partial
    // need not be stored (172 KB less on the kernel's tail: in BalancedK's order a tile's slices
    // but its last run at the end of their CTAs' ranges, so the one finishing it is usually one
    // of those). Nobody else takes a ticket then, so no one waits for the partial not stored.
    if (thread == 0) {
      const bool last = *reinterpret_cast<volatile int*>(counters + tile) == slices - 1;
      if (last) {
        counters[tile] = 0;  // every other slice has arrived: zero again for the next launch
        __threadfence();     // acquire: their partials are visible
      }
      *smem_last = last;
    }
    cutlass::arch::NamedBarrier::sync(kThreads,
                                      cutlass::arch::ReservedNamedBarriers::StreamkBarrier0);
    if (*smem_last == 0) {
      gemm::store_partial<kThreads, kVecs>(mine, acc);
      // take_ticket's first barrier also keeps thread 0's write of smem_last after every
      // thread's read of it above.
      if (!gemm::take_ticket<kThreads>(counters, tile, slices, thread, smem_last)) return false;
    }
    if (slice > 0) {  // acc = (p0 + ... + p(slice - 1)) + acc, chunk by chunk
      CUTLASS_PRAGMA_UNROLL
      for (int v0 = 0; v0 < kVecs; v0 += kChunk) {
        float4 t[kChunk];
        CUTLASS_PRAGMA_UNROLL
        for (int j = 0; j < kChunk; ++j) t[j] = __ldcg(partials + (v0 + j) * kThreads);
#pragma unroll 1
        for (int s = 1; s < slice; ++s) {
          float4 q[kChunk];
          CUTLASS_PRAGMA_UNROLL
          for (int j = 0; j < kChunk; ++j) q[j] = __ldcg(partials + s * stride + (v0 + j) * kThreads);
          gemm::add_chunk(t, q);
        }
        CUTLASS_PRAGMA_UNROLL
        for (int j = 0; j < kChunk; ++j) {
          const int v = v0 + j;
          acc(4 * v) = t[j].x + acc(4 * v);
          acc(4 * v + 1) = t[j].y + acc(4 * v + 1);
          acc(4 * v + 2) = t[j].z + acc(4 * v + 2);
          acc(4 * v + 3) = t[j].w + acc(4 * v + 3);
        }
      }
    }
#pragma unroll 1
    for (int s = slice + 1; s < slices; ++s) add_slice(acc, partials + s * stride);
    return true;
  }
};

template <gemm::DType DT, int kBox_, int kBoxes_, int kStages_>
struct WideTileKernel {
  using Element = typename ElementOf<DT>::type;
  static constexpr int kBlockM = 128;  // weight rows per tile: 2 consumer warpgroups x 64
  static constexpr int kBox = kBox_;   // tokens per TMA box and per wgmma (its N)
  static constexpr int kBoxes = kBoxes_;
  static constexpr int kBlockN = kBox * kBoxes;  // tokens per tile
  static constexpr int kBlockK = 64;
  static constexpr int kStages = kStages_;
  static constexpr int kMmaThreads = 2 * cutlass::NumThreadsPerWarpGroup;
  static constexpr int kThreads = kMmaThreads;
  static_assert(kBox % 8 == 0 && kBox <= 256, "a wgmma N and a TMA box: a multiple of 8, <= 256");

  using AtomW = cute::GMMA::Layout_K_SW128_Atom<Element>;
  using AtomX = cute::GMMA::Layout_K_SW128_Atom<Element>;
  // Weights: (128, 64, stages). Tokens: one ring (kBox, 64, stages) per box, box j's at
  // j * cosize(ring); the MMA's view of all boxes is ((kBox, kBoxes), 64, stages).
  using SmemLayoutW = decltype(cute::tile_to_shape(
      AtomW{}, cute::make_shape(cute::Int<kBlockM>{}, cute::Int<kBlockK>{}, cute::Int<kStages>{})));
  using SmemLayoutX = decltype(cute::tile_to_shape(
      AtomX{}, cute::make_shape(cute::Int<kBox>{}, cute::Int<kBlockK>{}, cute::Int<kStages>{})));
  static constexpr int kRing = cute::cosize_v<SmemLayoutX>;  // elements of one box's ring
  static_assert(kRing == kBox * kBlockK * kStages, "a box's ring is dense");

  static constexpr auto x_all_layout() {
    using namespace cute;
    auto ring = SmemLayoutX{}.layout_b();  // the ring's unswizzled layout (row, k, stage)
    auto all = make_layout(make_layout(layout<0>(ring), Layout<Int<kBoxes>, Int<kRing>>{}),
                           layout<1>(ring), layout<2>(ring));
    return make_composed_layout(SmemLayoutX{}.layout_a(), SmemLayoutX{}.offset(), all);
  }
  using SmemLayoutXAll = decltype(x_all_layout());

  // Each consumer warpgroup 64 weight rows (the atom), the atom's N one box: MMA_N = kBoxes.
  using TiledMma = decltype(cute::make_tiled_mma(
      cute::GMMA::ss_op_selector<Element, Element, float,
                                 cute::Shape<cute::Int<kBlockM>, cute::Int<kBox>, cute::Int<kBlockK>>,
                                 cute::GMMA::Major::K, cute::GMMA::Major::K>(),
      cute::Layout<cute::Shape<cute::_2, cute::_1, cute::_1>>{}));
  static_assert(cute::size(TiledMma{}) == kMmaThreads, "two consumer warpgroups");

  using MainloopPipeline = cutlass::PipelineTmaAsync<kStages>;
  using PipelineState = cutlass::PipelineState<kStages>;
  static constexpr uint32_t kTransactionBytes =
      static_cast<uint32_t>((kBlockM + kBlockN) * kBlockK * sizeof(Element));

  struct SharedStorage {
    struct alignas(1024) Tensors {
      cute::array_aligned<Element, cute::cosize_v<SmemLayoutW>, 1024> w;
      cute::array_aligned<Element, kRing * kBoxes, 1024> x;
    } tensors;
    typename MainloopPipeline::SharedStorage pipeline;
    int last;  // TicketReduce's verdict, shared by the consumer threads
  };
  static constexpr int kSmemBytes = sizeof(SharedStorage);
  static_assert(kSmemBytes <= 227 * 1024, "shared storage exceeds the sm90 opt-in limit");

  static constexpr int kFrag = kBlockM * kBlockN / kMmaThreads;  // accumulators per thread
  // The slice sum: 6 float4 loads in flight per thread for the slices before its own (two
  // chunks live), 14 when adding a later slice in place (ptxas: 254 registers, 0 spills with the
  // 168 accumulators; the SASS keeps 12-15 loads in flight there).
  using Reduce = WideReduce<kMmaThreads, kFrag, 6, 14>;

  // TMA descriptors: weights [N, K] and tokens [M, K], K contiguous (rank 2).
  using GmemStride = cute::Stride<int64_t, cute::_1>;
  static auto gmem_tensor(Element const* ptr, int rows, int k) {
    return cute::make_tensor(cute::make_gmem_ptr(ptr),
                             cute::make_layout(cute::make_shape(rows, k),
                                               GmemStride{static_cast<int64_t>(k), cute::_1{}}));
  }
  static auto make_tma_w(Element const* ptr, int rows, int k) {
    return cute::make_tma_copy(cute::SM90_TMA_LOAD{}, gmem_tensor(ptr, rows, k),
                               SmemLayoutW{}(cute::_, cute::_, cute::Int<0>{}),
                               cute::Shape<cute::Int<kBlockM>, cute::Int<kBlockK>>{}, cute::_1{});
  }
  static auto make_tma_x(Element const* ptr, int rows, int k) {
    return cute::make_tma_copy(cute::SM90_TMA_LOAD{}, gmem_tensor(ptr, rows, k),
                               SmemLayoutX{}(cute::_, cute::_, cute::Int<0>{}),
                               cute::Shape<cute::Int<kBox>, cute::Int<kBlockK>>{}, cute::_1{});
  }
  using TmaW = decltype(make_tma_w(nullptr, 1, 8));
  using TmaX = decltype(make_tma_x(nullptr, 1, 8));

  struct Params {
    TmaW tma_w;
    TmaX tma_x;
    int n = 0, m = 0, k = 0;  // weights rows, tokens, K
    Element* d = nullptr;     // D [m, n] row-major
    BalancedK::Params schedule;
    int* counters = nullptr;    // [tiles] tickets, zero before and after every launch
    float* partials = nullptr;  // [tiles][schedule.max_slices] fp32 partial tiles
  };

  // Thread 0's loads: iteration x of the CTA's range (weight block x / k_tiles, k-block
  // x % k_tiles) into the next stage, once both warpgroups have released it.
  struct Loader {
    Params const& params;
    SharedStorage& shared;
    MainloopPipeline& pipeline;
    PipelineState write_state = cutlass::make_producer_start_state<MainloopPipeline>();
    int next;  // the next iteration to load (can_implement: total iterations < 2^31)
    int end;
    int n_block;

    CUTLASS_DEVICE void issue() {
      using namespace cute;
      const int k_tiles = params.schedule.k_tiles;
      const int m_block = next / k_tiles;
      const int kb = next - m_block * k_tiles;
      ++next;
      pipeline.producer_acquire(write_state);
      auto* bar = pipeline.producer_get_barrier(write_state);
      const int stage = write_state.index();
      ++write_state;
      Tensor mW = params.tma_w.get_tma_tensor(make_shape(params.n, params.k));  // (n, k)
      Tensor mX = params.tma_x.get_tma_tensor(make_shape(params.m, params.k));  // (m, k)
      auto tma_w = params.tma_w.get_slice(0);
      auto tma_x = params.tma_x.get_slice(0);
      Tensor gW = local_tile(mW, Shape<Int<kBlockM>, Int<kBlockK>>{}, make_coord(m_block, kb));
      Tensor sW = make_tensor(make_smem_ptr(shared.tensors.w.data()), SmemLayoutW{});
      // The weights stream once (evict first); the tokens are re-read by every CTA.
      copy(params.tma_w.with(*bar, 0, TMA::CacheHintSm90::EVICT_FIRST), tma_w.partition_S(gW),
           tma_w.partition_D(sW)(_, _, _, stage));
      CUTLASS_PRAGMA_UNROLL
      for (int j = 0; j < kBoxes; ++j) {
        Tensor gX = local_tile(mX, Shape<Int<kBox>, Int<kBlockK>>{},
                               make_coord(n_block * kBoxes + j, kb));  // (kBox, 64)
        Tensor sX = make_tensor(make_smem_ptr(shared.tensors.x.data() + j * kRing), SmemLayoutX{});
        copy(params.tma_x.with(*bar, 0, TMA::CacheHintSm90::EVICT_LAST), tma_x.partition_S(gX),
             tma_x.partition_D(sX)(_, _, _, stage));
      }
    }
    // After a stage is released: refill it (thread 0), kStages iterations ahead of the MMAs.
    CUTLASS_DEVICE void refill(int thread_idx) {
      if (thread_idx == 0 && next < end) issue();
    }
  };

  CUTLASS_DEVICE void operator()(Params const& params, char* smem_buf) {
    using namespace cute;
    SharedStorage& shared = *reinterpret_cast<SharedStorage*>(smem_buf);
    const int thread_idx = static_cast<int>(threadIdx.x);

    if (thread_idx == 0) {
      cute::prefetch_tma_descriptor(params.tma_w.get_tma_descriptor());
      cute::prefetch_tma_descriptor(params.tma_x.get_tma_descriptor());
    }

    // Every thread consumes; thread 0 also produces (its loads' expect-tx: is_leader).
    typename MainloopPipeline::Params pipe;
    pipe.role = thread_idx == 0 ? MainloopPipeline::ThreadCategory::ProducerConsumer
                                : MainloopPipeline::ThreadCategory::Consumer;
    pipe.is_leader = thread_idx == 0;
    pipe.num_consumers = kThreads;
    pipe.transaction_bytes = kTransactionBytes;
    MainloopPipeline pipeline(shared.pipeline, pipe, Shape<_1, _1, _1>{});
    __syncthreads();  // the barriers are initialised

    const BalancedK::Params& sp = params.schedule;
    const int group = static_cast<int>(blockIdx.x) / sp.tiles_n;
    const int n_block = static_cast<int>(blockIdx.x) - group * sp.tiles_n;
    const long long first = BalancedK::begin(sp, group), end = BalancedK::begin(sp, group + 1);

    Loader loader{params, shared, pipeline};
    loader.next = static_cast<int>(first);
    loader.end = static_cast<int>(end);
    loader.n_block = n_block;
    if (thread_idx == 0) {
      for (int s = 0; s < kStages && loader.next < end; ++s) loader.issue();
    }

    TiledMma tiled_mma;
    const int warp_group_idx = __shfl_sync(0xffffffff, thread_idx / 128, 0);
    auto wg_mma = tiled_mma.get_slice(warp_group_idx * cutlass::NumThreadsPerWarpGroup);
    Tensor sW = make_tensor(make_smem_ptr(shared.tensors.w.data()), SmemLayoutW{});
    Tensor sX = make_tensor(make_smem_ptr(shared.tensors.x.data()), SmemLayoutXAll{});
    Tensor tCrA = wg_mma.make_fragment_A(wg_mma.partition_A(sW));  // (MMA, MMA_M, MMA_K, PIPE)
    Tensor tCrB = wg_mma.make_fragment_B(wg_mma.partition_B(sX));  // (MMA, MMA_N, MMA_K, PIPE)
    // Tile coordinates of this thread's accumulators, for the stores.
    auto thr_mma = tiled_mma.get_slice(thread_idx);
    Tensor tCcD =
        thr_mma.partition_C(make_identity_tensor(make_shape(Int<kBlockM>{}, Int<kBlockN>{})));
    PipelineState read_state;
    for (long long x = first; x < end;) {
      const BalancedK::Piece w = BalancedK::piece(sp, x, end, n_block);
      x += w.k_count;
      Tensor accum = partition_fragment_C(tiled_mma, Shape<Int<kBlockM>, Int<kBlockN>>{});
      static_assert(decltype(size(accum))::value == kFrag, "accumulators per thread");
      CUTE_STATIC_ASSERT_V(size<1>(tCrA) == size<1>(accum));
      CUTE_STATIC_ASSERT_V(size<1>(tCrB) == size<2>(accum));
      mma(pipeline, read_state, tiled_mma, tCrA, tCrB, accum, w.k_count, loader, thread_idx);
      if (w.slices > 1 &&
          !Reduce::reduce(params.counters, params.partials, w.tile, w.slice, w.slices,
                          sp.max_slices, accum, thread_idx, &shared.last)) {
        continue;  // another slice of this tile finishes it
      }
      // D [m, n] row-major: token t, weight row r at t * n + r. Lanes 4 apart hold adjacent
      // weight rows of the same token: 8 lanes store 16 contiguous bytes.
      // Stored straight from the registers. An SM90 wgmma accumulator (CuTe's CLayout_64xN)
      // gives a thread rows r0 and r0 + 8 and tokens c0 + 8g and c0 + 8g + 1 of each 8-token group
      // g, as values 4g + 2 * (row + 8) + (token + 1); box j's groups follow box j - 1's (112 =
      // 14 x 8), so one pointer steps 8 tokens per group. (Addressing each of the 168 values from
      // its own coordinates hoisted the addresses and spilled 1.6 KB.)
      static_assert(kBox % 8 == 0 && kFrag == 4 * (kBlockN / 8), "4 values per 8-token group");
      CUTE_STATIC_ASSERT_V(size<0>(accum) == Int<kBox / 2>{});  // (2, 2, kBox / 8) per box
      const int r0 = get<0>(tCcD(0)), c0 = get<1>(tCcD(0));  // this thread's first row, token
      const int rows = params.n - w.m_block * kBlockM - r0;   // rows from r0 on in this tile
      const int toks = params.m - w.n_block * kBlockN - c0;   // tokens from c0 on
      const int64_t n = params.n;
      Element* p = params.d + (static_cast<int64_t>(w.n_block) * kBlockN + c0) * n +
                   static_cast<int64_t>(w.m_block) * kBlockM + r0;
      CUTLASS_PRAGMA_UNROLL
      for (int g = 0; g < kBlockN / 8; ++g, p += 8 * n) {
        CUTLASS_PRAGMA_UNROLL
        for (int v = 0; v < 4; ++v) {
          const int dt = v & 1, dr = 8 * (v >> 1);
          if (8 * g + dt < toks && dr < rows) p[dt * n + dr] = static_cast<Element>(accum(4 * g + v));
        }
      }
    }
  }

  // CUTLASS's consumer mainloop (sm90_mma_tma_gmma_ss_warpspecialized.hpp mma + mma_tail): one
  // wgmma batch in flight, each stage released once the batch after it is issued -- and then
  // refilled by thread 0.
  template <class FragA, class FragB, class Accum>
  CUTLASS_DEVICE static void mma(MainloopPipeline& pipeline, PipelineState& read_state,
                                 TiledMma& tiled_mma, FragA const& tCrA, FragB const& tCrB,
                                 Accum& accum, int k_count, Loader& loader, int thread_idx) {
    using namespace cute;
    PipelineState release_state = read_state;
    tiled_mma.accumulate_ = GMMA::ScaleOut::Zero;
    warpgroup_fence_operand(accum);
    {
      pipeline.consumer_wait(read_state, pipeline.consumer_try_wait(read_state));
      const int stage = read_state.index();
      warpgroup_arrive();
      CUTLASS_PRAGMA_UNROLL
      for (int kb = 0; kb < size<2>(tCrA); ++kb) {
        cute::gemm(tiled_mma, tCrA(_, _, kb, stage), tCrB(_, _, kb, stage), accum);
        tiled_mma.accumulate_ = GMMA::ScaleOut::One;
      }
      warpgroup_commit_batch();
      ++read_state;
    }
    warpgroup_fence_operand(accum);
    CUTLASS_PRAGMA_NO_UNROLL
    for (int left = k_count - 1; left > 0; --left) {
      pipeline.consumer_wait(read_state, pipeline.consumer_try_wait(read_state));
      const int stage = read_state.index();
      warpgroup_fence_operand(accum);
      warpgroup_arrive();
      cute::gemm(tiled_mma, tCrA(_, _, _, stage), tCrB(_, _, _, stage), accum);
      warpgroup_commit_batch();
      warpgroup_wait<1>();
      warpgroup_fence_operand(accum);
      pipeline.consumer_release(release_state);  // done with the stage before this one
      ++read_state;
      ++release_state;
      loader.refill(thread_idx);
    }
    warpgroup_wait<0>();
    warpgroup_fence_operand(accum);
    pipeline.consumer_release(release_state);  // the last stage
    ++release_state;
    loader.refill(thread_idx);
  }
};

template <class Kernel>
__global__ void __launch_bounds__(Kernel::kThreads, 1)
    swap_wide_kernel(CUTLASS_GRID_CONSTANT typename Kernel::Params const params) {
  extern __shared__ char smem[];
  Kernel{}(params, smem);
}

template <gemm::DType DT, int kBox, int kBoxes, int kStages>
struct SwapWideGemm {
  using Kernel = WideTileKernel<DT, kBox, kBoxes, kStages>;
  using Element = typename Kernel::Element;

  static BalancedK::Params schedule(const gemm::Problem& p, int sm_count) {
    return BalancedK::make((p.n + Kernel::kBlockM - 1) / Kernel::kBlockM,
                           (p.m + Kernel::kBlockN - 1) / Kernel::kBlockN,
                           (p.k + Kernel::kBlockK - 1) / Kernel::kBlockK, sm_count);
  }
  static int tiles(const gemm::Problem& p) {
    return ((p.n + Kernel::kBlockM - 1) / Kernel::kBlockM) *
           ((p.m + Kernel::kBlockN - 1) / Kernel::kBlockN);
  }

  static const char* can_implement(const gemm::Problem& p, int sm_count, Decomposition dec) {
    if (dec.mode != Decomposition::kHeuristic && dec.mode != Decomposition::kStreamK) {
      return "the wide-tile kernel always balances K over the SMs";
    }
    if (sm_count < 1) return "no SMs";
    if (tiles(p) > gemm::kSplitKMaxTiles) return "more than 16384 output tiles";
    // TMA: 16-byte aligned bases and row strides (the dispatcher checks n and k % 8).
    if ((reinterpret_cast<uintptr_t>(p.a) | reinterpret_cast<uintptr_t>(p.b)) % 16 != 0) {
      return "A and B must be 16-byte aligned";
    }
    if (p.k % 8 != 0) return "k must be a multiple of 8";
    if (schedule(p, sm_count).total >= (1ll << 31)) return "2^31 or more (tile, k-block) iterations";
    return nullptr;
  }

  static size_t workspace_size(const gemm::Problem& p, int sm_count, Decomposition) {
    const BalancedK::Params s = schedule(p, sm_count);
    return Kernel::Reduce::workspace_bytes(tiles(p), s.max_slices);
  }

  // `workspace`: workspace_size bytes whose first kSplitKCounterBytes are zero (the engine's
  // scratch convention, engine_workspace: the kernel leaves its tickets at zero).
  static cudaError_t run(const gemm::Problem& p, int sm_count, Decomposition, void* workspace,
                         cudaStream_t stream, const char** reason) {
    if (workspace == nullptr) {
      if (reason) *reason = "the wide-tile swapped GEMM needs a zero-initialised workspace";
      return cudaErrorInvalidValue;
    }
    cudaError_t err = opt_in_smem_once<swap_wide_kernel<Kernel>>(Kernel::kSmemBytes);
    if (err != cudaSuccess) return err;

    typename Kernel::Params params;
    params.tma_w = Kernel::make_tma_w(static_cast<const Element*>(p.b), p.n, p.k);
    params.tma_x = Kernel::make_tma_x(static_cast<const Element*>(p.a), p.m, p.k);
    params.n = p.n;
    params.m = p.m;
    params.k = p.k;
    params.d = static_cast<Element*>(p.d);
    params.schedule = schedule(p, sm_count);
    char* base = static_cast<char*>(workspace);
    params.counters = reinterpret_cast<int*>(base);
    params.partials = reinterpret_cast<float*>(base + gemm::kSplitKCounterBytes);
    swap_wide_kernel<Kernel><<<BalancedK::ctas(params.schedule), Kernel::kThreads,
                               Kernel::kSmemBytes, stream>>>(params);
    err = cudaGetLastError();
    if (err != cudaSuccess && reason) *reason = "launch of the wide-tile swapped GEMM failed";
    return err;
  }
};

}  // namespace mkernel::gemm_swap

// One wide-tile variant (both dtypes) per .cu: the entry points gemm_swap_dispatch.cu declares.
#define MKERNEL_GEMM_SWAP_WIDE_INSTANTIATE(BOX, BOXES, STAGES, SUFFIX) \
  namespace mkernel::gemm_swap::detail {                               \
  template <gemm::DType DT>                                            \
  using SUFFIX##_t = SwapWideGemm<DT, BOX, BOXES, STAGES>;             \
  MKERNEL_GEMM_SWAP_ENTRY_POINTS(SUFFIX)                               \
  }
