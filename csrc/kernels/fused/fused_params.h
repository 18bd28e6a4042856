// What a fused GEMM + communication launch receives (host and device; plain C++): the group's
// device view and the op's layout. See fused_hooks.cuh for the protocol of each mode.
#pragma once

#include <cstdint>

#include "../comm/group_device.h"

namespace mkernel::fused {

// kSideBulk (ag only): one side thread moves each copy item in 8 KiB pieces through two shared
// buffers with bulk (TMA) copies: global -> shared completing on an mbarrier, shared -> peer
// global as a bulk store; 16 KiB in flight per SM without registers.
// kSidePipe (reduce only): the side warps claim a run of slabs up to the end of a tile (one flag
// check per run) and move it in pieces of half the side buffer, double-buffered (piece j + 1's
// cp.async copies in flight while piece j is summed).
// kSideCopyEngine (ag only, one node): the copy engines move the rows (ag_gemm.cpp's copy-engine
// route: cudaMemcpyAsync into every same-node peer's G on a side stream, each chunk's arrival
// flag then set to 1 by a stream write), so the side warps only pass the entry barrier (the
// call's signature check) and the producer waits for flags holding 1 instead of the call
// number: a stream write takes a constant, which the launch gate's reset to 0 right before
// makes mean "arrived in this call" (fused_gate.cu).
enum SideMode : int32_t {
  kSideRegs = 0,
  kSideStaged = 1,
  kSideIdle = 2,
  kSideBulk = 3,
  kSidePipe = 4,
  kSideCopyEngine = 5
};

// How the consumer warps reduce after their last tile: per warp from registers (kTailRegs, four
// 16-byte vectors of two ranks in flight per lane: 32 KiB per SM), or all 256 together through
// the mainloop's shared-memory ring, free by then (kTailStaged: rounds of up to ~190 KiB of
// cp.async copies in flight per SM).
enum TailMode : int32_t { kTailRegs = 0, kTailStaged = 1 };

// Per-CTA timeline of a launch (MKERNEL_FUSED_TIMELINE, a measurement mode): %globaltimer
// stamps (ns; one clock for every process on the GPU) and item counts, kTimelineWords words per
// CTA at timeline + cta * kTimelineWords.
enum TimelineSlot : int32_t {
  kTlStart = 0,      // the CTA's first thread read the call number
  kTlEntered = 1,    // past the entry barrier (reduce: the producer; ag: the copy role)
  kTlGemmDone = 2,   // the consumers' last tile stored (tail role begins)
  kTlTailDone = 3,   // the consumers' staged tail reduce done (thread 0)
  kTlSideDone = 4,   // the side warps' role done
  kTlExit = 5,       // every role of the CTA done (call_end)
  kTlSideItems = 6,  // reduce items done by the side warps
  kTlTailItems = 7,  // reduce items done by the consumers
  kTlSmid = 8,       // the SM the CTA ran on (%smid): which SMs each rank's CTAs share
  kTlCluster = 9,    // the CTA's cluster id (%clusterid.x)
  kTimelineWords = 10,
};

// ag_gemm across nodes: arrival flags (NetDevice::arrival) [kNetSlotBase, + kMaxRanks *
// kNetPieces) (the collectives use [0, 512), the MoE [2048, 2624)); flag of (source rank s,
// piece k) = kNetSlotBase + s * kNetPieces + k, holding the call number.
constexpr uint32_t kNetSlotBase = 1024;
constexpr int32_t kNetPieces = 16;
static_assert(kNetSlotBase + comm::kMaxRanks * kNetPieces <= 2048, "below the MoE's slots");
static_assert(kNetPieces <= comm::kNetStageCounters, "a stage counter per piece");

// Whether the fused kernels carry gemm_rs across nodes (both the send and the reduce halves);
// 0: the host keeps gemm_rs on groups spanning nodes unfused. ptxas (session 10): 0 spills, no
// C7510 with it (the SEND role builds its FIFO command in shared memory: inlined, the command's
// words spilled 544-940 bytes in the side warps' 40 registers).
#ifndef MKERNEL_FUSED_RS_NODES
#define MKERNEL_FUSED_RS_NODES 1
#endif

// gemm_rs across nodes: arrival flag of (source rank s, CTA j) = kRsNetSlotBase + s * grid + j
// (the grid the same on every rank), holding (call number << 24) | (k + 1) after the source's
// CTA j sent the tile of its k-th unit (fused_hooks.cuh "kModeReduce across nodes").
constexpr uint32_t kRsNetSlotBase = 2624;  // past the MoE's slots
constexpr uint32_t kRsNetSlotEnd = 4096;   // the group's arrival slots (symmetric_group.cpp)
constexpr int kRsNetSeqBits = 24;

// kModeReduce's flag slots from flag_base (reduce_fits checks them against comm::kOpFlagRoom on
// the host; tests/fused/flag_room_check.cpp against issue 12's shapes): a flag per output tile,
// then, two-shot, a reduced flag per (tile, slab) at reduced_flag_base = flag_base + tiles.
// Reduce items are slabs of ~8 KiB of a tile's partial: 16 rows of a 256-wide tile, 32 of a
// 128-wide one (slab_rows; slabs = block_m / slab_rows).
constexpr int reduce_slab_rows(int block_m, int block_n) {
  const int rows = 4096 / block_n < block_m ? 4096 / block_n : block_m;
  return rows > 1 ? rows : 1;
}
constexpr int64_t reduce_flag_slots(int64_t tiles, int slabs, bool two_shot) {
  return tiles + (two_shot ? tiles * slabs : 0);
}

enum FusedMode : int32_t {
  kModeAllGather = 0,  // ag_gemm: A = the gathered rows, pushed by the COPY role
  kModeReduce = 1,     // gemm_rs / gemm_ar (one-shot): D = this rank's partial, REDUCE role
};

struct FusedParams {
  comm::GroupDevice group;
  int32_t mode = kModeAllGather;
  int32_t op = comm::kOpAgGemm;  // WaitOp for diagnostics and the entry barrier
  uint64_t signature = 0;        // the call's signature (entry barrier)
  uint32_t flag_base = comm::FlagSlot::kOpSlotBase;  // first flag slot of the op
  // This rank's work counter (the last word of its own flag region, in the top area past every
  // op's flags: group_device.h kOpSlotEnd): copy items are claimed from it (fused_hooks.cuh,
  // claim_item).
  uint32_t counter_slot = comm::kFlagWords - 1;

