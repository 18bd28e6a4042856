// The forward mainloop of the attention kernel: TMA loads of Q, K and V (producer warp) and the
// two GEMMs with the online softmax between them (consumer warpgroups).
//
//   load: Q tile once per work tile, then K_n, V_n for n = last .. first visible KV block
//         (masked blocks first: they set the running max early, and under causal masking they
//         are the diagonal blocks). The hook may wait before each K/V pair.
//   mma:  per KV block, S = Q·K_nᵀ (SS wgmma), mask, online softmax, O += P·V_n (RS wgmma).
//
// Pipelines: Q has a one-stage TMA pipeline (released once the tile's last S GEMM has
// completed, so the next tile's Q load overlaps the last PV GEMM and the epilogue); K and V
// have kStages-stage pipelines each, which advance together (one PipelineState).
#pragma once

#include "attention_hooks.cuh"
#include "attention_traits.hpp"
#include "cute/tensor.hpp"
#include "cutlass/arch/barrier.h"
#include "cutlass/cutlass.h"
#include "cutlass/fast_math.h"
#include "cutlass/numeric_conversion.h"
#include "cutlass/pipeline/pipeline.hpp"
#include "named_barriers.hpp"
#include "softmax.hpp"
#include "tile_scheduler.hpp"

namespace mkernel::attention {

// Traits::kTimeline (bit 23): the sums of CTAs 0-7 (two consumer warpgroups each, TimelineSlot
// order), one buffer per variant; attention_variants_timeline.cu prints it after each launch
// from a kernel of its own (a printf in the attention kernel is a call: ptxas then serializes
// every wgmma, C7510).
inline constexpr int kTimelineCtas = 8;
inline constexpr int kTimelineSlots = 11;
template <int kVariant>
CUTLASS_DEVICE uint32_t* timeline_buffer() {
  static uint32_t buf[kTimelineCtas * 2 * kTimelineSlots];
  return buf;
}

template <class Traits>
struct MainloopFwdSm90 {
  using Element = typename Traits::Element;
  static constexpr int kBlockM = Traits::kBlockM;
  static constexpr int kBlockN = Traits::kBlockN;
  static constexpr int kHeadDim = Traits::kHeadDim;
  static constexpr int kStages = Traits::kStages;
  static constexpr bool kCausal = Traits::kCausal;
  using TileShapeMNK = typename Traits::TileShapeMNK;
  using TiledMmaQK = typename Traits::TiledMmaQK;
  using TiledMmaPV = typename Traits::TiledMmaPV;
  using SmemLayoutQ = typename Traits::SmemLayoutQ;
  using SmemLayoutK = typename Traits::SmemLayoutK;
  using SmemLayoutVt = typename Traits::SmemLayoutVt;

  // Q: one stage per tile, two with the cross-tile overlap (Traits::kCrossTile: the next tile's Q
  // is resident while this tile's last S GEMM still reads its own).
  static constexpr int kStagesQ = Traits::kStagesQ;
  using PipelineQ = cutlass::PipelineTmaAsync<kStagesQ>;
  using StateQ = cutlass::PipelineState<kStagesQ>;
  // Q's stages as one tensor (M, d, stage), for the consumers of mma_stream.
  using SmemLayoutQs = decltype(cute::tile_to_shape(
      cute::GMMA::Layout_K_SW128_Atom<Element>{},
      cute::Shape<cute::Int<kBlockM>, cute::Int<kHeadDim>, cute::Int<kStagesQ>>{}));
  static constexpr int kQStageElems = int(cute::cosize_v<SmemLayoutQ>);
  // K and V rings: kStages deep each, or V one deeper (Traits::kStagesV, a variant). With equal
  // depths one PipelineState walks both; otherwise a pair, advanced together.
  static constexpr int kStagesK = Traits::kStagesK;
  static constexpr int kStagesV = Traits::kStagesV;
  using PipelineK = cutlass::PipelineTmaAsync<kStagesK>;
  using PipelineV = cutlass::PipelineTmaAsync<kStagesV>;
  using PipelineKV = PipelineK;
  using StateK = cutlass::PipelineState<kStagesK>;
  using StateV = cutlass::PipelineState<kStagesV>;
  struct StatePairKV {
    StateK k;
    StateV v;
    CUTLASS_DEVICE StatePairKV& operator++() {
      ++k;
      ++v;
      return *this;
    }
  };
  static constexpr bool kOneStateKV = kStagesK == kStagesV;
  using StateKV = std::conditional_t<kOneStateKV, StateK, StatePairKV>;
  CUTLASS_DEVICE static StateK& k_state(StateKV& s) {
    if constexpr (kOneStateKV) return s;
    else return s.k;
  }
  CUTLASS_DEVICE static StateV& v_state(StateKV& s) {
    if constexpr (kOneStateKV) return s;
    else return s.v;
  }
  CUTLASS_DEVICE static StateKV producer_start_kv() {
    if constexpr (kOneStateKV) return cutlass::make_producer_start_state<PipelineK>();
    else return {cutlass::make_producer_start_state<PipelineK>(), cutlass::make_producer_start_state<PipelineV>()};
  }

  // Global tensors as TMA sees them: Q/K/O (seq, d, (head, batch)); Vᵀ (d, seq, (head, batch)).
  using ShapeSeqD = cute::Shape<int32_t, int32_t, cute::Shape<int32_t, int32_t>>;
  using StrideSeqD = cute::Stride<int64_t, cute::_1, cute::Stride<int64_t, int64_t>>;
  using StrideDSeq = cute::Stride<cute::_1, int64_t, cute::Stride<int64_t, int64_t>>;

  using TmaQ = decltype(cute::make_tma_copy(
      cute::SM90_TMA_LOAD{},
      cute::make_tensor(cute::make_gmem_ptr(static_cast<Element const*>(nullptr)), ShapeSeqD{},
                        StrideSeqD{}),
      SmemLayoutQ{}, cute::select<0, 2>(TileShapeMNK{}), cute::_1{}));
  // K and V: with a cluster of 2 each CTA loads half of a block and multicasts it to both.
  static constexpr int kClusterM = Traits::kClusterM;
  using ClusterM = cute::Int<kClusterM>;
  using TmaLoadKV = std::conditional_t<kClusterM == 1, cute::SM90_TMA_LOAD, cute::SM90_TMA_LOAD_MULTICAST>;
  using TmaK = decltype(cute::make_tma_copy(
      TmaLoadKV{},
      cute::make_tensor(cute::make_gmem_ptr(static_cast<Element const*>(nullptr)), ShapeSeqD{},
                        StrideSeqD{}),
      cute::take<0, 2>(SmemLayoutK{}), cute::select<1, 2>(TileShapeMNK{}), ClusterM{}));
  using TmaVt = decltype(cute::make_tma_copy(
      TmaLoadKV{},
      cute::make_tensor(cute::make_gmem_ptr(static_cast<Element const*>(nullptr)), ShapeSeqD{},
                        StrideDSeq{}),
      cute::take<0, 2>(SmemLayoutVt{}),
      cute::Shape<cute::Int<kHeadDim>, cute::Int<kBlockN>>{}, ClusterM{}));

  struct TensorStorage {
    cute::array_aligned<Element, cute::cosize_v<SmemLayoutQs>, 1024> q;
    cute::array_aligned<Element, cute::cosize_v<SmemLayoutK>, 1024> k;
    cute::array_aligned<Element, cute::cosize_v<SmemLayoutVt>, 1024> v;
  };
  // Traits::kOInV: V stage `stage` as the epilogue's O buffer (a V stage is >= the O tile).
  static constexpr int kVStageElems = int(cute::cosize_v<SmemLayoutVt>) / kStagesV;
  CUTLASS_DEVICE static Element* v_stage_data(TensorStorage& smem, int stage) {
    return smem.v.data() + stage * kVStageElems;
  }

  struct PipelineStorage {
    alignas(16) typename PipelineQ::SharedStorage q;
    alignas(16) typename PipelineK::SharedStorage k;
    alignas(16) typename PipelineV::SharedStorage v;
  };

  struct Arguments {
    const Element* q;
    const Element* k;
    const Element* v;
    int batch, seq_q, seq_kv, heads, heads_kv;
    float softmax_scale;
    int64_t q_batch_stride = 0;   // elements; 0: dense (seq_q * heads * d)
    int64_t kv_batch_stride = 0;  // elements; 0: dense (seq_kv * heads_kv * d)
    int zz_world = 0, zz_rank = 0, zz_chunk = 0;  // zigzag ring mode (causal only; see below)
    // Keys from own_key_start on (a multiple of kBlockN) from k_own / v_own, dense [batch,
    // seq_kv - own_key_start, heads_kv, d] (attention_api.h Problem::k_own); null: none.
    const Element* k_own = nullptr;
    const Element* v_own = nullptr;
    int own_key_start = 0;
  };

