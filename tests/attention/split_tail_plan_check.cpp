// Host check of the split-tail schedule (tile_scheduler.hpp, variant bit 11): prints, for the
// shapes given on stdin as "b s s_kv h sm_count", the plan (full_tiles, splits) of
// make_params + set_split_tail and the (m_block, head, batch) of every tail tile by get_linear,
// for test_split_tail_plan.py to compare with its Python mirror (split_tail_plan.py), which the
// GPU test uses to locate the merged rows. get() itself is device code; its piece arithmetic is
// the mirror's piece_range.
#include <cstdio>

// The scheduler's device-only helpers name CUDA's built-ins; host stand-ins (never called here).
struct HostDim3 {
  unsigned x = 0;
};
static HostDim3 blockIdx, gridDim;

#include "kernels/attention/tile_scheduler.hpp"

int main() {
  using Sched = mkernel::attention::PersistentTileScheduler<false, false, true>;
  int b, s, s_kv, h, sms;
  while (std::scanf("%d %d %d %d %d", &b, &s, &s_kv, &h, &sms) == 5) {
    const int m_blocks = (s + 127) / 128;
    auto p = Sched::make_params(m_blocks, h, b, 2ll * s_kv * 128 * 2);
    const int grid = Sched::grid_size(p, sms);
    const int pieces = Sched::set_split_tail(p, grid, (s_kv + 127) / 128, sms);
    std::printf("plan %d %d %d\n", p.full_tiles, pieces > 0 ? p.splits : 0, Sched::items(p));
    if (pieces > 0) {
      for (int t = p.full_tiles; t < p.tiles; ++t) {
        const auto w = Sched::get_linear(p, t);
        std::printf("tile %d %d %d\n", w.m_block, w.head, w.batch);
      }
    }
  }
  return 0;
}
