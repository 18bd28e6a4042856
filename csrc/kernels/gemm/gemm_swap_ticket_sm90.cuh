// The swapped-operand GEMM (gemm_swap_api.h) on every SM with ticketed partial sums: a
// persistent cooperative kernel whose CTAs come in groups, one CTA per token tile; each group
// takes an equal, contiguous range of the weight blocks' k-blocks ("stream-K" over the weights,
// BalancedK below), with CUTLASS's sm90 collectives for the TMA + wgmma mainloop and the
// TMA-store epilogue (the same tile types as SwapGemm). Included only by the
// gemm_swap_*_tk.cu files.
//
// Why: at 333 tokens the 128x176 tiles of 3584 weight rows are 56, of 8192 rows 128, for 132
// SMs; data-parallel leaves 76 (4) SMs idle, and CUTLASS's stream-K (swap_128x176_sk and the
// heuristic at 3584) ran 13% slower than data-parallel at 8192 rows and 46.6 us against
// cuBLAS's 31.7 at 3584 (s10 run 2, s11 run 1): its deterministic fixup makes each tile's
// finishing CTA wait for its predecessors' partials in turn. Here no CTA waits for another
// (the engine's split-K scheme, split_k_reduce.cuh): every slice of a tile stores its fp32
// partial and takes a ticket; the slice that takes the last ticket sums all slices in slice
// order (its own from its registers: the same bits whichever slice is last) and runs the
// epilogue. A CTA's range starts with the tail of one tile (short, done first, so its partial
// is written early) and ends with the head of another, whose slice is then usually the last
// to arrive.
//
//   Producer warpgroup, warp 0: TMA loads of each piece's k-blocks into the smem ring.
//   Consumer warpgroups 0 and 1 (cooperative: each 64 weight rows of the 128-row tile):
//       wgmma over the ring, ticketed reduction when the tile is split, TMA-store epilogue.
#pragma once

#include "gemm_swap_sm90.cuh"  // SwapConfig, SwapGemm (the collectives), ElementOf
#include "split_k_reduce.cuh"  // kSplitKCounterBytes, kSplitKMaxTiles: the engine's ticket area

#include "cutlass/arch/barrier.h"
#include "cutlass/arch/reg_reconfig.h"
#include "cutlass/pipeline/pipeline.hpp"

namespace mkernel::gemm_swap {

// Equal ranges of the weight blocks' (block, k-block) iteration space over groups of CTAs, one
// CTA per token tile in each group: group q of G takes iterations [total * q / G, total * (q + 1)
// / G) of total = tiles_m * k_tiles (weight block m covers [m * k_tiles, (m + 1) * k_tiles)), and
// its tiles_n CTAs run that same range, each for its own token tile. So the CTAs that need a
// weight k-block read it at the same time and all but the first find it in L2. (s12 run 2: with
// one range per (tile, k-block) over all CTAs, the token tiles of a weight block started at
// unrelated k offsets and the weights streamed from HBM once per token tile: 1.2-1.8x slower
// than data-parallel.) A range cut at weight-block edges gives a CTA's pieces; the groups meeting
// block m are the slices of each of its tiles, in group order.
struct BalancedK {
  struct Params {
    int tiles_n = 1;        // token tiles (the swapped problem's N): CTAs per group
    int k_tiles = 1;        // k-blocks per tile
    long long total = 1;    // tiles_m * k_tiles
    int groups = 1;         // CTA groups; the grid is groups * tiles_n CTAs
    int max_slices = 1;     // partial slots per tile in the workspace
  };
  struct Piece {
    int m_block, n_block, tile;
    int k_begin, k_count;
    int slice, slices;  // this piece's place among the groups sharing the tile
  };