  struct Params {
    TmaQ tma_q;
    // [0]: k / v; [1]: Arguments::k_own / v_own, loaded from own_block on (block n - own_block
    // there), else a copy of [0] (no second descriptor encoded) with own_block past every block.
    TmaK tma_k[2];
    TmaVt tma_vt[2];
    ShapeSeqD shape_q;
    ShapeSeqD shape_kv;
    ShapeSeqD shape_vt;
    int seq_q, seq_kv, heads_per_kv;
    float softmax_scale;
    float scale_log2;  // softmax_scale * log2(e)
    int zz_world, zz_rank, zz_chunk;
    // Zigzag ring mode: query / key blocks per chunk (zz_chunk / kBlockM, zz_chunk / kBlockN),
    // as multiply-shift divisors: the block walk and the mask divide by them per block.
    cutlass::FastDivmod zz_m_blocks, zz_n_blocks;
    int own_block;
  };

  static Params to_underlying_arguments(Arguments const& a) {
    using namespace cute;
    const int64_t d = kHeadDim;
    const int64_t q_bs = a.q_batch_stride > 0 ? a.q_batch_stride : int64_t(a.seq_q) * a.heads * d;
    const int64_t kv_bs =
        a.kv_batch_stride > 0 ? a.kv_batch_stride : int64_t(a.seq_kv) * a.heads_kv * d;
    ShapeSeqD shape_q = make_shape(a.seq_q, int32_t(kHeadDim), make_shape(a.heads, a.batch));
    StrideSeqD stride_q = make_stride(int64_t(a.heads) * d, _1{}, make_stride(d, q_bs));
    ShapeSeqD shape_kv = make_shape(a.seq_kv, int32_t(kHeadDim), make_shape(a.heads_kv, a.batch));
    StrideSeqD stride_kv = make_stride(int64_t(a.heads_kv) * d, _1{}, make_stride(d, kv_bs));
    ShapeSeqD shape_vt = make_shape(int32_t(kHeadDim), a.seq_kv, make_shape(a.heads_kv, a.batch));
    StrideDSeq stride_vt = make_stride(_1{}, int64_t(a.heads_kv) * d, make_stride(d, kv_bs));
    Tensor mQ = make_tensor(make_gmem_ptr(a.q), make_layout(shape_q, stride_q));
    Tensor mK = make_tensor(make_gmem_ptr(a.k), make_layout(shape_kv, stride_kv));
    Tensor mVt = make_tensor(make_gmem_ptr(a.v), make_layout(shape_vt, stride_vt));
    TmaK tma_k = make_tma_copy(TmaLoadKV{}, mK, take<0, 2>(SmemLayoutK{}),
                               select<1, 2>(TileShapeMNK{}), ClusterM{});
    TmaVt tma_vt = make_tma_copy(TmaLoadKV{}, mVt, take<0, 2>(SmemLayoutVt{}),
                                 Shape<Int<kHeadDim>, Int<kBlockN>>{}, ClusterM{});
    // The own K/V (Arguments::k_own): descriptors of their own, else copies of the above.
    TmaK tma_k_own = tma_k;
    TmaVt tma_vt_own = tma_vt;
    int own_block = 0x7fffffff;
    if (a.k_own != nullptr && a.v_own != nullptr) {
      const int own_seq = a.seq_kv - a.own_key_start;
      const int64_t own_bs = int64_t(own_seq) * a.heads_kv * d;
      const ShapeSeqD shape_kv_own =
          make_shape(own_seq, int32_t(kHeadDim), make_shape(a.heads_kv, a.batch));
      const ShapeSeqD shape_vt_own =
          make_shape(int32_t(kHeadDim), own_seq, make_shape(a.heads_kv, a.batch));
      Tensor mKo = make_tensor(make_gmem_ptr(a.k_own),
                               make_layout(shape_kv_own, make_stride(int64_t(a.heads_kv) * d, _1{},
                                                                     make_stride(d, own_bs))));
      Tensor mVto = make_tensor(make_gmem_ptr(a.v_own),
                                make_layout(shape_vt_own, make_stride(_1{}, int64_t(a.heads_kv) * d,
                                                                      make_stride(d, own_bs))));
      tma_k_own = make_tma_copy(TmaLoadKV{}, mKo, take<0, 2>(SmemLayoutK{}),
                                select<1, 2>(TileShapeMNK{}), ClusterM{});
      tma_vt_own = make_tma_copy(TmaLoadKV{}, mVto, take<0, 2>(SmemLayoutVt{}),
                                 Shape<Int<kHeadDim>, Int<kBlockN>>{}, ClusterM{});
      own_block = a.own_key_start / kBlockN;
    }
    Params p{make_tma_copy(SM90_TMA_LOAD{}, mQ, SmemLayoutQ{}, select<0, 2>(TileShapeMNK{}), _1{}),
             {tma_k, tma_k_own},
             {tma_vt, tma_vt_own},
             shape_q,
             shape_kv,
             shape_vt,
             a.seq_q,
             a.seq_kv,
             a.heads / a.heads_kv,
             a.softmax_scale,
             a.softmax_scale * 1.4426950408889634f,
             a.zz_world,
             a.zz_rank,
             a.zz_chunk,
             cutlass::FastDivmod(a.zz_world > 0 ? a.zz_chunk / kBlockM : 1),
             cutlass::FastDivmod(a.zz_world > 0 ? a.zz_chunk / kBlockN : 1),
             own_block};
    return p;
  }

  // The PV wgmma's A operand (P, registers) for one thread: ((2, 2, 2), 1, kBlockN / 16). The
  // S accumulator's values ((2, 2, kBlockN / 8), 1, 1) in the same register order: value
  // (c, r, g) of S is value ((c, r, g % 2), 0, g / 2) of P (SM90 C and A-register layouts
  // agree: column pair, row + 8, column + 8).
  CUTE_HOST_DEVICE static constexpr auto p_operand_layout() {
    using namespace cute;
    return make_layout(make_shape(make_shape(_2{}, _2{}, _2{}), _1{}, Int<kBlockN / 16>{}),
                       make_stride(make_stride(_1{}, _2{}, _4{}), _0{}, _8{}));
  }

  CUTLASS_DEVICE static void prefetch_tma_descriptors(Params const& p) {
    cute::prefetch_tma_descriptor(p.tma_q.get_tma_descriptor());
    cute::prefetch_tma_descriptor(p.tma_k[0].get_tma_descriptor());
    cute::prefetch_tma_descriptor(p.tma_vt[0].get_tma_descriptor());
    if (p.own_block != 0x7fffffff) {
      cute::prefetch_tma_descriptor(p.tma_k[1].get_tma_descriptor());
      cute::prefetch_tma_descriptor(p.tma_vt[1].get_tma_descriptor());
    }
  }

  // KV blocks [n_min, n_max) that tile m_block sees. Causal (bottom-right aligned): query i
  // sees keys j <= i + seq_kv - seq_q. Empty when every row of the tile is fully masked.
  template <bool kZZ>
  CUTLASS_DEVICE static void n_block_range(Params const& p, int m_block, int& n_min, int& n_max) {
    n_min = 0;
    n_max = (p.seq_kv + kBlockN - 1) / kBlockN;
    if constexpr (kCausal) {
      if constexpr (kZZ) {
        if (p.zz_world > 0) return;  // every block; prev_block skips the invisible ones
      }
      // A cluster's CTAs walk the same KV blocks (each loads half of every block for both):
      // those of the cluster's last query block; the others see at most one more block, which
      // apply_mask masks whole (a fully masked block leaves the softmax state unchanged).
      const int m_last = kClusterM > 1 ? (m_block | (kClusterM - 1)) : m_block;
      const int last_key = (m_last + 1) * kBlockM - 1 + p.seq_kv - p.seq_q;  // of the tile's last row
      const int n_causal = last_key < 0 ? 0 : last_key / kBlockN + 1;
      n_max = n_causal < n_max ? n_causal : n_max;
    }
  }

  // Traits::kSplitTail: a piece of a split tail tile walks its KV blocks [n_lo, n_hi) only
  // (non-causal: inside the tile's [0, n_max)); producer and consumers alike.
  // A phase of an own-shard-first tile (WorkTile::phase, kPhases schedulers) clips the tile's
  // range to its [n_lo, n_hi) (get() sets no phase elsewhere: the branch folds away).
  CUTLASS_DEVICE static void piece_range(WorkTile const& work, int& n_min, int& n_max) {
    if constexpr (Traits::kSplitTail) {
      if (work.slot >= 0) {
        n_min = work.n_lo;
        n_max = work.n_hi;
      }
    }
    if (work.phase != 0) {
      n_min = n_min > work.n_lo ? n_min : work.n_lo;
      n_max = n_max < work.n_hi ? n_max : work.n_hi;
    }
  }

  // Whether the walk of `work` (a tile, piece or phase) meets any KV block: the producer and
  // the consumers skip a second phase that meets none alike, and its first phase then ends the
  // tile itself.
  template <bool kZZ>
  CUTLASS_DEVICE static bool walks_any(Params const& p, WorkTile const& work) {
    int n_min, n_max;
    n_block_range<kZZ>(p, work.m_block, n_min, n_max);
    piece_range(work, n_min, n_max);
    return prev_block<kZZ>(p, work.m_block, n_max, n_min) >= n_min;
  }
  // The second phase of first phase `work`.
  CUTLASS_DEVICE static WorkTile second_phase(WorkTile work) {
    work.phase = 2;
    work.n_hi = work.n_lo;
    work.n_lo = 0;
    return work;
  }

