// The forward epilogue: the normalised O tile goes registers -> shared memory (stmatrix) ->
// global (TMA stores, which clip the rows past seq_q), and the LSE of each row goes straight
// from registers to global (one thread of each quad owns a row).
//
// Each consumer warpgroup stores its own 64 rows on its own: its own region of the O buffer
// (64 x d, contiguous), its own named barrier, its own TMA store issued by its first thread.
// No barrier spans the warpgroups, so a warpgroup that finishes its tile first (the ping-pong
// keeps them half a KV block apart) stores and starts the next tile's first GEMM while the
// other still runs its last PV GEMM. The region is reused tile after tile: before writing it
// the warpgroup waits until its previous TMA store has read it.
//
// AttnTraits::kOInV (variant bit 7): no O buffer; O goes into the V stage of the tile's last KV
// block, which the mainloop holds. Both warpgroups read that stage in their last PV GEMMs, so
// here they meet once per tile (OInVStageFree) before writing it; each warpgroup's store thread
// frees the stage during the next tile, once its TMA store has read it (the kernel's
// release_prev_o). A tile that saw no key holds no stage: its O (zeros) goes from registers.
//
// AttnTraits::kODirect (variant bit 14, with bit 7; attn13, opt-in): every tile's O goes from
// registers (store_registers): no meet, no stmatrix, no TMA store; the mainloop releases the
// stage right after the last PV GEMM, so the warpgroup that finishes first goes straight on to
// the next tile's first S GEMM.
#pragma once

#include <type_traits>

#include "attention_traits.hpp"
#include "cute/tensor.hpp"
#include "cutlass/arch/barrier.h"
#include "cutlass/cutlass.h"
#include "named_barriers.hpp"
#include "softmax.hpp"
#include "tile_scheduler.hpp"

namespace mkernel::attention {

// store's points for the timeline builds (AttnTraits bit 23): on_mark(StorePoint constant) after
// the LSE's stores and after the meet (the wait before O may be written).
enum StorePoint : int { kStoreAfterLse = 0, kStoreAfterMeet = 1 };
struct NoStoreMarks {
  template <class Point>
  CUTLASS_DEVICE void operator()(Point) const {}
};

template <class Traits>
struct EpilogueFwdSm90 {
  using Element = typename Traits::Element;
  static constexpr int kBlockM = Traits::kBlockM;
  static constexpr int kHeadDim = Traits::kHeadDim;
  static constexpr int kNumMmaThreads = Traits::kNumMmaThreads;
  static constexpr int kNumWG = Traits::kNumMmaWarpGroups;
  using TiledMmaPV = typename Traits::TiledMmaPV;
  using TileShapeMD = cute::Shape<cute::Int<kBlockM>, cute::Int<kHeadDim>>;
  // One warpgroup's rows: 64 x d, the unit of a TMA store.
  using TileShapeWG = cute::Shape<cute::_64, cute::Int<kHeadDim>>;
  using SmemLayoutOWG = decltype(cute::tile_to_shape(cute::GMMA::Layout_K_SW128_Atom<Element>{},
                                                     TileShapeWG{}));
  // The whole tile as the accumulator sees it: warpgroup g's rows [64g, 64g + 64) are the
  // contiguous block g of SmemLayoutOWG (the swizzle only touches offset bits inside a block).
  using SmemLayoutO = decltype(cute::tile_to_shape(SmemLayoutOWG{}, TileShapeMD{}));
  static constexpr int kWGElems = int(cute::cosize_v<SmemLayoutOWG>);
  static_assert(int(cute::cosize_v<SmemLayoutO>) == kNumWG * kWGElems, "one block per warpgroup");

  using ShapeSeqD = cute::Shape<int32_t, int32_t, cute::Shape<int32_t, int32_t>>;
  using StrideSeqD = cute::Stride<int64_t, cute::_1, cute::Stride<int64_t, int64_t>>;
  using TmaO = decltype(cute::make_tma_copy(
      cute::SM90_TMA_STORE{},
      cute::make_tensor(cute::make_gmem_ptr(static_cast<Element*>(nullptr)), ShapeSeqD{},
                        StrideSeqD{}),
      SmemLayoutOWG{}, TileShapeWG{}, cute::_1{}));

