// Host-side check of the wgmma backward's shared-memory views and fragment assumptions
// (csrc/kernels/attention/attention_bwd_sm90_traits.hpp), run by test_attention_bwd_layouts.py
// on the CPU:
//  - the transposed views (Q^T, dO^T, K-block^T, dS^T) address the bytes of the stored layouts
//    with the coordinates swapped;
//  - column block c of a 64 x d K half is the 64 x 64 K-block layout 64 * 64 * c elements in;
//  - stage s of the staged Q / dO layout is the 64 x d rows layout s * 64 * d elements in;
//  - 8-element runs stay contiguous under the swizzle (cp.async chunks; dS pair stores);
//  - the S^T accumulator's flat values 2j, 2j + 1 are (key, query), (key, query + 1), every
//    (key, query) of the 64 x 64 tile held by exactly one thread of the warpgroup, and the
//    accumulator reread through a_operand_layout() holds, value for value, the (key, query)
//    coordinates the RS GEMM's A fragment expects (dV += P^T dO, dK += dS^T Q);
//  - dQ's and dK/dV's accumulators hold column pairs too (float2 atomics, pair stores);
//  - the bulk kernel's tiled dq_accum layout covers the padded workspace exactly once;
//  - the ring mode's ring_rule is the zigzag layout's causal mask; on arrival, its CTA order
//    (ring_arrival_z) and virtual K/V index (ring_kv_index) match the whole mode's layout;
//  - bwd_tile_coord (the dQ-warp kernel's causal CTA order) visits every (key block, kv head x
//    batch) pair once, a section's pairs together, key blocks in ascending order (the longest
//    CTAs first) inside a section; bwd_tile_sections is a power of 2 within the pairs and L2.
// Prints "BAD n" per failed check and exits nonzero if any.
#include <cstdio>
#include <vector>

#include "kernels/attention/attention_bwd_api.h"
#include "kernels/attention/attention_bwd_sm90_traits.hpp"
#include "kernels/ring_attention/ring_kv_api.h"
using namespace cute;

// dq_tiled_offset: a bijection of (bh, row < s padded to 64, col < d) onto dq_accum_floats, and
// each 64 x 64 tile's start is 16-byte aligned (the bulk reduce-add's requirement).
int check_dq_tiles() {
  int bad = 0;
  for (int d : {64, 128})
    for (int s : {1, 63, 64, 65, 200}) {
      const int bhs = 3;
      const long long n = mkernel::attention::dq_accum_floats(1, bhs, s, d);
      std::vector<int> seen(n, 0);
      const int s_pad = (s + 63) / 64 * 64;
      for (int bh = 0; bh < bhs; ++bh)
        for (int r = 0; r < s_pad; ++r)
          for (int c = 0; c < d; ++c) {
            const long long o = mkernel::attention::dq_tiled_offset(bh, r, c, s, d);
            if (o < 0 || o >= n) {
              ++bad;
              continue;
            }
            ++seen[o];
            if (r % 64 == 0 && c % 64 == 0 && o % 4) ++bad;
          }
      for (int v : seen)
        if (v != 1) ++bad;
    }
  printf("dq tiles %d\n", bad);
  return bad;
}

template <class A, class At>
int transposed(int R, int C, int off = 0) {
  A a{};
  At at{};
  int bad = 0;
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < C; ++c)
      if (a(r, c) + off != at(c, r)) ++bad;
  return bad;
}

template <class A>
int runs8(int R, int C) {
  A a{};
  int bad = 0;
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < C; c += 8)
      for (int k = 1; k < 8; ++k)
        if (a(r, c + k) != a(r, c) + k) ++bad;
  return bad;
}

template <class Mma, int M, int N>
int pairs(const Mma& mma) {
  int bad = 0;
  for (int t = 0; t < 128; ++t) {
    auto cs = mma.get_slice(t).partition_C(make_identity_tensor(Shape<Int<M>, Int<N>>{}));
    for (int j = 0; j < size(cs) / 2; ++j)
      if (get<0>(cs(2 * j + 1)) != get<0>(cs(2 * j)) ||
          get<1>(cs(2 * j + 1)) != get<1>(cs(2 * j)) + 1 || get<1>(cs(2 * j)) % 2)
        ++bad;
  }
  return bad;
}