  CUTLASS_HOST_DEVICE static long long begin(Params const& p, int group) {
    return p.total * group / p.groups;
  }
  // The group whose range holds iteration x (the largest q with begin(q) <= x).
  CUTLASS_HOST_DEVICE static int owner(Params const& p, long long x) {
    return static_cast<int>(((x + 1) * p.groups - 1) / p.total);
  }
  // The piece of a range [x, end) that starts at x, for token tile n_block.
  CUTLASS_HOST_DEVICE static Piece piece(Params const& p, long long x, long long end,
                                         int n_block) {
    Piece w;
    w.m_block = static_cast<int>(x / p.k_tiles);
    const long long t0 = static_cast<long long>(w.m_block) * p.k_tiles, t1 = t0 + p.k_tiles;
    w.n_block = n_block;
    w.tile = w.m_block * p.tiles_n + n_block;
    w.k_begin = static_cast<int>(x - t0);
    w.k_count = static_cast<int>((end < t1 ? end : t1) - x);
    const int first = owner(p, t0);
    w.slice = owner(p, x) - first;
    w.slices = owner(p, t1 - 1) - first + 1;
    return w;
  }
  // Host: the schedule of tiles_m x tiles_n tiles on about `sm_count` CTAs (groups of tiles_n;
  // at least one group, at most one group per iteration).
  static Params make(int tiles_m, int tiles_n, int k_tiles, int sm_count) {
    Params p;
    p.tiles_n = tiles_n;
    p.k_tiles = k_tiles;
    p.total = static_cast<long long>(tiles_m) * k_tiles;
    const int groups = sm_count / tiles_n > 1 ? sm_count / tiles_n : 1;
    p.groups = static_cast<int>(groups < p.total ? groups : p.total);
    int most = 1;
    for (int m = 0; m < tiles_m; ++m) {
      const long long t0 = static_cast<long long>(m) * k_tiles;
      const int s = owner(p, t0 + k_tiles - 1) - owner(p, t0) + 1;
      most = s > most ? s : most;
    }
    p.max_slices = most;
    return p;
  }
  static int ctas(Params const& p) { return p.groups * p.tiles_n; }
};

// The ticketed, slice-ordered reduction of one split tile. Partials: [tile][slot][kFrag / 4]
// [kThreads] float4 (a warp stores and loads 512 contiguous bytes per instruction).
template <int kThreads, int kFrag>
struct TicketReduce {
  static_assert(kFrag % 4 == 0, "the accumulator fragment is stored as float4");
  static constexpr int kVecs = kFrag / 4;
  // The largest divisor of kVecs up to 12: float4 loads in flight per thread per slice.
  static constexpr int chunk(int c) { return kVecs % c == 0 ? c : chunk(c - 1); }
  static constexpr int kChunk = chunk(kVecs < 12 ? kVecs : 12);
  static constexpr size_t partial_floats() { return static_cast<size_t>(kThreads) * kFrag; }
  static size_t workspace_bytes(int tiles, int slots) {
    return gemm::kSplitKCounterBytes + static_cast<size_t>(tiles) * slots * partial_floats() * 4;
  }

  // Every consumer thread of the CTA after the mainloop of its piece of `tile`. True in the one
  // CTA that finishes the tile; its `acc` then holds slice 0 + slice 1 + ... in that order.
  template <class Accum>
  CUTLASS_DEVICE static bool reduce(int* counters, float* partials_base, int tile, int slice,
                                    int slices, int slots, Accum& acc, int thread,
                                    int* smem_last) {
    static_assert(decltype(cute::size(acc))::value == kFrag, "fragment size mismatch");
    constexpr size_t stride = partial_floats() / 4;  // float4s per partial
    float4* partials = reinterpret_cast<float4*>(partials_base) +
                       static_cast<size_t>(tile) * slots * stride + thread;
    float4* mine = partials + slice * stride;
    gemm::store_partial<kThreads, kVecs>(mine, acc);
    if (!gemm::take_ticket<kThreads>(counters, tile, slices, thread, smem_last)) return false;
    // Sum in slice order; this CTA's own slice from its registers (the values it stored).
    // kChunk float4 loads in flight per thread per slice (one at a time would pay an L2 round
    // trip per float4); ld.global.cg: other SMs wrote these, this SM's L1 may be stale.
    CUTLASS_PRAGMA_UNROLL
    for (int v0 = 0; v0 < kVecs; v0 += kChunk) {
      float4 sum[kChunk];
      CUTLASS_PRAGMA_UNROLL
      for (int j = 0; j < kChunk; ++j) {
        const int v = v0 + j;
        sum[j] = slice == 0 ? gemm::fragment_vec(acc, v) : __ldcg(partials + v * kThreads);
      }
      for (int s = 1; s < slices; ++s) {
        float4 part[kChunk];
        CUTLASS_PRAGMA_UNROLL
        for (int j = 0; j < kChunk; ++j) {
          const int v = v0 + j;
          part[j] = s == slice ? gemm::fragment_vec(acc, v)
                               : __ldcg(partials + s * stride + v * kThreads);
        }
        gemm::add_chunk(sum, part);
      }
      CUTLASS_PRAGMA_UNROLL
      for (int j = 0; j < kChunk; ++j) gemm::set_fragment_vec(acc, v0 + j, sum[j]);
    }
    return true;
  }
};

template <class Mainloop_, class Epilogue_>
class SwapTicketKernel {
 public:
  using Mainloop = Mainloop_;
  using Epilogue = Epilogue_;
  using TileShape = typename Mainloop::TileShape;
  using TiledMma = typename Mainloop::TiledMma;
  using ClusterShape = typename Mainloop::DispatchPolicy::ClusterShape;
  using ProblemShape = cute::Shape<int, int, int, int>;
  static_assert(cute::size(ClusterShape{}) == 1, "one CTA per cluster (no multicast)");

