// Host check of kernels/moe/moe_net_plan.h (moe10), compiled by g++ (test_moe_net_plan.py): the
// headed gather's pieces cover the block exactly once in 256-aligned cuts, every row of a source
// is handed to exactly the piece its last byte lands in, the areas of heads and blocks never
// overlap, and a gather driven piece by piece (the dispatch's: own rows first, then each landed
// range of each other rank, rows selected by token in range) writes every live row from the
// right source exactly once and no dead row — the same rows as one index_select over the whole
// gathered block.
#include <cstdint>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "kernels/moe/moe_net_plan.h"

using namespace mkernel::moe_net;

static int failures = 0;
#define CHECK(cond, ...)                                  \
  do {                                                    \
    if (!(cond)) {                                        \
      if (failures++ < 20) {                              \
        std::printf("FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond); \
        std::printf(__VA_ARGS__);                         \
        std::printf("\n");                                \
      }                                                   \
    }                                                     \
  } while (0)

static void check_plan(uint64_t rows, uint64_t row_bytes, uint64_t max_pieces) {
  const uint64_t block = rows * row_bytes;
  const PiecePlan p = plan_pieces(block, max_pieces);
  if (block == 0) {
    CHECK(p.pieces == 0, "block 0 has %llu pieces", (unsigned long long)p.pieces);
    return;
  }
  CHECK(p.pieces >= 1 && p.pieces <= max_pieces, "pieces %llu (max %llu, block %llu)",
        (unsigned long long)p.pieces, (unsigned long long)max_pieces, (unsigned long long)block);
  CHECK(p.piece % kAlign == 0, "piece %llu not 256-aligned", (unsigned long long)p.piece);
  CHECK(block < kMinPiece || p.pieces == 1 || p.piece >= kMinPiece - kAlign,
        "piece %llu below the minimum", (unsigned long long)p.piece);
  uint64_t covered = 0;
  for (uint64_t c = 0; c < p.pieces; ++c) {
    CHECK(p.offset(c) == covered, "piece %llu starts at %llu, expected %llu", (unsigned long long)c,
          (unsigned long long)p.offset(c), (unsigned long long)covered);
    CHECK(p.bytes(c) > 0, "piece %llu of %llu is empty (block %llu)", (unsigned long long)c,
          (unsigned long long)p.pieces, (unsigned long long)block);
    covered += p.bytes(c);
  }
  CHECK(covered == block, "pieces cover %llu of %llu bytes", (unsigned long long)covered,
        (unsigned long long)block);
  CHECK(p.bytes(p.pieces) == 0, "bytes past the last piece");
  // Rows: each to the piece its last byte lands in, exactly once.
  std::vector<int> owner(rows, -1);
  uint64_t prev = 0;
  for (uint64_t c = 0; c < p.pieces; ++c) {
    const uint64_t r1 = p.rows_landed(c, row_bytes);
    CHECK(r1 >= prev, "rows_landed falls at piece %llu", (unsigned long long)c);
    for (uint64_t r = prev; r < r1 && r < rows; ++r) {
      CHECK(owner[r] == -1, "row %llu handed twice", (unsigned long long)r);
      owner[r] = static_cast<int>(c);
      const uint64_t last_byte = (r + 1) * row_bytes;
      CHECK(p.offset(c) + p.bytes(c) >= last_byte, "row %llu handed before it landed (piece %llu)",
            (unsigned long long)r, (unsigned long long)c);
      CHECK(p.offset(c) < last_byte, "row %llu handed a piece late (piece %llu)",
            (unsigned long long)r, (unsigned long long)c);
    }
    prev = r1;
  }
  CHECK(prev == rows, "%llu of %llu rows handed", (unsigned long long)prev, (unsigned long long)rows);
}

static void check_layout(uint64_t block, uint64_t head, int world) {
  const HeadedLayout l = headed_layout(block, head);
  CHECK(l.stride % kAlign == 0 && l.head_stride % kAlign == 0, "unaligned strides");
  CHECK(l.stride >= block && l.head_stride >= head, "strides too small");
  // Send: block [0, block), head [stride, stride + head).
  CHECK(l.send_head_off() >= block, "head over the block in the send area");
  CHECK(l.send_head_off() + head <= l.send_bytes(world), "head past the send area");
  // Receive: every region inside, none overlapping.
  struct R { uint64_t b, e; };
  std::vector<R> rs;
  for (int s = 0; s < world; ++s) {
    rs.push_back({l.recv_block_off(s), l.recv_block_off(s) + block});
    rs.push_back({l.recv_head_off(s, world), l.recv_head_off(s, world) + head});
    CHECK(l.recv_head_off(s, world) % kAlign == 0 && l.recv_block_off(s) % kAlign == 0, "unaligned");
  }
  for (size_t i = 0; i < rs.size(); ++i) {
    CHECK(rs[i].e <= l.recv_bytes(world), "region %zu past the receive area", i);
    for (size_t j = i + 1; j < rs.size(); ++j) {
      CHECK(rs[i].e <= rs[j].b || rs[j].e <= rs[i].b, "regions %zu and %zu overlap", i, j);
    }
  }
}

// The dispatch's piecewise gather against one gather over the whole [W*Tm] block.
static void check_gather(std::mt19937_64& rng, int world, int me, uint64_t tm, uint64_t row_bytes,
                         uint64_t out_rows, double live_share) {
  const uint64_t all = static_cast<uint64_t>(world) * tm;
  std::vector<int64_t> token(out_rows);
  std::uniform_int_distribution<uint64_t> pick(0, all ? all - 1 : 0);
  std::uniform_real_distribution<double> u(0.0, 1.0);
  for (auto& t : token) t = (all && u(rng) < live_share) ? static_cast<int64_t>(pick(rng)) : -1;
  std::vector<int64_t> written(out_rows, -2), count(out_rows, 0);
  auto gather = [&](int64_t row0, int64_t rows) {  // the kernel's selection, on the host
    for (uint64_t q = 0; q < out_rows; ++q) {
      const int64_t t = token[q] - row0;
      if (t < 0 || t >= rows) continue;
      written[q] = row0 + t;
      ++count[q];
    }
  };
  gather(static_cast<int64_t>(me) * tm, static_cast<int64_t>(tm));  // own rows from x
  const PiecePlan p = plan_pieces(tm * row_bytes, 15);
  for (uint64_t c = 0; c < p.pieces; ++c) {
    const uint64_t r0 = c == 0 ? 0 : p.rows_landed(c - 1, row_bytes), r1 = p.rows_landed(c, row_bytes);
    for (int j = 1; j < world; ++j) {
      const int s = (me + j) % world;
      if (r1 > r0) gather(static_cast<int64_t>(s * tm + r0), static_cast<int64_t>(r1 - r0));
    }
  }
  for (uint64_t q = 0; q < out_rows; ++q) {
    if (token[q] < 0) {
      CHECK(count[q] == 0, "dead row %llu written", (unsigned long long)q);
    } else {
      CHECK(count[q] == 1 && written[q] == token[q], "row %llu: written %lld times, from %lld, want %lld",
            (unsigned long long)q, (long long)count[q], (long long)written[q], (long long)token[q]);
    }
  }
}

int main() {
  // The bench's seed 8k shape (4096 x 7168 bf16 per rank), ragged and tiny blocks, rows larger
  // than a piece, rows that straddle every cut.
  const uint64_t row_sizes[] = {2, 64, 14336, 8192 * 2, 3 * 1024 * 1024 + 2, 1000, 256 * 1024 + 6};
  const uint64_t row_counts[] = {0, 1, 2, 7, 33, 513, 4096, 4099};
  for (uint64_t rb : row_sizes) {
    for (uint64_t rows : row_counts) {
      if (rb * rows > (uint64_t{1} << 33)) continue;
      for (uint64_t mp : {1, 2, 15, 16}) check_plan(rows, rb, mp);
      check_layout(rows * rb, rows * 8 * 4 + 4, 2);
      check_layout(rows * rb, rows * 4, 8);
    }
  }
  std::mt19937_64 rng(14);
  for (int world : {2, 3, 4, 8}) {
    for (uint64_t tm : {1, 5, 97, 600}) {
      for (uint64_t rb : {64, 14336, 3 * 1024 * 1024 + 2}) {
        const int me = static_cast<int>(rng() % world);
        check_gather(rng, world, me, tm, rb, world * tm * 2 + 3, 0.6);
        check_gather(rng, world, me, tm, rb, 17, 1.0);
        check_gather(rng, world, me, tm, rb, 9, 0.0);
      }
    }
  }
  // The wait record's names of the exchange's slots (moe12): s13run2's 2081 = DONE of rank 1.
  {
    namespace sl = mkernel::moe_net::slots;
    auto has = [](const std::string& s, const char* part) { return s.find(part) != std::string::npos; };
    using mkernel::moe_net::describe_slot;
    CHECK(describe_slot(2081) .find("DONE from rank 1 ") != std::string::npos, "%s", describe_slot(2081).c_str());
    CHECK(has(describe_slot(2048), "READY from rank 0 "), "%s", describe_slot(2048).c_str());
    CHECK(has(describe_slot(2048 + 31), "READY from rank 31 "), "%s", describe_slot(2079).c_str());
    CHECK(has(describe_slot(2112), "data slot 0 of rank 0's") && has(describe_slot(2112), "routing head"),
          "%s", describe_slot(2112).c_str());
    CHECK(has(describe_slot(2112 + 16 * 3 + 5), "data slot 5 of rank 3's"), "%s",
          describe_slot(2112 + 16 * 3 + 5).c_str());
    CHECK(describe_slot(2047).empty() && describe_slot(sl::kEnd).empty() && describe_slot(0).empty(),
          "a slot outside the exchange is named");
    CHECK(has(describe_slot(sl::kEnd - 1), "data slot 15 of rank 31's"), "%s",
          describe_slot(sl::kEnd - 1).c_str());
  }
  if (failures) {
    std::printf("%d failures\n", failures);
    return 1;
  }
  std::printf("OK\n");
  return 0;
}
