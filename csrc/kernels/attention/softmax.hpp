// Online softmax of one consumer thread's rows (FlashAttention's recurrence), fp32, base 2:
// scores are kept raw; scale·log2(e) is folded into one FFMA before exp2 so the exponent is
// exp2(s·scale_log2 − m·scale_log2).
//
// Register views: a wgmma accumulator fragment ((2, 2, V), MMA_M, MMA_N) holds, per thread,
// values at rows {r, r + 8} (mode 0,1) and column pairs (mode 0,0) of V 8-column groups (mode
// 0,2). rowcol() regroups it as (rows, cols) so a row's values are one mode; a row is spread
// over the 4 threads of a quad (lanes 4q..4q+3), so row reductions end with two xor shuffles.
#pragma once

#include <cmath>

#include "cute/tensor.hpp"
#include "cutlass/cutlass.h"

namespace mkernel::attention {

// ((2, 2, V), M, N) -> ((2, M), (2, V, N))
template <class Layout>
CUTE_HOST_DEVICE constexpr auto rowcol(Layout const& l) {
  using namespace cute;
  static_assert(rank_v<Layout> == 3 && rank_v<decltype(layout<0>(l))> == 3,
                "rowcol takes a wgmma accumulator layout ((2, 2, V), MMA_M, MMA_N)");
  return make_layout(make_layout(layout<0, 1>(l), layout<1>(l)),
                     make_layout(layout<0, 0>(l), layout<0, 2>(l), layout<2>(l)));
}

template <class Tensor>
CUTE_DEVICE auto rowcol_view(Tensor&& t) {
  return cute::make_tensor(t.data(), rowcol(t.layout()));
}

CUTE_DEVICE float exp2_approx(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

CUTE_DEVICE float quad_max(float x) {
  x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 1));
  return fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 2));
}

CUTE_DEVICE float quad_sum(float x) {
  x += __shfl_xor_sync(0xffffffffu, x, 1);
  return x + __shfl_xor_sync(0xffffffffu, x, 2);
}

// exp2 on the FMA pipe (AttnTraits::kExpEmuPer8; measured 15-25% SLOWER with 2 or 4 of every
// 8 exps here, session 8 run 2: off, no kernel built with it): the MUFU unit does 16
// exp2 per clock per SM (a warp instruction occupies it 8 cycles) and, at d = 128, one
// warpgroup's softmax puts ~66 EX2 per thread through it in the window of the other
// warpgroup's two GEMMs; an FMA-pipe exp2 costs ~7 issue slots but no MUFU time.
// 2^x = 2^floor(x) * 2^f, f in [0, 1): floor by one round-down add of 1.5 * 2^23 (the sum's
// low mantissa bits are then floor(x), two's complement), 2^f by a cubic with p(0) = 1
// (max relative error 8.6e-5 on [0, 1), far below bf16's 3.9e-3 of P), and 2^floor(x) added
// to the exponent field by an integer add. x is clamped at -127 (results there are < 2^-126,
// i.e. 0 for the softmax; masked scores use the MUFU path, see OnlineSoftmax::step).
CUTE_DEVICE float exp2_fma(float x) {
  constexpr float kMagic = 12582912.f;  // 1.5 * 2^23
  x = fmaxf(x, -127.f);
  const float t = __fadd_rd(x, kMagic);
  const float f = x - (t - kMagic);
  const float p = fmaf(fmaf(fmaf(0.07706519961357117f, f, 0.22764700651168823f), f,
                            0.6951163411140442f),
                       f, 1.f);
  return __uint_as_float(__float_as_uint(p) + (__float_as_uint(t) << 23));
}

// kTreeReduce (on in the bf16 d=128 default kernel, variant 9; alone it measured -1..-4%, with
// the deep V ring +2..+9%): each row's max and sum over this thread's columns as 4 independent partial
// chains (combined at the end) instead of one dependent chain of kBlockN / 4 FMNMX / FADD —
// the max gates every exp of the row, so its chain latency sits on the softmax's critical
// path. kExpEmuPer8: of every 8 columns, this many take exp2_fma instead of MUFU.EX2 (0: none).
//
// kLazyRescale (AttnTraits variant bit 17, attn15; FA4's conditional rescaling): a row's running
// max moves only when a block raises it by more than kLazyRescaleLog2 (in log2 units of the
// scaled scores); otherwise the row keeps its stale max, its factor is exactly 1, and the
// block's probabilities exp2(s * scale_log2 - m_stale * scale_log2) may reach 2^kLazyRescaleLog2
// (= 256: bf16 and fp16 hold it with the same relative precision; the fp32 sum and O carry the
// same common factor, which finalize divides out, and the LSE is taken from the same stale max).
// rescale() then skips O's FMULs for a warp in which no row moved (a warp vote): after a tile's
// first blocks the max of random or real scores rarely climbs by 8 / scale_log2 (~63 raw units
// at d = 128), so nearly every block skips them.
inline constexpr float kLazyRescaleLog2 = 8.f;

template <int kRows, bool kTreeReduce = false, int kExpEmuPer8 = 0, bool kLazyRescale = false>
struct OnlineSoftmax {
  static_assert(kExpEmuPer8 >= 0 && kExpEmuPer8 <= 8, "kExpEmuPer8: 0..8 of every 8 columns");
  static constexpr int kExpEmu = kExpEmuPer8;
  float row_max[kRows];
  float row_sum[kRows];  // this thread's partial sums (the quad's are added in finalize)
  float scale_log2;