template <int kHeadDim>
int check_traits() {
  using T = mkernel::attention::bwd::BwdTraitsSm90<cutlass::bfloat16_t, kHeadDim, true>;
  int bad = 0;
  // Q^T per stage.
  {
    typename T::SmemLayoutQ q{};
    typename T::SmemLayoutQt qt{};
    int b = 0;
    for (int s = 0; s < T::kStages; ++s)
      for (int r = 0; r < T::kBlockM; ++r)
        for (int c = 0; c < kHeadDim; ++c)
          if (q(r, c, s) != qt(c, r, s)) ++b;
    // Stage s of the staged layout is the 64 x d rows layout s * kQElems in (the warp-
    // specialized producer writes the K / V halves, ss.k[h], through the staged layout).
    typename T::SmemLayoutRows rows{};
    for (int st = 0; st < T::kStages; ++st)
      for (int r = 0; r < T::kBlockM; ++r)
        for (int c = 0; c < kHeadDim; ++c)
          if (q(r, c, st) != st * T::kQElems + rows(r, c)) ++b;
    printf("d=%d Qt %d\n", kHeadDim, b);
    bad += b;
  }
  // K half column blocks vs the K-block layout; its transpose.
  {
    typename T::SmemLayoutRows rows{};
    typename T::SmemLayoutKBlock blk{};
    int b = 0;
    for (int c = 0; c < kHeadDim / 64; ++c)
      for (int r = 0; r < 64; ++r)
        for (int j = 0; j < 64; ++j)
          if (rows(r, 64 * c + j) != T::kKBlockElems * c + blk(r, j)) ++b;
    b += transposed<typename T::SmemLayoutKBlock, typename T::SmemLayoutKBlockT>(64, 64);
    b += runs8<typename T::SmemLayoutRows>(64, kHeadDim);
    printf("d=%d K blocks %d\n", kHeadDim, b);
    bad += b;
  }
  // dS: the (key, query) store view vs the (query, key) operand layout; query pairs adjacent.
  {
    int b = transposed<typename T::SmemLayoutdS, typename T::SmemLayoutdSt>(T::kBlockM, 64);
    typename T::SmemLayoutdSt st{};
    for (int r = 0; r < 64; ++r)
      for (int c = 0; c < T::kBlockM; c += 8)
        for (int k = 1; k < 8; ++k)
          if (st(r, c + k) != st(r, c) + k) ++b;
    printf("d=%d dS %d\n", kHeadDim, b);
    bad += b;
  }
  // S^T accumulator: pairs, cover, and the A-operand reread.
  {
    typename T::TiledMmaSdP sdp;
    typename T::TiledMmadKV dkv;
    typename T::TiledMmadQ dq;
    int b = pairs<decltype(sdp), 64, T::kBlockM>(sdp);
    b += pairs<decltype(dkv), 64, kHeadDim>(dkv);
    b += pairs<decltype(dq), T::kBlockM, T::kDqCols>(dq);
    int cover[64][T::kBlockM] = {};
    auto a_layout = T::a_operand_layout();
    for (int t = 0; t < 128; ++t) {
      auto cs = sdp.get_slice(t).partition_C(make_identity_tensor(Shape<_64, Int<T::kBlockM>>{}));
      for (int i = 0; i < size(cs); ++i) cover[get<0>(cs(i))][get<1>(cs(i))]++;
      auto ca = dkv.get_slice(t).partition_A(make_identity_tensor(Shape<_64, Int<T::kBlockM>>{}));
      if (size(ca) != size(cs) || size(a_layout) != size(cs)) ++b;
      for (int v = 0; v < size<0>(ca); ++v)
        for (int kb = 0; kb < size<2>(ca); ++kb) {
          const auto want = ca(v, 0, kb);
          const auto have = cs(a_layout(v, 0, kb));
          if (get<0>(want) != get<0>(have) || get<1>(want) != get<1>(have)) ++b;
        }
    }
    for (auto& row : cover)
      for (int v : row)
        if (v != 1) ++b;
    printf("d=%d fragments %d\n", kHeadDim, b);
    bad += b;
  }
  return bad;
}

