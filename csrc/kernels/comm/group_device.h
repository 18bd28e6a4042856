// The device-visible state of one mkernel group on one GPU: what every fused or collective
// kernel of the group receives by value in its Params. Plain C++ (host and device).
//
// CONTRACT (fixed; implemented by csrc/comm/symmetric_group.{h,cpp}):
//  - Each rank of the group owns one symmetric allocation on its GPU:
//        [flags: kFlagWords uint64 words][data: data_bytes bytes]
//    mapped into every other rank *of the same node* through CUDA IPC. `flags[r]` / `data[r]`
//    are this process's device pointers to rank r's flag and data regions (nullptr when rank r
//    lives on another node). Flags are never reset: they only grow (sequence numbers).
//  - `epoch` points at this rank's op counter (device memory, not symmetric). A kernel of the
//    group reads e = *epoch + 1 at its start (every CTA) and the kernel's last CTA to finish
//    stores *epoch = e (see group_sync.cuh: op_begin / op_end). Every rank issues the group's
//    ops in the same order, so e is the same call number on every rank without any host step:
//    back-to-back launches and CUDA-graph replays need no host set_epoch.
//  - Flag slots (indices into a rank's flag region) are laid out by FlagSlot below. A flag
//    written "at rank p" means flags[p][slot] (a remote store through the IPC mapping for
//    intra-node peers; a FIFO WRITE_SIGNAL for other nodes).
//  - `net` is the inter-node path (csrc/comm/net_path.h): host-mapped FIFO, send/recv staging
//    areas and arrival flags of a Go data path; net.fifo == nullptr when the group has one node.
#pragma once

#include <cstdint>

#include "wait_diagnostic.h"