  CUTE_DEVICE explicit OnlineSoftmax(float scale_log2_) : scale_log2(scale_log2_) {
    CUTE_UNROLL
    for (int r = 0; r < kRows; ++r) {
      row_max[r] = -INFINITY;
      row_sum[r] = 0.f;
    }
  }

  // s_rc: scores of one KV block (rows, cols), masked entries -inf; replaced by the
  // unnormalised probabilities exp2((s - m) * scale_log2) under the updated running max m.
  // factor[r] = exp2((m_old - m) * scale_log2): what the caller must scale O's row r by
  // (rescale) before this block's P·V is added to it (and after the previous block's).
  // kMasked: the block went through apply_mask (-inf entries possible): all exps on MUFU,
  // which maps -inf to exactly 0 (rows that see no key must sum to 0).
  template <bool kMasked = true, class TensorS>
  CUTE_DEVICE void step(TensorS& s_rc, float (&factor)[kRows]) {
    using namespace cute;
    static_assert(decltype(size<0>(s_rc))::value == kRows, "rows of S");
    constexpr int kCols = decltype(size<1>(s_rc))::value;
    constexpr int kChains = kTreeReduce && kCols % 4 == 0 ? 4 : 1;
    CUTE_UNROLL
    for (int r = 0; r < kRows; ++r) {
      float mc[kChains];
      CUTE_UNROLL
      for (int i = 0; i < kChains; ++i) mc[i] = i == 0 ? fmaxf(row_max[r], s_rc(r, 0)) : s_rc(r, i);
      CUTE_UNROLL
      for (int c = kChains; c < kCols; ++c) {  // column 0 (or 0..3) is in mc already
        mc[c % kChains] = fmaxf(mc[c % kChains], s_rc(r, c));
      }
      float m = mc[0];
      CUTE_UNROLL
      for (int i = 1; i < kChains; ++i) m = fmaxf(m, mc[i]);
      m = quad_max(m);
      // kLazyRescale: keep the stale max while the block raises it by at most kLazyRescaleLog2
      // (m >= row_max[r]; the difference is NaN or +inf while the row has seen no key: moved).
      bool keep = false;
      if constexpr (kLazyRescale) {
        keep = (m - row_max[r]) * scale_log2 <= kLazyRescaleLog2;
        m = keep ? row_max[r] : m;
      }
      // A row that has seen only masked keys keeps max -inf: use 0 so that exp2 gives 0s
      // (never inf - inf).
      const float m_scaled = m == -INFINITY ? 0.f : m * scale_log2;
      factor[r] = keep ? 1.f : exp2_approx(row_max[r] * scale_log2 - m_scaled);
      row_max[r] = m;
      float sc[kChains];
      CUTE_UNROLL
      for (int i = 0; i < kChains; ++i) sc[i] = 0.f;
      CUTE_UNROLL
      for (int c = 0; c < kCols; ++c) {
        const float x = fmaf(s_rc(r, c), scale_log2, -m_scaled);
        float p;
        if constexpr (kExpEmuPer8 > 0) {
          // Spread the FMA-pipe exps evenly (ptxas interleaves them with the MUFU ones).
          const bool emu = (c % 8) * kExpEmuPer8 % 8 + kExpEmuPer8 > 7 && !kMasked;
          p = emu ? exp2_fma(x) : exp2_approx(x);
        } else {
          p = exp2_approx(x);
        }
        s_rc(r, c) = p;
        sc[c % kChains] += p;
      }
      float sum = sc[0];
      CUTE_UNROLL
      for (int i = 1; i < kChains; ++i) sum += sc[i];
      row_sum[r] = row_sum[r] * factor[r] + sum;
    }
  }

  template <class TensorO>
  CUTE_DEVICE void rescale(TensorO& o_rc, float const (&factor)[kRows]) {
    using namespace cute;
    if constexpr (kLazyRescale) {
      // Every factor of the warp exactly 1 (no row moved its max): O stays as it is. A vote, so
      // the branch is warp-uniform (the FMULs are skipped, not predicated off).
      bool moved = false;
      CUTE_UNROLL
      for (int r = 0; r < kRows; ++r) moved = moved || factor[r] != 1.f;
      if (!__any_sync(0xffffffffu, moved)) return;
    }
    CUTE_UNROLL
    for (int r = 0; r < kRows; ++r) {
      CUTE_UNROLL
      for (int c = 0; c < size<1>(o_rc); ++c) o_rc(r, c) *= factor[r];
    }
  }

  // Normalises O's rows and returns each row's natural-log LSE in lse[r]; a row with no
  // visible key gets O = 0 and lse = -inf.
  template <class TensorO>
  CUTE_DEVICE void finalize(TensorO& o_rc, float (&lse)[kRows], float scale) {
    using namespace cute;
    CUTE_UNROLL
    for (int r = 0; r < kRows; ++r) {
      const float sum = quad_sum(row_sum[r]);
      const bool empty = sum == 0.f || sum != sum;
      const float inv = empty ? 0.f : 1.f / sum;
      lse[r] = empty ? -INFINITY : row_max[r] * scale + __logf(sum);
      CUTE_UNROLL
      for (int c = 0; c < size<1>(o_rc); ++c) o_rc(r, c) *= inv;
    }
  }
};

}  // namespace mkernel::attention