  // Traits::kOInV: no buffer of its own (O goes into a V stage the mainloop holds).
  struct TensorStorageO {
    cute::array_aligned<Element, cute::cosize_v<SmemLayoutO>, 1024> o;
  };
  struct TensorStorageNone {};
  using TensorStorage = std::conditional_t<Traits::kOInV, TensorStorageNone, TensorStorageO>;
  static constexpr int kOElems = int(cute::cosize_v<SmemLayoutO>);
  CUTLASS_DEVICE static Element* o_data(TensorStorage& smem) {
    if constexpr (Traits::kOInV) return nullptr;
    else return smem.o.data();
  }

  struct Arguments {
    Element* out;
    float* lse;
    int batch, seq_q, heads;
    int64_t out_batch_stride = 0;  // elements; 0: dense (seq_q * heads * d)
    int64_t lse_head_stride = 0;   // elements between lse rows (b, h); 0: seq_q
    // Traits::kSplitTail: the pieces' partial O (fp32, [slot][kBlockM][d]) and LSE
    // ([slot][kBlockM]).
    float* split_o = nullptr;
    float* split_lse = nullptr;
  };

  struct Params {
    TmaO tma_o;
    ShapeSeqD shape_o;
    float* lse;
    int seq_q, heads;
    int64_t lse_head_stride;
    Element* out;             // the register path of store (kOInV, a tile that saw no key)
    int64_t out_batch_stride;  // elements
    float* split_o;
    float* split_lse;
  };

  static Params to_underlying_arguments(Arguments const& a) {
    using namespace cute;
    const int64_t d = kHeadDim;
    ShapeSeqD shape_o = make_shape(a.seq_q, int32_t(kHeadDim), make_shape(a.heads, a.batch));
    const int64_t o_bs =
        a.out_batch_stride > 0 ? a.out_batch_stride : int64_t(a.seq_q) * a.heads * d;
    StrideSeqD stride_o = make_stride(int64_t(a.heads) * d, _1{}, make_stride(d, o_bs));
    Tensor mO = make_tensor(make_gmem_ptr(a.out), make_layout(shape_o, stride_o));
    return {make_tma_copy(SM90_TMA_STORE{}, mO, SmemLayoutOWG{}, TileShapeWG{}, _1{}), shape_o, a.lse,
            a.seq_q, a.heads, a.lse_head_stride > 0 ? a.lse_head_stride : int64_t(a.seq_q), a.out,
            o_bs, a.split_o, a.split_lse};
  }

  CUTLASS_DEVICE static void prefetch_tma_descriptors(Params const& p) {
    cute::prefetch_tma_descriptor(p.tma_o.get_tma_descriptor());
  }