  static constexpr int kMmaThreads = cute::size(TiledMma{});
  static_assert(kMmaThreads == 2 * cutlass::NumThreadsPerWarpGroup,
                "a cooperative (2-warpgroup) mainloop");
  static constexpr int kThreads = 3 * cutlass::NumThreadsPerWarpGroup;
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
    } pipelines;
    struct Tensors : cute::aligned_struct<128, cute::_1> {
      typename Epilogue::TensorStorage epilogue;
      typename Mainloop::TensorStorage mainloop;
    } tensors;
    int last;  // TicketReduce's verdict, shared by the consumer threads
  };
  static constexpr int kSmemBytes = sizeof(SharedStorage);
  static_assert(kSmemBytes <= 227 * 1024, "shared storage exceeds the sm90 opt-in limit");

  static constexpr int kFrag =
      cute::size<0>(TileShape{}) * cute::size<1>(TileShape{}) / kMmaThreads;
  using Reduce = TicketReduce<kMmaThreads, kFrag>;

  struct Params {
    ProblemShape problem;  // the swapped problem: (weights rows, tokens, K, 1)
    typename Mainloop::Params mainloop;
    typename Epilogue::Params epilogue;
    BalancedK::Params schedule;
    int* counters = nullptr;    // [tiles] tickets, zero before and after every launch
    float* partials = nullptr;  // [tiles][schedule.max_slices] fp32 partial tiles
  };

  enum class WarpGroupRole { Producer = 0, Consumer0 = 1, Consumer1 = 2 };

  CUTLASS_DEVICE void operator()(Params const& params, char* smem_buf) {
    using namespace cute;
    SharedStorage& shared = *reinterpret_cast<SharedStorage*>(smem_buf);
    const int thread_idx = static_cast<int>(threadIdx.x);
    const int warp_idx = cutlass::canonical_warp_idx_sync();
    const int lane_idx = cutlass::canonical_lane_idx();
    const auto role = WarpGroupRole(cutlass::canonical_warp_group_idx());
    const int warp_group_thread_idx = thread_idx % cutlass::NumThreadsPerWarpGroup;
    const int mma_thread_idx = thread_idx - cutlass::NumThreadsPerWarpGroup;

    if (warp_idx == 0 && cute::elect_one_sync()) {
      Mainloop::prefetch_tma_descriptors(params.mainloop);
      Epilogue::prefetch_tma_descriptors(params.epilogue);
    }

    typename MainloopPipeline::Params mainloop_pipe;
    if (role == WarpGroupRole::Producer && warp_idx == 0) {
      mainloop_pipe.role = MainloopPipeline::ThreadCategory::Producer;
    }
    if (role != WarpGroupRole::Producer) {
      mainloop_pipe.role = MainloopPipeline::ThreadCategory::Consumer;
    }
    mainloop_pipe.is_leader = warp_group_thread_idx == 0;
    mainloop_pipe.num_consumers = kMmaThreads;
    mainloop_pipe.transaction_bytes = params.mainloop.tma_transaction_bytes;
    MainloopPipeline mainloop_pipeline(shared.pipelines.mainloop, mainloop_pipe, ClusterShape{});

    // No C operand (D = acc), but the epilogue's interface takes a load pipeline.
    typename EpiLoadPipeline::Params epi_load_pipe;
    if (role != WarpGroupRole::Producer) {
      epi_load_pipe.role = EpiLoadPipeline::ThreadCategory::Consumer;
    }
    epi_load_pipe.dst_blockid = 0;
    epi_load_pipe.producer_arv_count = cutlass::NumThreadsPerWarp;
    epi_load_pipe.consumer_arv_count = kMmaThreads;
    if constexpr (Epilogue::RequiresTransactionBytes) {
      epi_load_pipe.transaction_bytes = params.epilogue.tma_transaction_bytes;
    }
    EpiLoadPipeline epi_load_pipeline(shared.pipelines.epi_load, epi_load_pipe);
    typename EpiStorePipeline::Params epi_store_pipe;
    epi_store_pipe.always_wait = true;
    EpiStorePipeline epi_store_pipeline(epi_store_pipe);
    __syncthreads();  // the barriers are initialised

    const auto problem_mnkl = params.problem;
    Mainloop mainloop;
    auto load_inputs = mainloop.load_init(problem_mnkl, params.mainloop);
    Tensor gA_mkl = get<0>(load_inputs);
    const BalancedK::Params& sp = params.schedule;
    const int group = static_cast<int>(blockIdx.x) / sp.tiles_n;
    const int n_block = static_cast<int>(blockIdx.x) - group * sp.tiles_n;
    const long long first = BalancedK::begin(sp, group), end = BalancedK::begin(sp, group + 1);

    if (role == WarpGroupRole::Producer) {
      cutlass::arch::warpgroup_reg_dealloc<kLoadRegisters>();
      if (warp_idx != 0) return;  // warps 1-3 of the producer warpgroup have no role
      MainloopState write_state = cutlass::make_producer_start_state<MainloopPipeline>();
      for (long long x = first; x < end;) {
        const BalancedK::Piece w = BalancedK::piece(sp, x, end, n_block);
        x += w.k_count;
        auto blk_coord = make_coord(w.m_block, w.n_block, _, 0);
        auto k_tile_iter =
            cute::make_coord_iterator(idx2crd(w.k_begin, shape<3>(gA_mkl)), shape<3>(gA_mkl));
        mainloop.load(params.mainloop, mainloop_pipeline, write_state, load_inputs, blk_coord,
                      k_tile_iter, w.k_count, lane_idx, 0, shared.tensors.mainloop);
        write_state.advance(w.k_count);
      }
      mainloop.load_tail(mainloop_pipeline, write_state);
    } else {
      cutlass::arch::warpgroup_reg_alloc<kMmaRegisters>();
      TiledMma tiled_mma;
      Epilogue epilogue(params.epilogue, shared.tensors.epilogue);
      MainloopState read_state;
      EpiLoadState epi_load_state;
      EpiStoreState epi_store_state = cutlass::make_producer_start_state<EpiStorePipeline>();
      bool stored = false;
      for (long long x = first; x < end;) {
        const BalancedK::Piece w = BalancedK::piece(sp, x, end, n_block);
        x += w.k_count;
        auto accumulators = partition_fragment_C(tiled_mma, take<0, 2>(TileShape{}));
        mainloop.mma(mainloop_pipeline, read_state, accumulators, w.k_count, mma_thread_idx,
                     shared.tensors.mainloop, params.mainloop);
        mainloop.mma_tail(mainloop_pipeline, read_state, w.k_count);
        read_state.advance(w.k_count);
        if (w.slices > 1 &&
            !Reduce::reduce(params.counters, params.partials, w.tile, w.slice, w.slices,
                            sp.max_slices, accumulators, mma_thread_idx, &shared.last)) {
          continue;  // another slice of this tile finishes it
        }
        auto blk_coord = make_coord(w.m_block, w.n_block, _, 0);
        auto [next_load, next_store] =
            epilogue.store(epi_load_pipeline, epi_load_state, epi_store_pipeline, epi_store_state,
                           problem_mnkl, TileShape{}, blk_coord, accumulators, tiled_mma,
                           mma_thread_idx, shared.tensors.epilogue);
        epi_load_state = next_load;
        epi_store_state = next_store;
        stored = true;
      }
      if (stored) {
        epilogue.store_tail(epi_load_pipeline, epi_load_state, epi_store_pipeline, epi_store_state);
      }
    }
  }
};