  // Zigzag ring mode (causal ring attention in one launch, zz_world = W > 0): the queries are a
  // zigzag shard of rank zz_rank — global chunks zz_rank and 2W-1-zz_rank, zz_chunk rows each —
  // and the keys are the W shards laid out by ring step, the shard of rank
  // (zz_rank + 1 + pos) mod W at position pos (2 * zz_chunk rows each). Visibility is by global
  // chunk: key chunk < query chunk whole, equal on the diagonal (causal inside the chunk),
  // greater not at all (skipped). zz_chunk is a multiple of kBlockM and kBlockN.
  // The global chunk of query tile m_block, and the tile's index in that chunk (m_in).
  CUTLASS_DEVICE static int zz_query_chunk(Params const& p, int m_block, int& m_in) {
    int half;  // 0 or 1
    p.zz_m_blocks(half, m_in, m_block);
    return half == 0 ? p.zz_rank : 2 * p.zz_world - 1 - p.zz_rank;
  }
  // The global chunk of key chunk `chunk` (2 per ring position) of the virtual K/V.
  CUTLASS_DEVICE static int zz_key_chunk_of(Params const& p, int chunk) {
    int src = p.zz_rank + 1 + (chunk >> 1);  // < 2W: one wrap at most
    if (src >= p.zz_world) src -= p.zz_world;
    return (chunk & 1) == 0 ? src : 2 * p.zz_world - 1 - src;
  }

  // The next KV block below n that tile m_block sees (n_min - 1: none); the walk starts at
  // n = n_max. Producer and consumers walk the same sequence.
  template <bool kZZ>
  CUTLASS_DEVICE static int prev_block(Params const& p, int m_block, int n, int n_min) {
    --n;
    if constexpr (kCausal && kZZ) {
      if (p.zz_world > 0) {
        // Whole key chunks after the query chunk are skipped in one step and, in the query
        // chunk itself, the blocks wholly right of the diagonal (a fully masked first block
        // would leave rows without a max): the first block a tile meets is its diagonal one
        // (the local shard is on top), and at most 2W chunks are looked at per tile.
        int m_in;
        const int gq = zz_query_chunk(p, m_block, m_in);
        const int diag = (m_in * kBlockM + kBlockM - 1) / kBlockN;  // last block seen, in chunk
        while (n >= n_min) {
          int chunk, in;
          p.zz_n_blocks(chunk, in, n);
          const int gk = zz_key_chunk_of(p, chunk);
          if (gk < gq) break;  // a whole earlier chunk: visible
          if (gk == gq) {      // the diagonal chunk: from its diagonal block down
            if (in > diag) n -= in - diag;
            break;
          }
          n -= in + 1;  // a later chunk: skipped whole
        }
      }
    }
    return n;
  }

  // Traits::kSplitMasked: the lowest KV block apply_mask may mask for tile m_block. Every block
  // below it that the walk visits is wholly visible (left of the tile's diagonal, not the
  // ragged last block; in the zigzag mode a key chunk before the query's, or the query's own
  // chunk left of the diagonal block), and the blocks at or above it come first in the walk
  // (top down): the masked loop runs until the walk passes below it.
  template <bool kZZ>
  CUTLASS_DEVICE static int first_masked_block(Params const& p, int m_block) {
    int lo = p.seq_kv / kBlockN;  // the ragged last block, if any, masks its tail
    if constexpr (kCausal) {
      if constexpr (kZZ) {
        if (p.zz_world > 0) {
          // Only the query's own global chunk masks (apply_mask), at its local position: the
          // shard on top (position W - 1, this rank's: chunks 2(W-1) and 2(W-1) + 1 of the
          // virtual K/V are global chunks zz_rank and 2W-1-zz_rank). seq_kv is whole blocks.
          int half, m_in;
          p.zz_m_blocks(half, m_in, m_block);
          const int chunk = 2 * (p.zz_world - 1) + half;
          return chunk * (p.zz_chunk / kBlockN) + (m_in * kBlockM + 1) / kBlockN;
        }
      }
      // Row 0 of the tile (the one that sees least) sees the keys < reach: block n is wholly
      // visible iff (n + 1) kBlockN <= reach (apply_mask's test).
      const int reach = m_block * kBlockM + p.seq_kv - p.seq_q + 1;
      const int c = reach > 0 ? reach / kBlockN : 0;
      lo = c < lo ? c : lo;
    }
    return lo;
  }

  // The unmasked loop's block walk (Traits::kSplitMasked): prev_block's sequence, stepping down
  // without a division while the next block is in the visible run [run_lo, n) (the key chunk
  // of n in the zigzag mode: visible whole below the masked blocks), the chunk walk only at a
  // chunk's start.
  template <bool kZZ>
  CUTLASS_DEVICE static int run_start(Params const& p, int n, int n_min) {
    if constexpr (kCausal && kZZ) {
      if (p.zz_world > 0) {
        int chunk, in;
        p.zz_n_blocks(chunk, in, n);
        return n - in;
      }
    }
    return n_min;
  }
  template <bool kZZ>
  CUTLASS_DEVICE static int prev_visible_block(Params const& p, int m_block, int n, int n_min,
                                               int& run_lo) {
    if constexpr (kCausal && kZZ) {
      if (n - 1 >= run_lo) return n - 1;
      n = prev_block<kZZ>(p, m_block, n, n_min);
      if (n >= n_min) run_lo = run_start<kZZ>(p, n, n_min);
      return n;
    } else {
      return n - 1;  // prev_block without the zigzag mode
    }
  }

  // Producer: one thread (the issuing lane of the producer warp) runs this per work tile.
  template <class Hooks>
  CUTLASS_DEVICE void load(Params const& p, typename Hooks::Params const& hooks,
                           PipelineQ& pipeline_q, PipelineK& pipeline_k, PipelineV& pipeline_v,
                           StateQ& q_write, StateKV& kv_write, TensorStorage& smem,
                           WorkTile const& work, SeenFlags* seen,
                           WorkTile const& next = WorkTile{0, 0, 0, false}) {
    using namespace cute;
    constexpr bool kZZ = Hooks::kZigzag;
    int n_min, n_max;
    n_block_range<kZZ>(p, work.m_block, n_min, n_max);
    piece_range(work, n_min, n_max);
    const int head_kv = work.head / p.heads_per_kv;

    // Q's stage of this tile (stage 0 when Q has one).
    Element* q_stage_data = smem.q.data();
    if constexpr (kStagesQ > 1) q_stage_data += q_write.index() * kQStageElems;
    Tensor sQ = make_tensor(make_smem_ptr(q_stage_data), SmemLayoutQ{});
    Tensor sK = make_tensor(make_smem_ptr(smem.k.data()), SmemLayoutK{});
    Tensor sVt = make_tensor(make_smem_ptr(smem.v.data()), SmemLayoutVt{});

    Tensor mQ = p.tma_q.get_tma_tensor(p.shape_q);
    Tensor mK = p.tma_k[0].get_tma_tensor(p.shape_kv);
    Tensor mVt = p.tma_vt[0].get_tma_tensor(p.shape_vt);
    Tensor gQ = local_tile(mQ(_, _, make_coord(work.head, work.batch)), select<0, 2>(TileShapeMNK{}),
                           make_coord(work.m_block, _0{}));  // (M, d)
    Tensor gK = local_tile(mK(_, _, make_coord(head_kv, work.batch)), select<1, 2>(TileShapeMNK{}),
                           make_coord(_, _0{}));  // (N, d, n)
    Tensor gVt = local_tile(mVt(_, _, make_coord(head_kv, work.batch)),
                            Shape<Int<kHeadDim>, Int<kBlockN>>{}, make_coord(_0{}, _));  // (d, N, n)

    auto [tQgQ, tQsQ] = tma_partition(p.tma_q, _0{}, Layout<_1>{}, group_modes<0, 2>(sQ),
                                      group_modes<0, 2>(gQ));
    // This CTA's share of each K/V block (all of it without a cluster).
    const int cluster_rank = kClusterM == 1 ? 0 : static_cast<int>(cute::block_rank_in_cluster());
    auto [tKgK, tKsK] = tma_partition(p.tma_k[0], cluster_rank, Layout<ClusterM>{},
                                      group_modes<0, 2>(sK), group_modes<0, 2>(gK));
    auto [tVgV, tVsV] = tma_partition(p.tma_vt[0], cluster_rank, Layout<ClusterM>{},
                                      group_modes<0, 2>(sVt), group_modes<0, 2>(gVt));
    // Multicast to every CTA of the cluster (the stage sits at the same offset in each).
    constexpr uint16_t kMcastMask = static_cast<uint16_t>((1u << kClusterM) - 1);
    auto tma_with = [&](auto const& tma, auto& barrier) {
      if constexpr (kClusterM == 1)
        return tma.with(barrier, 0);
      else
        return tma.with(barrier, kMcastMask);
    };

    pipeline_q.producer_acquire(q_write);
    copy(p.tma_q.with(*pipeline_q.producer_get_barrier(q_write), 0), tQgQ, tQsQ);
    ++q_write;

    // Blocks at or above seen_lo share the flag this lane acquired last in this tile (only with
    // Hooks::Params::skip_seen; the walk goes down), so they need no second acquire.
    [[maybe_unused]] int seen_lo = 0x7fffffff;
    CUTLASS_PRAGMA_NO_UNROLL
    for (int n = prev_block<kZZ>(p, work.m_block, n_max, n_min); n >= n_min;
         n = prev_block<kZZ>(p, work.m_block, n, n_min)) {
      if constexpr (Hooks::kWaitsForKV) {
        if (n < seen_lo)
          seen_lo = Hooks::template wait_kv<kBlockN>(hooks, seen, work.batch, head_kv, n);
      }
      StateK& k_write = k_state(kv_write);
      StateV& v_write = v_state(kv_write);
      // Blocks from own_block on come from the own K/V (Params::tma_k[1]), block n - own_block
      // there: the same coordinates in another descriptor (a TMA coordinate tensor's extent
      // only bounds its indexing; the descriptor bounds the load).
      const int own = n >= p.own_block ? 1 : 0;
      const int nb = own ? n - p.own_block : n;
      pipeline_k.producer_acquire(k_write);
      copy(tma_with(p.tma_k[own], *pipeline_k.producer_get_barrier(k_write)), tKgK(_, nb),
           tKsK(_, k_write.index()));
      pipeline_v.producer_acquire(v_write);
      copy(tma_with(p.tma_vt[own], *pipeline_v.producer_get_barrier(v_write)), tVgV(_, nb),
           tVsV(_, v_write.index()));
      ++kv_write;
    }
    // Traits::kPrefetchNextQ: the next tile's Q into L2 now, a few KV blocks before its smem
    // stage comes free (after this tile's last S GEMM), so that load hits L2 instead of HBM.
    if constexpr (Traits::kPrefetchNextQ) {
      if (next.valid) {
        Tensor gQn = local_tile(mQ(_, _, make_coord(next.head, next.batch)),
                                select<0, 2>(TileShapeMNK{}), make_coord(next.m_block, _0{}));
        auto [tQgQn, tQsQn] = tma_partition(p.tma_q, _0{}, Layout<_1>{}, group_modes<0, 2>(sQ),
                                            group_modes<0, 2>(gQn));
        cute::prefetch(p.tma_q, tQgQn);
      }
    }
  }

