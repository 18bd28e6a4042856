// Flag slots of the MoE kernels (moe_ep.cu, moe_fused_hooks.cuh), near the top of the flag region
// (clear of the collectives' chunk flags and of the fused ops' counter in the last word).
// kCounts/kArrive/kStaged + src: written by src at the reader; kEntered: the publisher tells this
// rank's other CTAs that the entry barrier passed. Every value is a call number (flags only grow):
// a slot another op used in an earlier call never satisfies this call's wait.
#pragma once

#include <cstdint>

#include "../comm/group_device.h"

namespace mkernel::moe_ep {

constexpr uint32_t kBase = comm::kFlagWords - 8 * comm::kMaxRanks;
constexpr uint32_t kCounts = kBase;
constexpr uint32_t kArrive = kBase + comm::kMaxRanks;
constexpr uint32_t kStaged = kBase + 2 * comm::kMaxRanks;
constexpr uint32_t kEntered = kBase + 3 * comm::kMaxRanks;
// Work counters of this rank's CTAs (local atomics, tagged with the call number in their high
// half: the first claimant of a call restarts them): the publisher role, the items of the
// phase before the arrival flag, the finished ones, and the items after it. A call that runs in
// two launches (the layout, then the sends or the fused GEMM) keeps each counter to one launch.
constexpr uint32_t kWorkRole = kEntered + 1;
constexpr uint32_t kWorkSend = kEntered + 2;
constexpr uint32_t kWorkDone = kEntered + 3;
constexpr uint32_t kWorkAfter = kEntered + 4;
static_assert(kBase >= comm::FlagSlot::kOpSlotBase + 2 * comm::kMaxRanks * 512,
              "the MoE flags stay clear of the collectives' chunk flags");
static_assert(kBase >= comm::FlagSlot::kOpSlotEnd, "the MoE flags sit in the top area");
static_assert(kWorkAfter < comm::kFlagWords - 1, "the MoE flags stay clear of the last word");

}  // namespace mkernel::moe_ep