template <class Kernel>
__global__ void __launch_bounds__(Kernel::kThreads, 1)
    swap_ticket_kernel(CUTLASS_GRID_CONSTANT typename Kernel::Params const params) {
  extern __shared__ char smem[];
  Kernel{}(params, smem);
}

// Host side of one (config, dtype): the collectives are SwapGemm's (so the tile is exactly the
// CUTLASS kernel's), the kernel and its schedule are the ticketed one's.
template <class Cfg, gemm::DType DT>
struct SwapTicketGemm {
  using Base = SwapGemm<Cfg, DT>;
  using Element = typename Base::Element;
  using Mainloop = typename Base::CollectiveMainloop;
  using Epilogue = typename Base::CollectiveEpilogue;
  using Kernel = SwapTicketKernel<Mainloop, Epilogue>;
  static constexpr int kBlockM = cute::size<0>(typename Cfg::TileShape{});  // weights rows
  static constexpr int kBlockN = cute::size<1>(typename Cfg::TileShape{});  // tokens
  static constexpr int kBlockK = cute::size<2>(typename Cfg::TileShape{});

  static BalancedK::Params schedule(const gemm::Problem& p, int sm_count) {
    return BalancedK::make((p.n + kBlockM - 1) / kBlockM, (p.m + kBlockN - 1) / kBlockN,
                           (p.k + kBlockK - 1) / kBlockK, sm_count);
  }
  static int tiles(const gemm::Problem& p) {
    return ((p.n + kBlockM - 1) / kBlockM) * ((p.m + kBlockN - 1) / kBlockN);
  }