  // Inter-warpgroup ping-pong (FA3): consumer warpgroups issue their GEMMs in turn (0, 1, ..,
  // 0, ...), so one warpgroup's softmax runs while another's GEMMs hold the tensor cores.
  // Barrier WarpSchedulerWG1 + g is passed by warpgroup g's 128 threads (sync) and its
  // predecessor's 128 (arrive); the last warpgroup opens warpgroup 0's turn at the start.
  static constexpr int kNumWG = Traits::kNumMmaWarpGroups;
  static constexpr uint32_t kPairThreads = 2 * cutlass::NumThreadsPerWarpGroup;
  CUTLASS_DEVICE static uint32_t scheduler_barrier(int warp_group) {
    return barrier_id(AttnBarrier::WarpSchedulerWG1) + static_cast<uint32_t>(warp_group);
  }
  CUTLASS_DEVICE static void scheduler_barrier_init(int warp_group) {
    if constexpr (Traits::kPingPong) {
      if (warp_group == kNumWG - 1) cutlass::arch::NamedBarrier::arrive(kPairThreads, scheduler_barrier(0));
    }
  }
  CUTLASS_DEVICE static void scheduler_barrier_sync(int warp_group) {
    if constexpr (Traits::kPingPong) {
      cutlass::arch::NamedBarrier::sync(kPairThreads, scheduler_barrier(warp_group));
    }
  }
  CUTLASS_DEVICE static void scheduler_barrier_arrive(int warp_group) {
    if constexpr (Traits::kPingPong) {
      cutlass::arch::NamedBarrier::arrive(kPairThreads, scheduler_barrier((warp_group + 1) % kNumWG));
    }
  }

  // Sets the scores of S (rows, cols view) that block n must not see to -inf: keys past seq_kv
  // (ragged tail) and, under causal masking, keys right of the bottom-right diagonal.
  // Returns whether it masked (false: the block is wholly visible, no -inf written).
  template <bool kZZ, class TensorS, class TensorC>
  CUTLASS_DEVICE static bool apply_mask(Params const& p, TensorS& s_rc, TensorC const& tScS,
                                        int m_block, int n) {
    using namespace cute;
    const int col0 = n * kBlockN;
    int shift = m_block * kBlockM + p.seq_kv - p.seq_q;  // row i sees col <= i + shift
    bool need = col0 + kBlockN > p.seq_kv;
    if constexpr (kCausal) {
      if constexpr (kZZ) {
        if (p.zz_world > 0) {  // only diagonal chunks mask: positions from the chunks' starts
          int m_in, chunk, in;
          p.zz_n_blocks(chunk, in, n);
          if (zz_key_chunk_of(p, chunk) != zz_query_chunk(p, m_block, m_in)) return false;
          shift = m_in * kBlockM + chunk * p.zz_chunk;
        }
      }
      need = need || col0 + kBlockN - 1 > shift;
    }
    if (!need) return false;
    CUTLASS_PRAGMA_UNROLL
    for (int r = 0; r < size<0>(s_rc); ++r) {
      const int row = get<0>(tScS(r, 0));
      CUTLASS_PRAGMA_UNROLL
      for (int c = 0; c < size<1>(s_rc); ++c) {
        const int col = col0 + get<1>(tScS(r, c));
        bool masked = col >= p.seq_kv;
        if constexpr (kCausal) masked = masked || col > row + shift;
        if (masked) s_rc(r, c) = -INFINITY;
      }
    }
    return true;
  }

  // Masking and the online softmax of one block. With FMA-pipe exps (Softmax::kExpEmu), a
  // masked block takes the all-MUFU copy of the softmax (exact 0 for -inf), a visible one the
  // mixed copy: a warp-uniform branch between two unrolled copies.
  template <bool kZZ, class Softmax, class TensorS, class TensorC, int kRows>
  CUTLASS_DEVICE static void mask_and_softmax(Params const& p, Softmax& softmax, TensorS& s_rc,
                                              TensorC const& tScS, int m_block, int n,
                                              float (&factor)[kRows]) {
    const bool masked = apply_mask<kZZ>(p, s_rc, tScS, m_block, n);
    if constexpr (Softmax::kExpEmu > 0) {
      if (masked) {
        softmax.template step<true>(s_rc, factor);
      } else {
        softmax.template step<false>(s_rc, factor);
      }
    } else {
      softmax.step(s_rc, factor);
    }
  }

  // The online softmax of a wholly visible block (Traits::kSplitMasked's unmasked loop): what
  // mask_and_softmax does when apply_mask finds nothing to mask.
  template <class Softmax, class TensorS, int kRows>
  CUTLASS_DEVICE static void softmax_visible(Softmax& softmax, TensorS& s_rc, float (&factor)[kRows]) {
    if constexpr (Softmax::kExpEmu > 0) {
      softmax.template step<false>(s_rc, factor);
    } else {
      softmax.step(s_rc, factor);
    }
  }

  // fp32 accumulator -> Element fragment of the same layout (paired conversions: F2FP, one
  // per pair, 16 per clock per SM). Traits::kIntConvertP (bf16; measured 1-4% slower, off): on the integer pipe
  // instead — round half up (add 0x8000 to each fp32 pattern, ties away from zero instead of
  // to even: P is in [0, 1], no overflow) and keep the two high halves (one PRMT): 3 issue
  // slots per pair instead of 1, none of them on the conversion unit.
  template <class Tensor>
  CUTLASS_DEVICE static auto convert_to_element(Tensor const& t) {
    using namespace cute;
    constexpr int N = decltype(size(t))::value;
    auto out = make_tensor_like<Element>(t);
    if constexpr (Traits::kIntConvertP && std::is_same_v<Element, cutlass::bfloat16_t>) {
      static_assert(N % 2 == 0, "pairs of P values");
      uint32_t* dst = reinterpret_cast<uint32_t*>(out.data());
      CUTLASS_PRAGMA_UNROLL
      for (int i = 0; i < N / 2; ++i) {
        const uint32_t lo = __float_as_uint(t.data()[2 * i]) + 0x8000u;
        const uint32_t hi = __float_as_uint(t.data()[2 * i + 1]) + 0x8000u;
        dst[i] = __byte_perm(lo, hi, 0x7632);
      }
    } else {
      cutlass::NumericArrayConverter<Element, float, N> conv;
      *reinterpret_cast<cutlass::Array<Element, N>*>(out.data()) =
          conv(*reinterpret_cast<cutlass::Array<float, N> const*>(t.data()));
    }
    return out;
  }

  // Keeps the softmax of S_n ahead of the wait for the PV GEMM (intra-warpgroup overlap), when
  // Traits::kSoftmaxAheadOfPvWait (off: measured slower, see there). ptxas schedules
  // WARPGROUP.DEPBAR (wgmma.wait_group) as early as it may, and the wait depends on none of
  // the softmax's ALU work: left alone, it hoists the PV GEMM's wait above the exps. A branch
  // on a value that every exp of the block feeds (the running row sums) ends the basic block
  // there, and ptxas does not move the wait across it. The branch is never taken (sums are
  // >= 0 or NaN).
  template <int kRows>
  CUTLASS_DEVICE static void softmax_done_before_wait(float const (&row_sum)[kRows]) {
    float all = row_sum[0];
    CUTLASS_PRAGMA_UNROLL
    for (int r = 1; r < kRows; ++r) all += row_sum[r];
    if (all == -1.f) __nanosleep(0);
  }