// ring_rule (the ring mode's per-source visibility): exactly the pairs whose zigzag global
// positions are causal (a shard of s rows: chunk rank then chunk 2W - 1 - rank, s / 2 rows
// each), and every pair when not causal.
int check_ring_rule() {
  int bad = 0;
  for (int world = 1; world <= 8; ++world)
    for (int s : {2, 6, 130})
      for (int rank = 0; rank < world; ++rank)
        for (int src = 0; src < world; ++src)
          for (int causal = 0; causal < 2; ++causal) {
            const mkernel::attention::RingRule rule =
                mkernel::attention::ring_rule(src, rank, causal != 0, s);
            const int c = s / 2;
            auto pos = [&](int shard, int row) {
              return row < c ? shard * c + row : (2 * world - 1 - shard) * c + row - c;
            };
            for (int i = 0; i < s; ++i)
              for (int j = 0; j < s; ++j) {
                const bool want = !causal || pos(src, j) <= pos(rank, i);
                const bool got =
                    j < rule.key_end && i >= rule.query_begin && (!rule.causal || j <= i);
                if (want != got) ++bad;
              }
          }
  printf("ring rule %d\n", bad);
  return bad;
}

// The ring mode on arrival: ring_arrival_z maps the CTA order onto every (source, batch) pair
// once, the own source's batches first and then the sources in the order the whole mode's send
// kernel delivers them (rank - 1, rank - 2, ...); ring_kv_index puts source src's batch bi at
// position pos of the virtual K/V, the position whose shard is src's (ring_kv_api.h: position p
// holds rank (rank + 1 + p) mod W's), and leaves z alone off arrival.
int check_ring_arrival() {
  int bad = 0;
  for (int world = 2; world <= 8; ++world)
    for (int batch : {1, 3})
      for (int rank = 0; rank < world; ++rank) {
        std::vector<int> seen(world * batch, 0);
        for (int zo = 0; zo < world * batch; ++zo) {
          const int z = mkernel::attention::ring_arrival_z(zo, batch, world, rank);
          if (z < 0 || z >= world * batch) {
            ++bad;
            continue;
          }
          ++seen[z];
          const int src = z / batch, bi = z % batch;
          if (bi != zo % batch) ++bad;
          if (src != ((rank - zo / batch) % world + world) % world) ++bad;  // arrival order
          const int kv = mkernel::attention::ring_kv_index(z, batch, world, rank, true);
          const int pos = kv % world;
          if (kv / world != bi || (rank + 1 + pos) % world != src) ++bad;
          if (mkernel::attention::ring_kv_index(z, batch, world, rank, false) != z) ++bad;
        }
        for (int v : seen)
          if (v != 1) ++bad;
      }
  printf("ring arrival %d\n", bad);
  return bad;
}

