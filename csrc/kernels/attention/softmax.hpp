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

template <int kRows>
struct OnlineSoftmax {
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
  template <class TensorS>
  CUTE_DEVICE void step(TensorS& s_rc, float (&factor)[kRows]) {
    using namespace cute;
    static_assert(decltype(size<0>(s_rc))::value == kRows, "rows of S");
    CUTE_UNROLL
    for (int r = 0; r < kRows; ++r) {
      float m = row_max[r];
      CUTE_UNROLL
      for (int c = 0; c < size<1>(s_rc); ++c) m = fmaxf(m, s_rc(r, c));
      m = quad_max(m);
      // A row that has seen only masked keys keeps max -inf: use 0 so that exp2 gives 0s
      // (never inf - inf).
      const float m_scaled = m == -INFINITY ? 0.f : m * scale_log2;
      factor[r] = exp2_approx(row_max[r] * scale_log2 - m_scaled);
      row_max[r] = m;
      float sum = 0.f;
      CUTE_UNROLL
      for (int c = 0; c < size<1>(s_rc); ++c) {
        const float p = exp2_approx(fmaf(s_rc(r, c), scale_log2, -m_scaled));
        s_rc(r, c) = p;
        sum += p;
      }
      row_sum[r] = row_sum[r] * factor[r] + sum;
    }
  }

  template <class TensorO>
  CUTE_DEVICE void rescale(TensorO& o_rc, float const (&factor)[kRows]) {
    using namespace cute;
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
