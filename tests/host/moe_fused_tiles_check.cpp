// Host check of the MoE fused dispatch's tile numbering (kernels/moe/moe_fused_tiles.h, what its
// side warps walk to expand each M tile and release its flag) against the packed scheduler's own
// (kernels/gemm/tile_scheduler.hpp Work::tile, the flag its producer waits for), over random row
// segments (3 E_l groups with group_b_head = E_l, groups_per_b 2; empty groups, gaps, partial
// tiles) and the cluster shapes of the packed configs (1x2, 2x1). For every unit the scheduler
// hands out: the walk puts its tile in a group starting at the unit's row_offset, with B matrix
// b_of(group) = the unit's batch and m_block = tile - the group's first tile; the tiles with rows
// are exactly the walk's tiles with rows, each with every N unit; the total is below
// moe_fused::tile_flags' bound. Prints "OK" (exit 0) or the first mismatch (exit 1).
#include <cstdint>
#include <cstdio>
#include <map>
#include <random>
#include <set>
#include <utility>
#include <vector>

// The scheduler's device-side helpers name CUDA's built-ins: host stand-ins.
struct HostDim3 {
  unsigned x = 0, y = 0;
};
static HostDim3 blockIdx, gridDim;
template <class T>
static T __ldg(const T* p) {
  return *p;
}
template <class T>
static T min(T a, T b) {
  return a < b ? a : b;
}

#include "kernels/gemm/tile_scheduler.hpp"
#include "kernels/moe/moe_fused_tiles.h"

namespace {

int fail(const char* what, int a, int b) {
  std::printf("mismatch: %s (%d vs %d)\n", what, a, b);
  return 1;
}

template <int kCM, int kCN>
int check(std::mt19937& rng, int el, int units_n, int rows_out) {
  using Tile = cute::Shape<cute::Int<128>, cute::Int<128>, cute::Int<64>>;
  using Cluster = cute::Shape<cute::Int<kCM>, cute::Int<kCN>, cute::_1>;
  using Sched = mkernel::gemm::PersistentTileScheduler<Tile, Cluster, true>;
  // 3 E_l segments over [0, rows_out): per expert the peers before, own, peers after (the
  // dispatch's layout order), group order own (E_l), then before / after per expert.
  std::vector<int> begin(3 * el), end(3 * el);
  std::uniform_int_distribution<int> len(0, 400);
  int row = 0;
  for (int x = 0; x < el; ++x) {
    const int nb = rng() % 4 == 0 ? 0 : len(rng), no = rng() % 4 == 0 ? 0 : len(rng),
              na = rng() % 4 == 0 ? 0 : len(rng);
    begin[el + 2 * x] = row;
    end[el + 2 * x] = row += nb;
    begin[x] = row;
    end[x] = row += no;
    begin[el + 2 * x + 1] = row;
    end[el + 2 * x + 1] = row += na;
  }
  const int m = row > rows_out ? row : rows_out;
  auto sp = Sched::make_params(m, units_n * kCN * 128, 4096, 8, true, nullptr, 3 * el, nullptr, 1,
                               end.data(), begin.data(), 2, el);
  auto rows_of = [&](int i) { return end[i] - begin[i]; };
  // Every tile with rows, as the walk numbers it: tile -> (group, m_block).
  std::map<int, std::pair<int, int>> walk_tiles;
  int total = 0;
  for (int i = 0; i < 3 * el; ++i) {
    const int n = mkernel::moe_fused::group_tiles<128, kCM>(rows_of(i));
    for (int t = 0; t < n; ++t) {
      if (t * 128 < rows_of(i)) walk_tiles[total + t] = {i, t};
    }
    total += n;
  }
  if (total > mkernel::moe_fused::tile_flags(m, el, kCM))
    return fail("tiles above the bound", total, 0);
  std::map<int, int> seen;  // tile -> N units that waited for it
  for (unsigned rank_m = 0; rank_m < kCM; ++rank_m) {
    for (unsigned rank_n = 0; rank_n < kCN; ++rank_n) {
      blockIdx.x = rank_m;
      blockIdx.y = rank_n;
      typename Sched::Cursor cursor;
      mkernel::moe_fused::TileWalk w;
      for (int u = 0; u < Sched::total_units(sp); ++u) {
        const auto work = Sched::get(sp, u, cursor);
        if (!work.valid) break;
        if (work.m_block * 128 >= work.rows) continue;  // no rows: the producer does not wait
        mkernel::moe_fused::seek<128, kCM>(w, work.tile, rows_of);
        if (begin[w.group] != work.row_offset)
          return fail("row_offset", begin[w.group], work.row_offset);
        if (Sched::b_of(sp, w.group) != work.batch)
          return fail("batch", Sched::b_of(sp, w.group), work.batch);
        if (work.tile - w.first != work.m_block)
          return fail("m_block", work.tile - w.first, work.m_block);
        if (rows_of(w.group) != work.rows) return fail("rows", rows_of(w.group), work.rows);
        const int b_expect = w.group < el ? w.group : (w.group - el) / 2;
        if (work.batch != b_expect) return fail("expert", work.batch, b_expect);
        ++seen[work.tile];
      }
    }
  }
  if (seen.size() != walk_tiles.size()) {
    return fail("tiles with rows", static_cast<int>(seen.size()),
                static_cast<int>(walk_tiles.size()));
  }
  for (const auto& [tile, n] : seen) {
    if (!walk_tiles.count(tile)) return fail("a waited tile the walk has no rows for", tile, 0);
    if (n != units_n * kCN) return fail("N tiles per M tile", n, units_n * kCN);
  }
  return 0;
}

}  // namespace

int main() {
  std::mt19937 rng(12345);
  for (int it = 0; it < 300; ++it) {
    const int el = 1 + static_cast<int>(rng() % 9);
    const int units_n = 1 + static_cast<int>(rng() % 4);
    const int rows_out = static_cast<int>(rng() % 4000);
    if (check<1, 2>(rng, el, units_n, rows_out) || check<2, 1>(rng, el, units_n, rows_out)) {
      std::printf("(iteration %d, E_l %d)\n", it, el);
      return 1;
    }
  }
  std::printf("OK\n");
  return 0;
}