// dK/dV travelling (ring_kv_api.h): the writers' flags tile the owner's slot range exactly,
// after the whole mode's arrival and send-start flags and inside the op range where
// key_grads_fit says so; the sum kernel's tile of each flag (ring_travel_tile) is the one the
// writer's warpgroup released it for; the writers' fp32 slots are disjoint, dV after every dK.
int check_ring_travel() {
  namespace ra = mkernel::ring_attention;
  namespace at = mkernel::attention;
  int bad = 0;
  if (ra::kKeyGradSlotBase <= ra::send_started_slot(ra::kMaxSendCtas - 1) ||
      ra::kKeyGradSlotBase < mkernel::comm::FlagSlot::kOpSlotBase + ra::kMaxWholeFlags)
    ++bad;
  for (int world = 2; world <= 8; ++world)
    for (int batch : {1, 3})
      for (int heads_kv : {1, 4})
        for (int seq : {64, 100, 384, 4096}) {
          const ra::KeyGradShape shape{batch, seq, heads_kv, 128};
          const long long per = at::ring_travel_flags(batch, heads_kv, seq);
          if (!ra::key_grads_fit(shape, world)) ++bad;
          std::vector<int> seen(static_cast<size_t>(world * per), 0);
          for (int w = 0; w < world; ++w)
            for (int bi = 0; bi < batch; ++bi)
              for (int h = 0; h < heads_kv; ++h)
                for (int key = 0; key < seq; key += at::kRingTravelRows) {
                  const long long t = at::ring_travel_flag(bi, h, key, heads_kv, seq);
                  const long long slot = static_cast<long long>(ra::key_grads_slot(shape, w)) + t;
                  const long long i = slot - ra::kKeyGradSlotBase;
                  if (t < 0 || t >= per || i < 0 || i >= world * per) {
                    ++bad;
                    continue;
                  }
                  ++seen[static_cast<size_t>(i)];
                  const at::RingTravelTile tile = at::ring_travel_tile(t, heads_kv, seq);
                  if (tile.bi != bi || tile.hkv != h || tile.key0 != key) ++bad;
                }
          for (int v : seen)
            if (v != 1) ++bad;
          if (ra::key_grads_slot(shape, world) > mkernel::comm::FlagSlot::kOpSlotEnd) ++bad;
          const long long slot = shape.slot_floats();
          for (int w = 0; w <= world; ++w)
            if (at::ring_travel_offset(w, batch, seq, heads_kv, 128) != w * slot) ++bad;
          if (ra::key_grads_bytes(shape, world) != static_cast<uint64_t>(2 * world * slot * 4))
            ++bad;
        }
  // Too many flags for the op range: the caller reduce-scatters instead.
  if (ra::key_grads_fit(ra::KeyGradShape{64, 65536, 64, 128}, 8)) ++bad;
  if (ra::key_grads_fit(ra::KeyGradShape{1, 256, 1, 128}, 9)) ++bad;  // more ranks than slots
  printf("ring travel %d\n", bad);
  return bad;
}

int check_tile_order() {
  int bad = 0;
  for (int n_blocks : {1, 3, 64})
    for (int hb_count : {1, 3, 5, 64})
      for (int sections = 1; sections <= hb_count; sections *= 2) {
        std::vector<int> seen(n_blocks * hb_count, 0);
        int last_section = 0, last_n = 0;
        for (int lin = 0; lin < n_blocks * hb_count; ++lin) {
          const mkernel::attention::BwdTileCoord c =
              mkernel::attention::bwd_tile_coord(lin, n_blocks, hb_count, sections);
          if (c.n_block < 0 || c.n_block >= n_blocks || c.hb < 0 || c.hb >= hb_count) {
            ++bad;
            continue;
          }
          ++seen[c.n_block * hb_count + c.hb];
          const int section = c.hb / sections;
          if (section < last_section) ++bad;  // sections in order, each one whole
          if (section == last_section && c.n_block < last_n) ++bad;  // longest first
          if (section != last_section) last_n = 0;
          last_section = section;
          last_n = c.n_block;
        }
        for (int v : seen)
          if (v != 1) ++bad;
      }
  for (long long s : {1024LL, 8192LL, 131072LL})
    for (int group : {1, 4})
      for (int hb : {1, 7, 64}) {
        const int sec = mkernel::attention::bwd_tile_sections(s, 128, group, 2, hb);
        const long long bytes = s * 128 * (2 * 2 + 4) * group;
        if (sec < 1 || (sec & (sec - 1)) != 0 || sec > hb) ++bad;
        if (sec > 1 && sec * bytes > 40LL * 1024 * 1024) ++bad;
        if (2 * sec <= hb && 2 * sec * bytes <= 40LL * 1024 * 1024) ++bad;  // the largest
      }
  printf("tile order %d\n", bad);
  return bad;
}

int main() {
  const int bad = check_traits<128>() + check_traits<64>() + check_dq_tiles() + check_ring_rule() +
                  check_ring_arrival() + check_ring_travel() + check_tile_order();
  if (bad) printf("BAD %d\n", bad);
  return bad ? 1 : 0;
}