namespace mkernel::comm {

constexpr int kMaxRanks = 32;             // ranks per group the device tables hold
// 4 MiB of flags per rank (and per generation of the group's symmetric memory, symmetric_group.cpp).
// Sized for the fused reduce ops' largest need (fused_params.h reduce_flag_slots): gemm_ar two-shot
// at M = N = 32768 on 128x128 tiles (the smallest fused tile; pinnable by MKERNEL_FUSED_CONFIG)
// takes 65536 tile flags + 65536 x 4 slab flags = 327680 slots; 128x256 tiles take 294912. It was
// 1 << 16 (512 KiB), which sent issue 12's square M=16384 gemm_ar (two-shot at W >= 4: 8192 tiles
// x (1 + 8 slabs) = 73728 slots) to the unfused path. tests/fused/test_flag_room.py checks the
// issue's shapes, every fused config, against it.
constexpr uint32_t kFlagWords = 1u << 19;

// Flag regions: [0, kGroupSlots) are the substrate's own (entry barrier, call signatures,
// collectives' entered flag and work counter); [kOpSlotBase, kOpSlotEnd) are free for an op's
// per-chunk / per-tile flags (values: call numbers only); [kOpSlotEnd, kFlagWords) is the top
// area: the MoE kernels' flags and call-tagged work counters (moe_ep.cu kBase = kOpSlotEnd) and
// the fused ops' work counter in the last word (fused_params.h counter_slot). A work counter holds
// (call << 32) | count, which satisfies any later wait_geq on its word: an op's flags must never
// reach the top area.
struct FlagSlot {
  static constexpr uint32_t kEntry = 0;                          // + src rank: src entered call e
  // (retired, fused14: every entry barrier now reads the signature by the call's parity, below)
  static constexpr uint32_t kSignatureRetired = kMaxRanks;
  static constexpr uint32_t kExit = 2 * kMaxRanks;               // + src rank: src finished call e
  static constexpr uint32_t kCollective = 3 * kMaxRanks;         // 8 * kMaxRanks for the collectives
  static constexpr uint32_t kMismatch = 11 * kMaxRanks;          // + src rank: src recorded a
                                                                 // signature mismatch in call e
  // + (e & 1) * kMaxRanks + src rank: src's call signature in call e (signature_slot).
  static constexpr uint32_t kSignatureByParity = 12 * kMaxRanks;
  // Where rank src publishes (and every peer reads) its signature of call e: one slot per
  // parity of e, for every kernel of every op. Why by parity: a CTA of call e can reach the
  // entry barrier after every peer has finished call e and published call e + 1's signature
  // (a CTA placed late — under MPS, while the peers' grids hold the SMs — in a kernel whose
  // peers need nothing more from it: ag_gemm's copy items are claimed by the CTAs that run),
  // but never after call e + 2's (a peer passes call e + 1's barrier only once this rank has
  // entered call e + 1, i.e. after its call e kernel ended). So the slot of e's parity holds
  // exactly call e's signature when it is read. One slot for every call read the next call's
  // signature there: a false "called different ops" trap (s12run1, W = 4 ag_gemm square
  // M=16384 on the share's grid, then the unfused path's all_gather; before that s10run2
  // across nodes, which alone had the parity slots). Every kernel uses this one function, so
  // no two kernels of a call can disagree on the slot (tests/comm/entry_barrier_check.cpp).
  static constexpr uint32_t signature_slot(uint64_t e, int src) {
    return kSignatureByParity + static_cast<uint32_t>(e & 1) * kMaxRanks +
           static_cast<uint32_t>(src);
  }
  // + src rank: src's fused launch gate of call e has started (fused_gate.cu, barrier mode).
  static constexpr uint32_t kGate = 14 * kMaxRanks;
  static constexpr uint32_t kGroupSlots = 16 * kMaxRanks;
  static constexpr uint32_t kOpSlotBase = kGroupSlots;
  static constexpr uint32_t kTopSlots = 8 * kMaxRanks;  // the top area (moe_ep.cu: 8 * kMaxRanks)
  static constexpr uint32_t kOpSlotEnd = kFlagWords - kTopSlots;
};
// Slots an op may use from kOpSlotBase (ag_gemm's chunk flags, gemm_rs / gemm_ar's tile and slab
// flags, the collectives', ring attention's).
constexpr uint32_t kOpFlagRoom = FlagSlot::kOpSlotEnd - FlagSlot::kOpSlotBase;
static_assert(FlagSlot::kOpSlotBase < FlagSlot::kOpSlotEnd, "the op range is not empty");
static_assert(FlagSlot::kSignatureByParity + 2 * kMaxRanks <= FlagSlot::kGroupSlots,
              "the parity signature slots fit the substrate's own slots");
static_assert(FlagSlot::kSignatureByParity + 2 * kMaxRanks <= FlagSlot::kGate &&
                  FlagSlot::kGate + kMaxRanks <= FlagSlot::kGroupSlots,
              "the gate slots fit the substrate's own slots, after the parity signatures");

// The inter-node half (all pointers are device pointers of host-mapped memory, or device
// memory for fifo_head). Filled by csrc/comm/net_path.cpp.
struct NetDevice {
  void* fifo = nullptr;                       // mk_fifo_ctrl* (mkernel/fifo.h), host-mapped
  uint32_t fifo_capacity = 0;                 // slots (a power of two)
  uint32_t fifo_format = 0;                   // mk_fifo_format: MK_FIFO_FORMAT_LL = tagged words, no fence
  unsigned long long* fifo_head = nullptr;    // device-memory ticket counter shared by the warps
  uint8_t* send_area = nullptr;               // staging the GPU writes; FIFO local_buf = send_buf_id
  uint8_t* recv_area = nullptr;               // where peers' data lands; remote_buf = recv_buf_id
  uint64_t* arrival = nullptr;                // the data path's arrival flags (buffer id 0)
  uint32_t send_buf_id = 0, recv_buf_id = 0;
  uint64_t send_bytes = 0, recv_bytes = 0;
  uint32_t arrival_slots = 0;
  // kNetStageCounters device-memory words, zero between calls: a kernel whose CTAs stage parts
  // of one piece of a block counts them here, and the CTA staging the last part pushes the
  // piece (and rezeroes its word).
  uint32_t* stage_count = nullptr;
  // arrival_slots device-memory words each, zero when the path opens (MKERNEL_NET_MIRROR=1, see
  // collectives.cu net_arrival_wait): arrival_mirror[s] holds a value some CTA saw in arrival[s],
  // arrival_claim[s] the last call number whose first waiter took the polling of arrival[s].
  uint64_t* arrival_mirror = nullptr;
  uint64_t* arrival_claim = nullptr;
  // CTAs a kernel that spins on this path leaves free of its co-resident grid: under the loopback
  // GPU-direct emulation the transport moves the bytes with this process's CUDA copies, which the
  // driver may run as SM kernels; a grid holding every SM of the client while it waits for them
  // would never see them run (csrc/comm/net_path.cpp sets it; 0 elsewhere).
  uint32_t spare_ctas = 0;
  // 1 under the loopback GPU-direct emulation (GPU send/receive areas whose bytes this process's
  // device copier moves), else 0: picks defaults that were verified there (the collectives' flag
  // mirror).
  uint32_t gpu_direct = 0;
};
constexpr int kNetStageCounters = (kMaxRanks + 1) * 8;  // (destination block + 1) x pieces

struct GroupDevice {
  int32_t rank = 0;
  int32_t world = 1;
  int32_t node_of[kMaxRanks] = {};  // each rank's node index (0-based, dense)
  int32_t local_ranks = 1;          // ranks on this rank's node
  uint64_t* flags[kMaxRanks] = {};  // rank r's flag region (this process's mapping) or nullptr
  uint8_t* data[kMaxRanks] = {};    // rank r's data region or nullptr
  uint64_t data_bytes = 0;          // size of every rank's data region
  uint64_t* epoch = nullptr;        // this rank's op counter (device memory)
  uint32_t* exit_ticket = nullptr;  // CTA exit counter for op_end (device memory, zero between calls)
  WaitDiagnostic* diag = nullptr;   // host-mapped; written by a timed-out wait before it traps
  uint64_t timeout_ns = 0;          // bound of every wait (%globaltimer ns)
  int32_t group_id = 0;             // the Go session handle (for diagnostics)
  NetDevice net;
};

}  // namespace mkernel::comm