  // The two GEMMs of a KV block, shared by mma and mma_stream: S = Q·Kᵀ (SS wgmmas over the head
  // dim into acc_s, overwritten) and O += P·V (RS wgmmas over the block's first kSteps k-steps),
  // each one commit group. tSrQ / tSrK / tOrVt: one stage of the fragments. (The SASS of the
  // kernels built before them is unchanged, instruction for instruction.)
  template <class TiledMma, class TQ, class TK, class AccS>
  CUTLASS_DEVICE static void issue_qk(TiledMma& mma, TQ const& tSrQ, TK const& tSrK, AccS& acc_s) {
    using namespace cute;
    mma.accumulate_ = GMMA::ScaleOut::Zero;
    warpgroup_fence_operand(acc_s);
    warpgroup_arrive();
    CUTLASS_PRAGMA_UNROLL
    for (int kb = 0; kb < size<2>(tSrQ); ++kb) {
      cute::gemm(mma, tSrQ(_, _, kb), tSrK(_, _, kb), acc_s);
      mma.accumulate_ = GMMA::ScaleOut::One;
    }
    warpgroup_commit_batch();
  }
  template <int kSteps = kBlockN / 16, class TiledMma, class TP, class TVt, class AccO>
  CUTLASS_DEVICE static void issue_pv(TiledMma& mma, TP& tOrP, TVt const& tOrVt, AccO& acc_o) {
    using namespace cute;
    mma.accumulate_ = GMMA::ScaleOut::One;
    warpgroup_fence_operand(acc_o);
    warpgroup_fence_operand(tOrP);
    warpgroup_arrive();
    CUTLASS_PRAGMA_UNROLL
    for (int kb = 0; kb < kSteps; ++kb) {
      cute::gemm(mma, tOrP(_, _, kb), tOrVt(_, _, kb), acc_o);
    }
    warpgroup_commit_batch();
  }

  // Traits::kTimeline (bit 23): this thread's cycle sums per tile phase (kPhase*), the tiles and
  // KV blocks it walked. mark<kPhase>() closes phase kPhase at the current cycle. The sums live
  // in local memory (an index the compiler cannot see through): only `last` stays in a register
  // across the block loop, whose SASS then stays the base's (9 live sums cost it 28
  // instructions).
  // The epilogue's pieces (session 51): finalize (row sums, LSE, O's normalisation), the LSE's
  // stores, the meet (kOInV: both warpgroups' last PV GEMMs done; else the previous store's
  // wait), and kPhaseEpilogue the rest (conversion, stmatrix, fence, barrier, the TMA store).
  enum TimelineSlot { kPhaseGap, kPhaseQWait, kPhaseFirst, kPhaseLoop, kPhaseLastPv, kPhaseEpilogue,
                      kSlotTiles, kSlotBlocks, kPhaseFinalize, kPhaseLse, kPhaseMeet, kNumSlots };
  static_assert(kNumSlots == kTimelineSlots, "timeline_buffer's row");
  struct TimelineOn {
    uint32_t last = 0;
    uint32_t sum[kNumSlots] = {};
    template <int kSlot>
    CUTLASS_DEVICE void add(uint32_t v) {
      int i;
      asm volatile("mov.b32 %0, %1;" : "=r"(i) : "n"(kSlot));
      sum[i] += v;
    }
  };
  struct TimelineOff {};
  std::conditional_t<Traits::kTimeline, TimelineOn, TimelineOff> timeline;
  template <int kPhase>
  CUTLASS_DEVICE void mark() {
    if constexpr (Traits::kTimeline) {
      const uint32_t now = static_cast<uint32_t>(clock());
      timeline.template add<kPhase>(now - timeline.last);
      timeline.last = now;
    }
  }
  // A tile's walk [n_min, n_max) begins: the gap closes, the tile and its blocks are counted.
  CUTLASS_DEVICE void mark_tile_start(int n_min, int n_max) {
    mark<kPhaseGap>();
    if constexpr (Traits::kTimeline) {
      timeline.template add<kSlotTiles>(1);
      timeline.template add<kSlotBlocks>(n_max > n_min ? n_max - n_min : 0);
    }
  }