  static const char* can_implement(const gemm::Problem& p, int sm_count, Decomposition dec) {
    if (dec.mode != Decomposition::kHeuristic && dec.mode != Decomposition::kStreamK) {
      return "the ticketed kernel always balances K over the SMs";
    }
    if (sm_count < 1) return "no SMs";
    if (tiles(p) > gemm::kSplitKMaxTiles) return "more than 16384 output tiles";
    // The collectives' own limits (TMA alignment, shapes): CUTLASS's kernel with these types.
    return Base::can_implement(p, sm_count, Decomposition{});
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
      if (reason) *reason = "the ticketed swapped GEMM needs a zero-initialised workspace";
      return cudaErrorInvalidValue;
    }
    cudaError_t err = opt_in_smem_once<swap_ticket_kernel<Kernel>>(Kernel::kSmemBytes);
    if (err != cudaSuccess) return err;

    typename Kernel::Params params;
    params.problem = {p.n, p.m, p.k, 1};
    auto sw = cutlass::make_cute_packed_stride(typename Mainloop::StrideA{}, {p.n, p.k, 1});
    auto sx = cutlass::make_cute_packed_stride(typename Mainloop::StrideB{}, {p.m, p.k, 1});
    auto sd = cutlass::make_cute_packed_stride(typename Epilogue::StrideD{}, {p.n, p.m, 1});
    typename Mainloop::Arguments ma{static_cast<const Element*>(p.b), sw,
                                    static_cast<const Element*>(p.a), sx};
    typename Epilogue::Arguments ea{{1.0f, 0.0f}, nullptr, sd, static_cast<Element*>(p.d), sd};
    params.mainloop = Mainloop::to_underlying_arguments(params.problem, ma, nullptr);
    params.epilogue = Epilogue::to_underlying_arguments(params.problem, ea, nullptr);
    params.schedule = schedule(p, sm_count);
    char* base = static_cast<char*>(workspace);
    params.counters = reinterpret_cast<int*>(base);
    params.partials = reinterpret_cast<float*>(base + gemm::kSplitKCounterBytes);
    swap_ticket_kernel<Kernel>
        <<<BalancedK::ctas(params.schedule), Kernel::kThreads, Kernel::kSmemBytes, stream>>>(params);
    err = cudaGetLastError();
    if (err != cudaSuccess && reason) *reason = "launch of the ticketed swapped GEMM failed";
    return err;
  }
};

}  // namespace mkernel::gemm_swap

// One ticketed variant (both dtypes) per .cu: the entry points gemm_swap_dispatch.cu declares.
#define MKERNEL_GEMM_SWAP_TICKET_INSTANTIATE(CFG, SUFFIX) \
  namespace mkernel::gemm_swap::detail {                  \
  template <gemm::DType DT>                               \
  using SUFFIX##_t = SwapTicketGemm<CFG, DT>;             \
  MKERNEL_GEMM_SWAP_ENTRY_POINTS(SUFFIX)                  \
  }
