// Host check of the flag region's layout (kernels/comm/group_device.h FlagSlot) and of the fused
// reduce ops' flag need (kernels/fused/fused_params.h reduce_flag_slots / reduce_slab_rows, the
// functions fused_common.cpp reduce_fits and reduce_call use) against the op range.
//
//   flag_room_check [-v] -c BMxBN [-c ...] -s MxN [-s ...]
//
// For every config tile (-c) and output shape (-s: the GEMM's per-rank M and N), one-shot and
// two-shot: need = reduce_flag_slots(tiles, slabs, two_shot) must be <= kOpFlagRoom. -v prints
// "need BM BN M N TWO_SHOT NEED ROOM" per case before the verdict. Prints "room ROOM" first, then
// the failures or "OK" (exit 1 / 0). Built and run by tests/fused/test_flag_room.py, which passes
// the configs of fused_dispatch.cu fused_supported and the shapes of bench_fused.py --set issue.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "kernels/fused/fused_params.h"

namespace {

using mkernel::comm::FlagSlot;
using mkernel::comm::kFlagWords;
using mkernel::comm::kMaxRanks;
using mkernel::comm::kOpFlagRoom;
using mkernel::fused::reduce_flag_slots;
using mkernel::fused::reduce_slab_rows;

constexpr int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

constexpr int64_t need(int bm, int bn, int64_t m, int64_t n, bool two_shot) {
  return reduce_flag_slots(ceil_div(m, bm) * ceil_div(n, bn), bm / reduce_slab_rows(bm, bn),
                           two_shot);
}

// The layout: the op range starts after the substrate's slots and ends below the top area,
// which holds the MoE kernels' flags and call-tagged work counters (moe_ep.cu: kBase =
// kFlagWords - 8 * kMaxRanks, its last counter kBase + 3 * kMaxRanks + 4 < kFlagWords - 1) and
// the fused ops' work counter in the last word (FusedParams::counter_slot).
static_assert(FlagSlot::kOpSlotBase == FlagSlot::kGroupSlots, "ops start after the substrate");
static_assert(FlagSlot::kOpSlotEnd == kFlagWords - 8 * kMaxRanks,
              "the op range ends where moe_ep.cu's kBase starts the top area");
static_assert(FlagSlot::kOpSlotEnd + 3 * kMaxRanks + 4 < kFlagWords - 1,
              "the MoE's slots and the fused counter stay apart in the top area");
static_assert(kOpFlagRoom == FlagSlot::kOpSlotEnd - FlagSlot::kOpSlotBase, "the room");
// The slab rule (fused_common.cpp's before it moved: max(1, min(block_m, 4096 / block_n))).
static_assert(reduce_slab_rows(128, 256) == 16 && reduce_slab_rows(128, 128) == 32 &&
                  reduce_slab_rows(256, 128) == 32 && reduce_slab_rows(64, 8192) == 1,
              "slab rows");
// Issue 12's defect: square M=16384 gemm_ar two-shot on 128x256 tiles needs 8192 x 9 slots, past
// the old region's op room (1 << 16 words - 512 substrate slots - the counter = 65023) ...
static_assert(need(128, 256, 16384, 16384, true) == 73728, "the defect's need");
static_assert(need(128, 256, 16384, 16384, true) > (1 << 16) - 512 - 1, "over the old room");
// ... and the largest shape of the families (M = N = 32768, gemm_ar's M is every rank's
// rows) on the smallest fused tile (128x128, 4 slabs of 32 rows) fits the new one.
static_assert(need(128, 128, 32768, 32768, true) == 327680, "the worst case's need");
static_assert(need(128, 128, 32768, 32768, true) <= kOpFlagRoom, "the worst case fits");
static_assert(need(128, 256, 32768, 32768, true) <= kOpFlagRoom, "128x256 fits");
static_assert(need(256, 128, 32768, 32768, true) <= kOpFlagRoom, "256x128 fits");
// Slot indices stay far inside uint32 (FusedParams' flag bases) and int32 (WaitSite::index).
static_assert(kFlagWords <= (1u << 30), "slot indices fit int32");

bool parse_pair(const char* s, int64_t* a, int64_t* b) {
  char* end = nullptr;
  *a = std::strtoll(s, &end, 10);
  if (end == s || *end != 'x') return false;
  const char* t = end + 1;
  *b = std::strtoll(t, &end, 10);
  return end != t && *end == '\0' && *a > 0 && *b > 0;
}

}  // namespace

int main(int argc, char** argv) {
  bool verbose = false;
  std::vector<std::pair<int64_t, int64_t>> tiles, shapes;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "-v") == 0) {
      verbose = true;
      continue;
    }
    int64_t a = 0, b = 0;
    if (i + 1 < argc && (std::strcmp(argv[i], "-c") == 0 || std::strcmp(argv[i], "-s") == 0) &&
        parse_pair(argv[i + 1], &a, &b)) {
      (argv[i][1] == 'c' ? tiles : shapes).emplace_back(a, b);
      ++i;
      continue;
    }
    std::printf("usage: %s [-v] -c BMxBN ... -s MxN ... (bad argument '%s')\n", argv[0], argv[i]);
    return 2;
  }
  std::printf("room %u\n", kOpFlagRoom);
  if (tiles.empty() || shapes.empty()) {
    std::printf("FAIL: no configs or no shapes given\n");
    return 1;
  }
  int failures = 0;
  for (const auto& t : tiles) {
    for (const auto& s : shapes) {
      for (const bool two_shot : {false, true}) {
        const int64_t got = need(static_cast<int>(t.first), static_cast<int>(t.second), s.first,
                                 s.second, two_shot);
        if (verbose) {
          std::printf("need %lld %lld %lld %lld %d %lld %u\n", static_cast<long long>(t.first),
                      static_cast<long long>(t.second), static_cast<long long>(s.first),
                      static_cast<long long>(s.second), two_shot ? 1 : 0,
                      static_cast<long long>(got), kOpFlagRoom);
        }
        if (got > kOpFlagRoom) {
          std::printf("FAIL: %lldx%lld tiles, M=%lld N=%lld %s: %lld flag slots > room %u\n",
                      static_cast<long long>(t.first), static_cast<long long>(t.second),
                      static_cast<long long>(s.first), static_cast<long long>(s.second),
                      two_shot ? "two-shot" : "one-shot", static_cast<long long>(got),
                      kOpFlagRoom);
          ++failures;
        }
      }
    }
  }
  if (failures == 0) std::printf("OK\n");
  return failures == 0 ? 0 : 1;
}