  // kModeAllGather: flag of (rank s, chunk c) = flag_base + s * chunks + c.
  const uint8_t* x = nullptr;  // [m_local, K] this rank's rows
  int32_t m_local = 0;         // rows per rank
  int32_t m_total = 0;         // world * m_local (the GEMM's M)
  int64_t row_bytes = 0;       // K * element size (a multiple of 16)
  int32_t chunk_rows = 128;    // rows per arrival flag
  int32_t chunks = 0;          // ceil(m_local / chunk_rows)
  // Across nodes (net_remote > 0: MKERNEL_FUSED_NODES=1, fused_hooks.cuh "kModeAllGather
  // across nodes"): the ranks of other nodes get this rank's x through the group's inter-node
  // path (GroupDevice::net) in pieces of net_piece_chunks chunks (at most kNetPieces), each
  // with its own arrival flag net_slot(rank, piece); their rows land in the receive half of the
  // call's parity at net_block bytes per source rank and are copied into G as they arrive.
  int32_t net_remote = 0;        // ranks on other nodes (0: the group has one node)
  int32_t net_piece_chunks = 1;  // chunks per piece
  uint64_t net_block = 0;        // bytes per source rank in a receive half (256-byte multiple)
  // (gemm_rs across nodes uses net_remote and net_block: a source's block holds the partial
  // tiles of the receiver's rows, tile-major, block_m x block_n elements per tile slot.)
  // gemm_rs across nodes, MKERNEL_FUSED_RS_NODES_COALESCE=<n> (xnode6, opt-in): > 0 lays the
  // blocks out by (CTA, unit) instead and sends up to n whole tiles of one CTA to one owner per
  // command (fused_hooks.cuh rs_unit_slot_offset); 0: one command per (tile, owner).
  int32_t net_coalesce = 0;

  // kModeReduce: the GEMM's D is this rank's data region ([m, n] partial); tile (tm, tn)'s flag
  // = flag_base + tm * tiles_n + tn, released at this rank when the tile is stored. The REDUCE
  // role sums rows [reduce_row0, reduce_row0 + reduce_rows) of every same-node rank's partial in
  // fp32, rank order 0..world-1, into out [reduce_rows, n].
  int32_t m = 0, n = 0;
  int32_t block_m = 0, block_n = 0, tiles_n = 0;
  int32_t reduce_row0 = 0, reduce_rows = 0;
  void* out = nullptr;
  int32_t out_row0 = 0;  // the row of the problem that out's first row holds
  // Two-shot all-reduce (gemm_ar): rank q reduces rows [q * rows_per_rank, ...) (its
  // reduce_row0/rows), writes them to out and to the reduced area of its region (byte
  // reduced_offset, the same [m, n] layout), releases reduced flag (tm, tn) = e at itself
  // (reduced_flag_base + tm * tiles_n + tn), then copies every other rank's reduced rows into out
  // as their flags arrive.
  int32_t two_shot = 0;
  int32_t rows_per_rank = 0;
  int64_t reduced_offset = 0;
  uint32_t reduced_flag_base = 0;  // + tile * slabs + slab (two-shot: per slab, not per tile)
  // Reduce items: a tile's rows in slabs of slab_rows (block_m % slab_rows == 0), one warp each.
  int32_t slab_rows = 16;
  int32_t slabs = 8;  // block_m / slab_rows
  // How the side warps copy (ag) / reduce: kSideRegs (per warp from registers), kSideStaged
  // (as one unit through shared memory by cp.async) or, reduce only, kSideIdle (the consumers
  // reduce everything after their last tile). Defaults by measurement (device run 2: the staged
  // copy was slower, 858 vs 567 us at ag 1024x8192x3584); MKERNEL_FUSED_SIDE=regs|staged|idle
  // pins one for measuring (fused_common.h side_mode).
  int32_t side_mode = 1;
  int32_t tail_mode = 1;  // TailMode (MKERNEL_FUSED_TAIL=regs|staged pins one for measuring)
  int32_t bf16 = 1;  // element type of D and out: bf16 (1) or fp16 (0)
  uint64_t* timeline = nullptr;  // TimelineSlot records per CTA, or null (the normal case)
  // griddepcontrol.launch_dependents at the kernel's start (1, MKERNEL_FUSED_TRIGGER=early)
  // rather than after the consumers' mainloop (0, CUTLASS's point). Kept for measuring: session
  // 7 tested it against the ranks' serialization under MPS (device run 3: no effect).
  int32_t trigger_early = 0;
};

}  // namespace mkernel::fused