  // All consumer threads. acc_o: normalised O (fp32); lse: this thread's rows' LSE. smem_o:
  // the O buffer (o_data, or with Traits::kOInV the V stage the mainloop holds; nullptr: the
  // tile saw no key and O goes straight from registers to global, no stage being held).
  template <class AccO, int kRows, class OnMark = NoStoreMarks>
  CUTLASS_DEVICE void store(Params const& p, Element* smem_o, WorkTile const& work,
                            int mma_thread_idx, AccO const& acc_o, float const (&lse)[kRows],
                            OnMark const& on_mark = OnMark{}) {
    using namespace cute;
    if constexpr (Traits::kSplitTail) {
      if (work.slot >= 0) {
        store_piece(p, work.slot, mma_thread_idx, acc_o, lse);
        return;
      }
    }
    TiledMmaPV tiled_mma_pv;
    auto thr_mma_pv = tiled_mma_pv.get_thread_slice(mma_thread_idx);

    // LSE: rows of this thread (identity coordinates of its accumulator values).
    Tensor cO = make_identity_tensor(TileShapeMD{});
    Tensor tOcO = rowcol_view(thr_mma_pv.partition_C(cO));
    static_assert(decltype(size<0>(tOcO))::value == kRows, "one LSE per accumulator row");
    if (mma_thread_idx % 4 == 0) {
      float* lse_bh =
          p.lse + (static_cast<int64_t>(work.batch) * p.heads + work.head) * p.lse_head_stride;
      CUTLASS_PRAGMA_UNROLL
      for (int r = 0; r < kRows; ++r) {
        const int row = work.m_block * kBlockM + get<0>(tOcO(r, 0));
        if (row < p.seq_q) lse_bh[row] = lse[r];
      }
    }
    on_mark(std::integral_constant<int, kStoreAfterLse>{});

    const int warp_group = mma_thread_idx / cutlass::NumThreadsPerWarpGroup;
    const bool store_thread = mma_thread_idx % cutlass::NumThreadsPerWarpGroup == 0;
    const uint32_t barrier = barrier_id(epilogue_barrier(warp_group));
    Tensor rO = make_tensor_like<Element>(acc_o);
    auto convert_o = [&] {
      CUTLASS_PRAGMA_UNROLL
      for (int i = 0; i < size(acc_o); ++i) rO(i) = static_cast<Element>(acc_o(i));
    };
    if constexpr (Traits::kODirect) {
      // Traits::kODirect: every tile's O from registers, no shared memory, no barrier.
      convert_o();
      store_registers(p, work, thr_mma_pv, rO);
      return;
    } else if constexpr (Traits::kOInV) {
      convert_o();
      if (smem_o == nullptr) {
        // No key seen (O = 0), no V stage held: each thread stores its values (rows < seq_q).
        Tensor tOcO_all = thr_mma_pv.partition_C(cO);
        Element* o_bh = p.out + static_cast<int64_t>(work.batch) * p.out_batch_stride +
                        static_cast<int64_t>(work.head) * kHeadDim;
        CUTLASS_PRAGMA_UNROLL
        for (int i = 0; i < size(rO); ++i) {
          const int row = work.m_block * kBlockM + get<0>(tOcO_all(i));
          if (row < p.seq_q) o_bh[static_cast<int64_t>(row) * p.heads * kHeadDim + get<1>(tOcO_all(i))] = rO(i);
        }
        return;
      }
      // The other warpgroup's last PV GEMM may still read this V stage.
      cutlass::arch::NamedBarrier::sync(kNumMmaThreads, barrier_id(AttnBarrier::OInVStageFree));
    } else {
      // O: this warpgroup's first thread waits until its previous store has read the region.
      if (store_thread) tma_store_wait<0>();
      cutlass::arch::NamedBarrier::sync(cutlass::NumThreadsPerWarpGroup, barrier);
      convert_o();
    }
    on_mark(std::integral_constant<int, kStoreAfterMeet>{});

    Tensor sO = make_tensor(make_smem_ptr(smem_o), SmemLayoutO{});
    auto smem_copy = make_tiled_copy_C(Copy_Atom<SM90_U32x4_STSM_N, Element>{}, tiled_mma_pv);
    auto thr_copy = smem_copy.get_thread_slice(mma_thread_idx);
    cute::copy(smem_copy, thr_copy.retile_S(rO), thr_copy.partition_D(sO));
    // Generic-proxy writes of sO before the async-proxy (TMA) read of it.
    cutlass::arch::fence_view_async_shared();
    cutlass::arch::NamedBarrier::sync(cutlass::NumThreadsPerWarpGroup, barrier);

    if (store_thread) {
      Tensor sO_wg = make_tensor(make_smem_ptr(smem_o + warp_group * kWGElems), SmemLayoutOWG{});
      Tensor mO = p.tma_o.get_tma_tensor(p.shape_o);
      Tensor gO = local_tile(mO(_, _, make_coord(work.head, work.batch)), TileShapeWG{},
                             make_coord(work.m_block * kNumWG + warp_group, _0{}));
      auto [tOgO, tOsO] = tma_partition(p.tma_o, _0{}, Layout<_1>{}, group_modes<0, 2>(sO_wg),
                                        group_modes<0, 2>(gO));
      copy(p.tma_o, tOsO, tOgO);
      tma_store_arrive();
    }
  }

