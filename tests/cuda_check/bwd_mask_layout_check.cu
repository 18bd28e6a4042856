// Host-run guard (make cuda-check): the native backward's mask (attention_bwd_sm90.cuh,
// backward_step) takes each S^T value's (key, query) as the thread's first value's plus value i's
// coordinates in thread 0's slice, which it reads as compile-time constants. That holds when the
// SdP accumulator's layout is the thread's offset plus the value's, with thread 0 at (0, 0). A
// traits change that broke it would mask the wrong entries; this checks every thread and value
// of every traits the backward instantiates, on the host (no GPU).
#include <cstdio>

#include "kernels/attention/attention_bwd_sm90_traits.hpp"

namespace {

template <class T>
int count_misplaced(const char* name) {
  using namespace cute;
  typename T::TiledMmaSdP mma;
  auto coords = make_identity_tensor(Shape<Int<T::kHalfN>, Int<T::kBlockM>>{});
  auto first = mma.get_thread_slice(0).partition_C(coords);
  int bad = 0, values = 0;
  for (int t = 0; t < 128; ++t) {
    auto mine = mma.get_thread_slice(t).partition_C(coords);
    for (int i = 0; i < size(mine); ++i, ++values) {
      const bool key_ok = get<0>(mine(i)) == get<0>(mine(0)) + get<0>(first(i));
      const bool query_ok = get<1>(mine(i)) == get<1>(mine(0)) + get<1>(first(i));
      if (!(key_ok && query_ok) && bad++ < 4) {
        std::printf("%s: thread %d value %d at (%d, %d), the offsets say (%d, %d)\n", name, t, i,
                    int(get<0>(mine(i))), int(get<1>(mine(i))),
                    int(get<0>(mine(0)) + get<0>(first(i))), int(get<1>(mine(0)) + get<1>(first(i))));
      }
    }
  }
  std::printf("%s: %d values checked, %d misplaced\n", name, values, bad);
  return bad;
}

}  // namespace

int main() {
  using mkernel::attention::bwd::BwdTraitsSm90;
  int bad = 0;
  bad += count_misplaced<BwdTraitsSm90<cutlass::bfloat16_t, 128, true, true, true, true>>("bf16 d128");
  bad += count_misplaced<BwdTraitsSm90<cutlass::bfloat16_t, 64, true, true, true, true>>("bf16 d64");
  bad += count_misplaced<BwdTraitsSm90<cutlass::half_t, 128, false>>("fp16 d128");
  bad += count_misplaced<BwdTraitsSm90<cutlass::half_t, 64, false>>("fp16 d64");
  return bad == 0 ? 0 : 1;
}