  // Consumer: the threads of the consumer warpgroups run this per work tile and return
  // with the unnormalised O in acc_o (softmax.finalize normalises it).
  //
  // Intra-warpgroup overlap (FA3): iteration n issues S_n = Q·K_nᵀ, rescales O by block n+1's
  // softmax factor (while S_n runs), issues O += P_{n+1}·V_{n+1}, waits for S_n only and runs
  // its softmax while the PV GEMM runs (in source order; in SASS ptxas moves the PV GEMM's
  // wait ahead of the exps unless Traits::kSoftmaxAheadOfPvWait, which measured slower).
  // P_{n+1} lives in its own registers (tOrP) until its GEMM is done; block n's factor is
  // applied to O one iteration later, just before P_n·V_n is added (O then holds every earlier
  // block relative to block n's running max).
  //
  // Traits::kOInV: the V stage of the tile's last block is not released here; its index goes
  // to o_stage (-1: the tile saw no key, nothing held) for the epilogue to write O into, and
  // release_prev_o() (the caller's: frees the previous tile's O stage once its stores have read
  // it) runs right after the tile's first S GEMM is issued, when that store has long been issued.
  //
  // resume(acc_o, softmax) runs once Q's stage is full (its barrier's acquire orders what the
  // load lane waited for before the Q load): an own-shard-first second phase loads its first
  // phase's state there (attention_kernel_sm90.cuh restore_state); otherwise a no-op.
  template <bool kZZ, class AccO, class Softmax, class ReleasePrevO, class Resume>
  CUTLASS_DEVICE void mma(Params const& p, PipelineQ& pipeline_q, PipelineK& pipeline_k,
                          PipelineV& pipeline_v, StateQ& q_read, StateKV& kv_read,
                          TensorStorage& smem, WorkTile const& work, int mma_thread_idx,
                          AccO& acc_o, Softmax& softmax, int& o_stage,
                          ReleasePrevO&& release_prev_o, Resume&& resume) {
    using namespace cute;
    int n_min, n_max;
    n_block_range<kZZ>(p, work.m_block, n_min, n_max);
    piece_range(work, n_min, n_max);
    const int warp_group = mma_thread_idx / cutlass::NumThreadsPerWarpGroup;

    Tensor sQ = make_tensor(make_smem_ptr(smem.q.data()), SmemLayoutQ{});
    Tensor sK = make_tensor(make_smem_ptr(smem.k.data()), SmemLayoutK{});
    Tensor sVt = make_tensor(make_smem_ptr(smem.v.data()), SmemLayoutVt{});

    TiledMmaQK tiled_mma_qk;
    TiledMmaPV tiled_mma_pv;
    auto thr_mma_qk = tiled_mma_qk.get_thread_slice(mma_thread_idx);
    auto thr_mma_pv = tiled_mma_pv.get_thread_slice(mma_thread_idx);
    Tensor tSrQ = thr_mma_qk.make_fragment_A(thr_mma_qk.partition_A(sQ));    // (MMA, M, K)
    Tensor tSrK = thr_mma_qk.make_fragment_B(thr_mma_qk.partition_B(sK));    // (MMA, N, K, stage)
    Tensor tOrVt = thr_mma_pv.make_fragment_B(thr_mma_pv.partition_B(sVt));  // (MMA, d, N, stage)

    // Coordinates (row in tile, column in block) of each score, for masking.
    Tensor cS = make_identity_tensor(select<0, 1>(TileShapeMNK{}));
    Tensor tScS = rowcol_view(thr_mma_qk.partition_C(cS));

    clear(acc_o);
    Tensor acc_o_rc = rowcol_view(acc_o);
    Tensor acc_s = partition_fragment_C(tiled_mma_qk, select<0, 1>(TileShapeMNK{}));
    Tensor s_rc = rowcol_view(acc_s);
    static_assert(decltype(size(acc_s))::value == decltype(size(p_operand_layout()))::value,
                  "P must reuse the S accumulator's registers one to one");
    // P of the block whose PV GEMM is pending, in the A-operand layout.
    auto p_frag = make_tensor_like<Element>(acc_s);
    Tensor tOrP = make_tensor(p_frag.data(), p_operand_layout());
    float factor[decltype(size<0>(s_rc))::value];

    auto gemm_qk = [&](int stage) { issue_qk(tiled_mma_qk, tSrQ, tSrK(_, _, _, stage), acc_s); };
    auto gemm_pv = [&](int stage) { issue_pv(tiled_mma_pv, tOrP, tOrVt(_, _, _, stage), acc_o); };

    // Traits::kNarrowTop (bit 19): the PV GEMM of a top block that holds at most kNarrowN keys
    // runs its first kNarrowN / 16 k-steps only (the others multiply P = 0, exp of the masked
    // scores, by V's zero-filled rows past seq_kv: they add exact zeros).
    // Traits::kNarrowS (bit 20, with 19): the whole first step of such a block on its first
    // kNarrowN columns (first_block_narrow): the S GEMM as wgmmas of N = kNarrowN on the same
    // descriptors (a K-major descriptor holds the start and the 8-row group stride, not N: the
    // wgmma reads the stage's first kNarrowN rows) into an accumulator of their own, the mask and
    // the online softmax on those kNarrowN / 2 values per thread (the other columns are past
    // seq_kv: their P is 0 and the PV GEMM above does not read it), and P converted into the
    // first kNarrowN / 2 values of p_frag (the PV GEMM's first kNarrowN / 16 k-steps: the
    // A-operand layout takes 8 values per k-step in register order, and the SM90 accumulator
    // holds columns in groups of 8 in register order). A wgmma straight into a prefix of acc_s
    // serialized the kernel's wgmmas (ptxas C7511 / C7515). With a narrow S GEMM anywhere in the
    // kernel, ptxas keeps the main loop's Q descriptor in vector registers: +7 SASS instructions
    // per block on the fewest path (490 -> 497; bit 19 alone 491).
    [[maybe_unused]] auto first_block_narrow = [&](int stage, int nb, auto&& after_issue) {
      if constexpr (Traits::kNarrowS) {
        constexpr int kNN = Traits::kNarrowN;
        using MmaQKN = decltype(make_tiled_mma(
            GMMA::ss_op_selector<Element, Element, float, Shape<_64, Int<kNN>, Int<kHeadDim>>>(),
            typename Traits::AtomLayoutMma{}));
        static_assert(size<1>(typename MmaQKN::AtomShape_MNK{}) == kNN, "one narrow wgmma per k-step");
        MmaQKN mma_n;
        auto thr_n = mma_n.get_thread_slice(mma_thread_idx);
        Tensor acc_n = partition_fragment_C(mma_n, Shape<Int<kBlockM>, Int<kNN>>{});
        static_assert(decltype(size(acc_n))::value * kBlockN == decltype(size(acc_s))::value * kNN,
                      "the narrow S fragment is a prefix of acc_s");
        mma_n.accumulate_ = GMMA::ScaleOut::Zero;
        warpgroup_fence_operand(acc_n);
        warpgroup_arrive();
        CUTLASS_PRAGMA_UNROLL
        for (int kb = 0; kb < size<2>(tSrQ); ++kb) {
          cute::gemm(mma_n, tSrQ(_, _, kb), tSrK(_, _, kb, stage), acc_n);
          mma_n.accumulate_ = GMMA::ScaleOut::One;
        }
        warpgroup_commit_batch();
        after_issue();
        warpgroup_wait<0>();
        warpgroup_fence_operand(acc_n);
        pipeline_k.consumer_release(k_state(kv_read));
        Tensor cSn = make_identity_tensor(Shape<Int<kBlockM>, Int<kNN>>{});
        Tensor tScSn = rowcol_view(thr_n.partition_C(cSn));
        Tensor s_rc_n = rowcol_view(acc_n);
        mask_and_softmax<kZZ>(p, softmax, s_rc_n, tScSn, work.m_block, nb, factor);
        auto p_n = convert_to_element(acc_n);
        CUTLASS_PRAGMA_UNROLL
        for (int i = 0; i < size(p_n); ++i) p_frag(i) = p_n(i);
      }
    };
    // (Not through issue_pv: that moved one uniform add across a wgmma in 1738888's SASS.)
    [[maybe_unused]] auto gemm_pv_narrow = [&](int stage) {
      if constexpr (Traits::kNarrowTop) {
        tiled_mma_pv.accumulate_ = GMMA::ScaleOut::One;
        warpgroup_fence_operand(acc_o);
        warpgroup_fence_operand(tOrP);
        warpgroup_arrive();
        CUTLASS_PRAGMA_UNROLL
        for (int kb = 0; kb < Traits::kNarrowN / 16; ++kb) {
          cute::gemm(tiled_mma_pv, tOrP(_, _, kb), tOrVt(_, _, kb, stage), acc_o);
        }
        warpgroup_commit_batch();
      }
    };

    // Traits::kLeadWaitsOnly (bit 18): warpgroup 0 alone waits on the K and V full barriers;
    // the others issue after it (the ping-pong's named barriers), so the data is there.
    // (Warp-uniform through the shuffle, as FA3 takes its warpgroup index.)
    [[maybe_unused]] const bool waits_kv =
        !Traits::kLeadWaitsOnly || __shfl_sync(0xffffffffu, warp_group, 0) == 0;
    auto wait_k = [&](StateK const& s) {
      if (waits_kv) pipeline_k.consumer_wait(s);
    };
    auto wait_v = [&](StateV const& s) {
      if (waits_kv) pipeline_v.consumer_wait(s);
    };

    mark_tile_start(n_min, n_max);
    pipeline_q.consumer_wait(q_read);
    mark<kPhaseQWait>();
    resume(acc_o, softmax);
    int n = prev_block<kZZ>(p, work.m_block, n_max, n_min);
    if (n >= n_min) {
      // First block: S only (O is zero, nothing to overlap).
      // Traits::kNarrowTop: the top block holds at most kNarrowN keys (a tile's walk starts at
      // the ragged last block; the same for both warpgroups: their barriers stay paired). Its
      // P·V is the next step's PV GEMM, or the tile's last one (kNarrowS: its S GEMM here).
      [[maybe_unused]] bool pv_narrow = false;
      if constexpr (Traits::kNarrowTop) {
        pv_narrow = p.seq_kv - n * kBlockN <= Traits::kNarrowN;
      }
      wait_k(k_state(kv_read));
      scheduler_barrier_sync(warp_group);
      if constexpr (Traits::kNarrowS) {
        if (pv_narrow) {
          first_block_narrow(k_state(kv_read).index(), n, [&] {
            scheduler_barrier_arrive(warp_group);
            release_prev_o();
          });
        } else {
          gemm_qk(k_state(kv_read).index());
          scheduler_barrier_arrive(warp_group);
          release_prev_o();
          warpgroup_wait<0>();
          warpgroup_fence_operand(acc_s);
          pipeline_k.consumer_release(k_state(kv_read));
          mask_and_softmax<kZZ>(p, softmax, s_rc, tScS, work.m_block, n, factor);
          p_frag = convert_to_element(acc_s);
        }
      } else {
        gemm_qk(k_state(kv_read).index());
        scheduler_barrier_arrive(warp_group);
        if constexpr (Traits::kOInV) release_prev_o();
        warpgroup_wait<0>();
        warpgroup_fence_operand(acc_s);
        pipeline_k.consumer_release(k_state(kv_read));
        mask_and_softmax<kZZ>(p, softmax, s_rc, tScS, work.m_block, n, factor);
        p_frag = convert_to_element(acc_s);
      }
      // Late rescale: O is still zero here, and the first block's factor is 0 (max from -inf).
      if constexpr (Traits::kLateRescale) softmax.rescale(acc_o_rc, factor);
      StateV v_read = v_state(kv_read);  // V of the block in p_frag
      ++kv_read;
      mark<kPhaseFirst>();

      if constexpr (!Traits::kSplitMasked) {
        if constexpr (Traits::kNarrowTop) {
          // The step after a narrow top block, peeled: the loop below's body with the narrow
          // PV GEMM (the loop itself stays the base variant's code).
          if (pv_narrow) {
            const int nn = prev_block<kZZ>(p, work.m_block, n, n_min);
            if (nn >= n_min) {
              n = nn;
              wait_k(k_state(kv_read));
              scheduler_barrier_sync(warp_group);
              gemm_qk(k_state(kv_read).index());
              if constexpr (!Traits::kLateRescale) softmax.rescale(acc_o_rc, factor);
              wait_v(v_read);
              gemm_pv_narrow(v_read.index());
              scheduler_barrier_arrive(warp_group);
              warpgroup_wait<1>();
              warpgroup_fence_operand(acc_s);
              pipeline_k.consumer_release(k_state(kv_read));
              mask_and_softmax<kZZ>(p, softmax, s_rc, tScS, work.m_block, n, factor);
              warpgroup_wait<0>();
              warpgroup_fence_operand(acc_o);
              warpgroup_fence_operand(tOrP);
              pipeline_v.consumer_release(v_read);
              p_frag = convert_to_element(acc_s);
              if constexpr (Traits::kLateRescale) softmax.rescale(acc_o_rc, factor);
              v_read = v_state(kv_read);
              ++kv_read;
              pv_narrow = false;
            }
          }
        }
        // Every block through apply_mask (the default kernels). The split below repeats this
        // body rather than sharing it: with a shared lambda, ptxas reordered the 128x160 kernels.
        CUTLASS_PRAGMA_NO_UNROLL
        for (n = prev_block<kZZ>(p, work.m_block, n, n_min); n >= n_min;
             n = prev_block<kZZ>(p, work.m_block, n, n_min)) {
          wait_k(k_state(kv_read));
          scheduler_barrier_sync(warp_group);
          gemm_qk(k_state(kv_read).index());
          // O to the running max of the block in p_frag (its softmax's factor) while the tensor
          // cores run S_n, before that block's PV GEMM accumulates into O (Traits::kLateRescale:
          // done at the end of the previous step instead, FA3's place; measured 1-4% slower, off).
          if constexpr (!Traits::kLateRescale) softmax.rescale(acc_o_rc, factor);
          wait_v(v_read);
          gemm_pv(v_read.index());
          scheduler_barrier_arrive(warp_group);
          warpgroup_wait<1>();  // S_n ready; the PV GEMM may still run
          warpgroup_fence_operand(acc_s);
          pipeline_k.consumer_release(k_state(kv_read));
          mask_and_softmax<kZZ>(p, softmax, s_rc, tScS, work.m_block, n, factor);
          if constexpr (Traits::kSoftmaxAheadOfPvWait) softmax_done_before_wait(softmax.row_sum);
          warpgroup_wait<0>();  // PV done: O and P's registers are ours again
          warpgroup_fence_operand(acc_o);
          warpgroup_fence_operand(tOrP);
          pipeline_v.consumer_release(v_read);
          p_frag = convert_to_element(acc_s);
          if constexpr (Traits::kLateRescale) softmax.rescale(acc_o_rc, factor);
          v_read = v_state(kv_read);
          ++kv_read;
        }
      } else {
        // One KV block nb after the first: S_nb, the previous block's P·V, nb's softmax. masked:
        // through apply_mask (a block that may mask), else the softmax alone (wholly visible).
        auto kv_step = [&](int nb, auto masked) {
          wait_k(k_state(kv_read));
          scheduler_barrier_sync(warp_group);
          gemm_qk(k_state(kv_read).index());
          // O to the running max of the block in p_frag (its softmax's factor) while the tensor
          // cores run S_n, before that block's PV GEMM accumulates into O (Traits::kLateRescale:
          // done at the end of the previous step instead, FA3's place; measured 1-4% slower, off).
          if constexpr (!Traits::kLateRescale) softmax.rescale(acc_o_rc, factor);
          wait_v(v_read);
          gemm_pv(v_read.index());
          scheduler_barrier_arrive(warp_group);
          warpgroup_wait<1>();  // S_n ready; the PV GEMM may still run
          warpgroup_fence_operand(acc_s);
          pipeline_k.consumer_release(k_state(kv_read));
          if constexpr (decltype(masked)::value) {
            mask_and_softmax<kZZ>(p, softmax, s_rc, tScS, work.m_block, nb, factor);
          } else {
            softmax_visible(softmax, s_rc, factor);
          }
          if constexpr (Traits::kSoftmaxAheadOfPvWait) softmax_done_before_wait(softmax.row_sum);
          warpgroup_wait<0>();  // PV done: O and P's registers are ours again
          warpgroup_fence_operand(acc_o);
          warpgroup_fence_operand(tOrP);
          pipeline_v.consumer_release(v_read);
          p_frag = convert_to_element(acc_s);
          if constexpr (Traits::kLateRescale) softmax.rescale(acc_o_rc, factor);
          v_read = v_state(kv_read);
          ++kv_read;
        };
        // FA3's split: the blocks that may mask first (the walk's top: the diagonal block(s),
        // the ragged last block), then the wholly visible ones without mask code or divisions.
        // The same blocks in the same order as the loop above: the same result bit for bit.
        int n_mask_lo = first_masked_block<kZZ>(p, work.m_block);
        n_mask_lo = n_mask_lo > n_min ? n_mask_lo : n_min;
        CUTLASS_PRAGMA_NO_UNROLL
        for (n = prev_block<kZZ>(p, work.m_block, n, n_min); n >= n_mask_lo;
             n = prev_block<kZZ>(p, work.m_block, n, n_min)) {
          kv_step(n, cute::true_type{});
        }
        int run_lo = n >= n_min ? run_start<kZZ>(p, n, n_min) : n_min;
        CUTLASS_PRAGMA_NO_UNROLL
        for (; n >= n_min; n = prev_visible_block<kZZ>(p, work.m_block, n, n_min, run_lo)) {
          kv_step(n, cute::false_type{});
        }
      }
      // Every S GEMM of the tile has completed (each iteration ended with wait<0>): Q's stage
      // goes back to the producer now, so the next tile's Q loads under the last PV GEMM and
      // the epilogue.
      mark<kPhaseLoop>();
      pipeline_q.consumer_release(q_read);
      // Last PV GEMM.
      wait_v(v_read);
      scheduler_barrier_sync(warp_group);
      if constexpr (!Traits::kLateRescale) softmax.rescale(acc_o_rc, factor);
      if constexpr (Traits::kNarrowTop) {
        if (pv_narrow) {  // the tile (or split piece) had the narrow top block only
          gemm_pv_narrow(v_read.index());
        } else {
          gemm_pv(v_read.index());
        }
      } else {
        gemm_pv(v_read.index());
      }
      scheduler_barrier_arrive(warp_group);
      warpgroup_wait<0>();
      warpgroup_fence_operand(acc_o);
      warpgroup_fence_operand(tOrP);
      mark<kPhaseLastPv>();
      if constexpr (Traits::kOInV && !Traits::kODirect) {
        o_stage = static_cast<int>(v_read.index());  // held for O (the epilogue)
      } else {
        // Traits::kODirect: O leaves from registers (o_stage stays -1), the stage goes back now.
        pipeline_v.consumer_release(v_read);
      }
    } else {
      pipeline_q.consumer_release(q_read);  // no visible key block: nothing read Q
      if constexpr (Traits::kOInV) {
        release_prev_o();
        o_stage = -1;
      }
    }
    ++q_read;
  }

