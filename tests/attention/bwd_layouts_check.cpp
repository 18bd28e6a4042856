// Host-side check of the native backward's shared-memory views and accumulator fragments
// (csrc/kernels/attention/attention_bwd_traits.hpp), run by test_attention_bwd_layouts.py on the
// CPU: the transposed views address the same bytes as the stored layouts with the coordinates
// swapped; 8-element runs stay contiguous under the swizzle (cp.async 16-byte chunks, 32-bit P/dS
// pair stores); flat fragment values 2j, 2j + 1 are (row, col), (row, col + 1) for every thread
// (the pair stores and float2 dQ atomics rely on it); the S tile is covered exactly once.
// Prints "BAD n" per failed check and exits nonzero if any.
#include <cstdio>
#include "kernels/attention/attention_bwd_traits.hpp"
using namespace cute;
template <class A, class At>
int check(int R, int C) {
  A a{}; At at{}; int bad = 0;
  for (int r = 0; r < R; ++r) for (int c = 0; c < C; ++c) if (a(r, c) != at(c, r)) ++bad;
  // pairs adjacent, 8-runs contiguous
  for (int r = 0; r < R; ++r) for (int c = 0; c < C; c += 8) for (int k = 1; k < 8; ++k) if (a(r, c + k) != a(r, c) + k) ++bad;
  return bad;
}
template <int kHeadDim>
int check_traits() {
  using T = mkernel::attention::bwd::BwdTraits<cutlass::bfloat16_t, kHeadDim, 64, 64, 8, true>;
  int total = 0;
  const int qt = check<typename T::SmemLayoutQ, typename T::SmemLayoutQt>(64, kHeadDim);
  const int kt = check<typename T::SmemLayoutKV, typename T::SmemLayoutKt>(64, kHeadDim);
  const int pt = check<typename T::SmemLayoutPdS, typename T::SmemLayoutPdSt>(64, 64);
  printf("d=%d Qt %d Kt %d PdSt %d\n", kHeadDim, qt, kt, pt);
  total += qt + kt + pt;
  // C fragment: value 2j+1 is (r, c+1) of value 2j, for every thread
  typename T::TiledMmaSdP mma;
  int bad = 0;
  for (int t = 0; t < 256; ++t) {
    auto cs = mma.get_slice(t).partition_C(make_identity_tensor(Shape<_64, _64>{}));
    for (int j = 0; j < size(cs) / 2; ++j)
      if (get<0>(cs(2*j+1)) != get<0>(cs(2*j)) || get<1>(cs(2*j+1)) != get<1>(cs(2*j)) + 1 || get<1>(cs(2*j)) % 2) ++bad;
  }
  typename T::TiledMmadQ mq;
  for (int t = 0; t < 256; ++t) {
    auto cs = mq.get_slice(t).partition_C(make_identity_tensor(Shape<_64, Int<kHeadDim>>{}));
    for (int j = 0; j < size(cs) / 2; ++j)
      if (get<0>(cs(2*j+1)) != get<0>(cs(2*j)) || get<1>(cs(2*j+1)) != get<1>(cs(2*j)) + 1) ++bad;
  }
  // every (r,c) of the 64x64 S tile covered exactly once across threads
  int cover[64][64] = {};
  for (int t = 0; t < 256; ++t) { auto cs = mma.get_slice(t).partition_C(make_identity_tensor(Shape<_64, _64>{}));
    for (int i = 0; i < size(cs); ++i) cover[get<0>(cs(i))][get<1>(cs(i))]++; }
  for (auto& row : cover) for (int v : row) if (v != 1) ++bad;
  printf("d=%d pairs/cover %d\n", kHeadDim, bad);
  return total + bad;
}

int main() {
  const int bad = check_traits<128>() + check_traits<64>();
  if (bad) printf("BAD %d\n", bad);
  return bad ? 1 : 0;
}