  // Traits::kODirect: this thread's O values (Element, the PV accumulator's layout) straight to
  // global, rows past seq_q skipped. Values 2i, 2i + 1 of a wgmma accumulator are columns c,
  // c + 1 (c even) of one row: one 32-bit store per pair. A warp's store covers 8 rows x 16
  // bytes; the row's other 16 bytes of each 32-byte sector come from the next column group's
  // store, merged in L2 (O is 1/(2 n_blocks) of the tile's smem traffic: the sector use does not
  // matter, the issue slots do: 32 stores per thread per tile instead of stmatrix + a barrier).
  template <class ThrMma, class RegO>
  CUTLASS_DEVICE static void store_registers(Params const& p, WorkTile const& work,
                                             ThrMma const& thr_mma_pv, RegO const& rO) {
    using namespace cute;
    // (rows, cols) views: a thread's kRows rows, each its values as column pairs (rowcol's first
    // column mode). One row test and one row pointer per row; the columns are the thread's
    // base column plus compile-time offsets (immediates of the stores).
    Tensor rO_rc = make_tensor(rO.data(), rowcol(rO.layout()));
    Tensor tOcO_rc = rowcol_view(thr_mma_pv.partition_C(make_identity_tensor(TileShapeMD{})));
    constexpr int kRows = decltype(size<0>(rO_rc))::value;
    constexpr int kCols = decltype(size<1>(rO_rc))::value;
    static_assert(kCols % 2 == 0, "column pairs");
    Element* o_bh = p.out + static_cast<int64_t>(work.batch) * p.out_batch_stride +
                    static_cast<int64_t>(work.head) * kHeadDim;
    const int64_t row_stride = static_cast<int64_t>(p.heads) * kHeadDim;
    CUTLASS_PRAGMA_UNROLL
    for (int r = 0; r < kRows; ++r) {
      const int row = work.m_block * kBlockM + get<0>(tOcO_rc(r, 0));
      if (row < p.seq_q) {
        // The thread's first column in the pointer; the others as differences to it, which
        // fold to constants (without this ptxas formed a 64-bit address per store).
        const int col0 = get<1>(tOcO_rc(r, 0));
        Element* o_thr = o_bh + row * row_stride + col0;
        CUTLASS_PRAGMA_UNROLL
        for (int c = 0; c < kCols; c += 2) {
          uint32_t pair;
          Element const two[2] = {rO_rc(r, c), rO_rc(r, c + 1)};
          memcpy(&pair, two, sizeof(pair));
          *reinterpret_cast<uint32_t*>(o_thr + (get<1>(tOcO_rc(r, c)) - col0)) = pair;
        }
      }
    }
  }

  // Traits::kSplitTail: a piece's normalised O and LSE (every row of the tile, also rows past
  // seq_q: the merge skips them) straight from registers to workspace slot `slot`, fp32. No
  // shared memory: with kOInV the V stage the mainloop holds is freed as after a TMA store
  // (release_prev_o; there is no store to wait for).
  template <class AccO, int kRows>
  CUTLASS_DEVICE static void store_piece(Params const& p, int slot, int mma_thread_idx,
                                         AccO const& acc_o, float const (&lse)[kRows]) {
    using namespace cute;
    TiledMmaPV tiled_mma_pv;
    auto thr_mma_pv = tiled_mma_pv.get_thread_slice(mma_thread_idx);
    Tensor cO = make_identity_tensor(TileShapeMD{});
    Tensor tOcO = thr_mma_pv.partition_C(cO);
    float* o_ws = p.split_o + static_cast<int64_t>(slot) * kBlockM * kHeadDim;
    // Values 2i, 2i + 1 of a wgmma accumulator are columns c, c + 1 (c even) of one row.
    static_assert(decltype(size(acc_o))::value % 2 == 0, "column pairs");
    CUTLASS_PRAGMA_UNROLL
    for (int i = 0; i < size(acc_o); i += 2) {
      const int row = get<0>(tOcO(i));
      const int col = get<1>(tOcO(i));
      *reinterpret_cast<float2*>(o_ws + row * kHeadDim + col) = make_float2(acc_o(i), acc_o(i + 1));
    }
    if (mma_thread_idx % 4 == 0) {
      Tensor tOcO_rc = rowcol_view(tOcO);
      float* lse_ws = p.split_lse + static_cast<int64_t>(slot) * kBlockM;
      CUTLASS_PRAGMA_UNROLL
      for (int r = 0; r < kRows; ++r) lse_ws[get<0>(tOcO_rc(r, 0))] = lse[r];
    }
  }

  // After the last tile: each issuing thread waits for its stores to leave shared memory before
  // the CTA exits.
  CUTLASS_DEVICE static void store_tail(int mma_thread_idx) {
    if (mma_thread_idx % cutlass::NumThreadsPerWarpGroup == 0) cute::tma_store_wait<0>();
  }
};

}  // namespace mkernel::attention