  // Consumer with the cross-tile overlap (Traits::kCrossTile): the threads of the consumer
  // warpgroups run this once per CTA over its whole static tile sequence t0, t0 + stride, ...
  // (tile_at(t): the scheduler's WorkTile; the load lane walks the same one). A tile's steps are
  // mma's, except at its end: the turn that issues its last PV GEMM first issues the next tile's
  // first S GEMM (on the next Q stage), and that block's softmax (a second softmax state) runs
  // while the PV GEMM does. Then on_tile_end(work, acc_o, softmax, o_stage) finalises and stores
  // the tile (o_stage: the V stage holding O, as mma's), and the next tile goes on from its
  // second block. The turns per tile are the same for every warpgroup (the ping-pong stays
  // paired): its first tile n_blocks + 1, every carried one n_blocks. release_prev_o (the
  // kernel's: frees the previous tile's O stage once its store has read it) runs in the first
  // turn after each epilogue, as in mma. The same blocks in the same order with the same
  // arithmetic as mma: the base variant's output bit for bit.
  template <class TileAt, class OnTileEnd, class ReleasePrevO>
  CUTLASS_DEVICE void mma_stream(Params const& p, PipelineQ& pipeline_q, PipelineK& pipeline_k,
                                 PipelineV& pipeline_v, TensorStorage& smem, int mma_thread_idx,
                                 int t0, int stride, TileAt&& tile_at, OnTileEnd&& on_tile_end,
                                 ReleasePrevO&& release_prev_o) {
    using namespace cute;
    static_assert(Traits::kCrossTile && !kCausal, "mma_stream: the cross-tile variants (bit 21)");
    // The walk's blocks are n_max - 1 down to n_min (non-causal: prev_block is n - 1), which the
    // Q release of bit 22 (kStagesQ == 1) relies on.
    static_assert(int(cosize_v<SmemLayoutQs>) == kStagesQ * kQStageElems, "Q stages back to back");
    constexpr bool kZZ = false;
    const int warp_group = mma_thread_idx / cutlass::NumThreadsPerWarpGroup;

    Tensor sQ = make_tensor(make_smem_ptr(smem.q.data()), SmemLayoutQs{});
    Tensor sK = make_tensor(make_smem_ptr(smem.k.data()), SmemLayoutK{});
    Tensor sVt = make_tensor(make_smem_ptr(smem.v.data()), SmemLayoutVt{});

    TiledMmaQK tiled_mma_qk;
    TiledMmaPV tiled_mma_pv;
    auto thr_mma_qk = tiled_mma_qk.get_thread_slice(mma_thread_idx);
    auto thr_mma_pv = tiled_mma_pv.get_thread_slice(mma_thread_idx);
    Tensor tSrQ = thr_mma_qk.make_fragment_A(thr_mma_qk.partition_A(sQ));    // (MMA, M, K, stage)
    Tensor tSrK = thr_mma_qk.make_fragment_B(thr_mma_qk.partition_B(sK));    // (MMA, N, K, stage)
    Tensor tOrVt = thr_mma_pv.make_fragment_B(thr_mma_pv.partition_B(sVt));  // (MMA, d, N, stage)

    Tensor cS = make_identity_tensor(select<0, 1>(TileShapeMNK{}));
    Tensor tScS = rowcol_view(thr_mma_qk.partition_C(cS));

    Tensor acc_o = partition_fragment_C(tiled_mma_pv, select<0, 2>(TileShapeMNK{}));
    Tensor acc_o_rc = rowcol_view(acc_o);
    Tensor acc_s = partition_fragment_C(tiled_mma_qk, select<0, 1>(TileShapeMNK{}));
    Tensor s_rc = rowcol_view(acc_s);
    static_assert(decltype(size(acc_s))::value == decltype(size(p_operand_layout()))::value,
                  "P must reuse the S accumulator's registers one to one");
    auto p_frag = make_tensor_like<Element>(acc_s);
    Tensor tOrP = make_tensor(p_frag.data(), p_operand_layout());
    constexpr int kRows = decltype(size<0>(s_rc))::value;
    float factor[kRows];
    using Softmax = OnlineSoftmax<kRows, Traits::kTreeReduce, Traits::kExpEmuPer8, Traits::kLazyRescale>;
    Softmax softmax(p.scale_log2);       // the tile's running state
    Softmax softmax_next(p.scale_log2);  // the next tile's, from its first block on

    auto gemm_qk = [&](auto q_stage, int k_stage) CUTLASS_LAMBDA_FUNC_INLINE {  // an int or cute::Int
      issue_qk(tiled_mma_qk, tSrQ(_, _, _, q_stage), tSrK(_, _, _, k_stage), acc_s);
    };
    auto gemm_pv = [&](int stage) CUTLASS_LAMBDA_FUNC_INLINE {
      issue_pv(tiled_mma_pv, tOrP, tOrVt(_, _, _, stage), acc_o);
    };
    [[maybe_unused]] const bool waits_kv =
        !Traits::kLeadWaitsOnly || __shfl_sync(0xffffffffu, warp_group, 0) == 0;
    auto wait_k = [&](StateK const& st) {
      if (waits_kv) pipeline_k.consumer_wait(st);
    };
    auto wait_v = [&](StateV const& st) {
      if (waits_kv) pipeline_v.consumer_wait(st);
    };
    // The walk of tile w: [n_min, n_max), from the top.
    auto block_range = [&](WorkTile const& w, int& n_min, int& n_max) {
      n_block_range<kZZ>(p, w.m_block, n_min, n_max);
      piece_range(w, n_min, n_max);
    };

    // The V stage of the tile's last block: held for O (bit 7: the epilogue's buffer), or with
    // bit 14 (O from registers) back to the producer at once (-1: no stage held).
    auto hold_for_o = [](PipelineV& pipe_v, StateV const& st) CUTLASS_LAMBDA_FUNC_INLINE {
      if constexpr (Traits::kODirect) {
        pipe_v.consumer_release(st);
        return -1;
      } else {
        return static_cast<int>(st.index());
      }
    };
    // K 2 + V 3 stages (Q's second stage took K's third): two pipeline states advance per block,
    // +10 SASS instructions in the block loop against 395400's one (641 vs 631, uniform-pipe
    // index and phase updates; a compile-time Q stage changes nothing there).
    StateQ q_read;
    StateKV kv_read;
    StateV v_read = v_state(kv_read);  // V of the block in p_frag
    clear(acc_o);
    bool carried = false;  // this tile's first block was done by the previous tile's last turn
    int t = t0;
    WorkTile work = tile_at(t);
    CUTLASS_PRAGMA_NO_UNROLL
    while (work.valid) {
      int n_min, n_max;
      block_range(work, n_min, n_max);
      mark_tile_start(n_min, n_max);
      int n = n_max - 1;  // non-causal: the walk's first block (done already when carried)
      if (!carried) {
        pipeline_q.consumer_wait(q_read);
        mark<kPhaseQWait>();
        if (n < n_min) {  // no key block (an empty piece): O = 0, no stage held
          pipeline_q.consumer_release(q_read);
          ++q_read;
          release_prev_o();
          on_tile_end(work, acc_o, softmax, -1);
          mark<kPhaseEpilogue>();
          softmax = Softmax(p.scale_log2);
          t += stride;
          work = tile_at(t);
          continue;
        }
        // First block: S only (O is zero, nothing to overlap).
        wait_k(k_state(kv_read));
        scheduler_barrier_sync(warp_group);
        gemm_qk(q_read.index(), k_state(kv_read).index());
        scheduler_barrier_arrive(warp_group);
        release_prev_o();
        warpgroup_wait<0>();
        warpgroup_fence_operand(acc_s);
        pipeline_k.consumer_release(k_state(kv_read));
        mask_and_softmax<kZZ>(p, softmax, s_rc, tScS, work.m_block, n, factor);
        p_frag = convert_to_element(acc_s);
        v_read = v_state(kv_read);
        ++kv_read;
        mark<kPhaseFirst>();
      }
      // One KV block nb after the first: S_nb, the previous block's P·V, nb's softmax. With
      // release_o, the turn after an epilogue: the previous tile's O stage is freed after the
      // issues (mma frees it after the tile's first S GEMM issue: the same point in time).
      auto kv_step = [&](int nb, auto release_o, auto qs) CUTLASS_LAMBDA_FUNC_INLINE {
        wait_k(k_state(kv_read));
        scheduler_barrier_sync(warp_group);
        gemm_qk(qs, k_state(kv_read).index());
        softmax.rescale(acc_o_rc, factor);
        wait_v(v_read);
        gemm_pv(v_read.index());
        scheduler_barrier_arrive(warp_group);
        if constexpr (decltype(release_o)::value) release_prev_o();
        warpgroup_wait<1>();  // S_nb ready; the PV GEMM may still run
        warpgroup_fence_operand(acc_s);
        pipeline_k.consumer_release(k_state(kv_read));
        if constexpr (kStagesQ == 1) {  // bit 22: the tile's last S GEMM is done: Q's stage back
          if (nb == n_min) pipeline_q.consumer_release(q_read);
        }
        mask_and_softmax<kZZ>(p, softmax, s_rc, tScS, work.m_block, nb, factor);
        warpgroup_wait<0>();  // PV done: O and P's registers are ours again
        warpgroup_fence_operand(acc_o);
        warpgroup_fence_operand(tOrP);
        pipeline_v.consumer_release(v_read);
        p_frag = convert_to_element(acc_s);
        v_read = v_state(kv_read);
        ++kv_read;
      };
      // The walk below the first block, on Q stage qs as a compile-time index. Written to keep Q's
      // descriptors out of the loop; the SASS count says it gains nothing (641 / 643 instructions
      // against 641 with the runtime index), so one walk on q_read.index() would do — this form
      // is the one that ran on the GPU (s49e). The lambdas called more than once are forced
      // inline: left to the inliner, this one stayed a call and its captures went to the stack.
      auto walk = [&](auto qs) CUTLASS_LAMBDA_FUNC_INLINE {
        n = n - 1;
        if (n >= n_min) {
          kv_step(n, cute::true_type{}, qs);
          --n;
        }
        CUTLASS_PRAGMA_NO_UNROLL
        for (; n >= n_min; --n) kv_step(n, cute::false_type{}, qs);
      };
      if constexpr (kStagesQ == 1) {
        walk(cute::Int<0>{});
      } else {
        if (q_read.index() == 0) {
          walk(cute::Int<0>{});
        } else {
          walk(cute::Int<1>{});
        }
      }

      mark<kPhaseLoop>();
      // Every S GEMM of the tile is done: Q's stage goes back to the producer (bit 22: already,
      // in the last block's step, unless the tile walked one block).
      if constexpr (kStagesQ == 1) {
        if (n_max - 1 == n_min) pipeline_q.consumer_release(q_read);
      } else {
        pipeline_q.consumer_release(q_read);
      }
      ++q_read;
      // The next tile's first block, if it has one, rides in this tile's last turn.
      const WorkTile next = tile_at(t + stride);
      int nn_min = 0, nn_max = 0;
      if (next.valid) block_range(next, nn_min, nn_max);
      const int nn = nn_max - 1;
      carried = next.valid && nn >= nn_min;
      int o_stage;
      if (carried) {
        pipeline_q.consumer_wait(q_read);
        wait_k(k_state(kv_read));
        scheduler_barrier_sync(warp_group);
        gemm_qk(q_read.index(), k_state(kv_read).index());
        softmax.rescale(acc_o_rc, factor);
        wait_v(v_read);
        gemm_pv(v_read.index());
        scheduler_barrier_arrive(warp_group);
        release_prev_o();  // a tile of one block: its epilogue's first turn is this one
        warpgroup_wait<1>();  // the next tile's S ready; this tile's last PV GEMM may still run
        warpgroup_fence_operand(acc_s);
        pipeline_k.consumer_release(k_state(kv_read));
        softmax_next = Softmax(p.scale_log2);
        mask_and_softmax<kZZ>(p, softmax_next, s_rc, tScS, next.m_block, nn, factor);
        warpgroup_wait<0>();
        warpgroup_fence_operand(acc_o);
        warpgroup_fence_operand(tOrP);
        o_stage = hold_for_o(pipeline_v, v_read);
        p_frag = convert_to_element(acc_s);
        v_read = v_state(kv_read);
        ++kv_read;
      } else {
        // Last PV GEMM alone (the CTA's last tile, or a next one with no key block).
        wait_v(v_read);
        scheduler_barrier_sync(warp_group);
        softmax.rescale(acc_o_rc, factor);
        gemm_pv(v_read.index());
        scheduler_barrier_arrive(warp_group);
        release_prev_o();
        warpgroup_wait<0>();
        warpgroup_fence_operand(acc_o);
        warpgroup_fence_operand(tOrP);
        o_stage = hold_for_o(pipeline_v, v_read);
      }
      mark<kPhaseLastPv>();
      on_tile_end(work, acc_o, softmax, o_stage);
      mark<kPhaseEpilogue>();
      softmax = carried ? softmax_next : Softmax(p.scale_log2);
      clear(acc_o);
      t += stride;
      work = next;
    }
  }
};

}  // namespace mkernel::attention
