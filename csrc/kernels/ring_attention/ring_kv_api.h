// Host API of ring attention's K/V rotation on the GPU substrate (plain C++, no torch).
// Two modes: the per-step ring below (ragged shards) and the whole-sequence mode (block-aligned
// shards; see send_whole).
//
// The per-step ring (csrc/ring_attention.cpp drives it; W ranks of one node, step j = 0 .. W-1):
//   step j, rank r attends its queries to the K/V shard of rank (r - j) mod W. Step 0 uses the
//   local k/v; step j >= 1 reads buffer j % 2 of r's symmetric data region, which rank r - 1
//   filled during step j - 1 (send j - 1) while both ranks computed.
//   send j (j <= W - 2, on a side stream): rank r copies the shard it attends at step j (local
//   k/v for j = 0, else its buffer j % 2 once arrived) into buffer (j + 1) % 2 of rank r + 1,
//   one (batch, key chunk) item at a time, and releases that item's arrival flag at r + 1.
//   The attention engine of step j waits for an item's flag before its TMA loads
//   (attention::HookArgs: consumed on arrival, block by block).
//   release j: after r's engine and send of step j are done with buffer j % 2, r tells r - 1
//   that the buffer is free again (credit for send j + 1 of r - 1, which writes it).
// Flags live in the receiver's flag region, one slot per (step, item), and hold the call number
// e (the group's device op counter: begin reads it, end advances it) — the value every op of
// the group writes into its flags (they share the op slot range, and flags only grow), so
// back-to-back calls, other ops in between and CUDA-graph replays need no host step. Every
// wait is bounded (comm::wait_geq).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "../attention/attention_bwd_api.h"
#include "../comm/group_device.h"

#if defined(__CUDACC__)
#define MKERNEL_RING_HD __host__ __device__
#else
#define MKERNEL_RING_HD
#endif

namespace mkernel::ring_attention {

constexpr uint32_t kMaxItems = 1024;  // (batch, key chunk) items per step

// Flag slots (the op range of comm::FlagSlot): arrival of item i for step j (the shard rank
// r - 1 sent during step j - 1), and the credit "this rank is done with its buffer of step j"
// (released by the next rank at this one).
MKERNEL_RING_HD constexpr uint32_t arrive_slot(int step, int item) {
  return comm::FlagSlot::kOpSlotBase + static_cast<uint32_t>(step) * kMaxItems +
         static_cast<uint32_t>(item);
}
MKERNEL_RING_HD constexpr uint32_t consumed_slot(int step) {
  return comm::FlagSlot::kOpSlotBase + comm::kMaxRanks * kMaxItems + static_cast<uint32_t>(step);
}
// The whole-sequence mode's "send CTA i is running" (this rank's own flags; opt-in, see
// wait_send_started).
constexpr int kMaxSendCtas = 16;
MKERNEL_RING_HD constexpr uint32_t send_started_slot(int cta) {
  return consumed_slot(comm::kMaxRanks) + static_cast<uint32_t>(cta);
}
static_assert(send_started_slot(kMaxSendCtas - 1) < comm::FlagSlot::kOpSlotEnd,
              "ring attention's flags fit the op range");

// One K/V shard: k and v [batch, seq, h_kv, d] (contiguous, row_bytes = h_kv * d * element),
// cut per batch into `chunks` items of `chunk_rows` rows (the last one ragged). A buffer holds
// [k | v]; the data region holds buffers 0 and 1.
struct Geometry {
  int batch = 0;
  int seq = 0;
  uint64_t row_bytes = 0;
  int chunk_rows = 0;
  int chunks = 0;  // per batch: ceil(seq / chunk_rows); batch * chunks <= kMaxItems
  MKERNEL_RING_HD uint64_t shard_bytes() const { return static_cast<uint64_t>(batch) * seq * row_bytes; }
  MKERNEL_RING_HD uint64_t buffer_bytes() const { return 2 * shard_bytes(); }
};

// The symmetric data region a call needs on every rank.
inline uint64_t data_bytes(const Geometry& geo) { return 2 * geo.buffer_bytes(); }

// Buffer `buf` of the data region `data` (k at +0, v at +shard_bytes).
MKERNEL_RING_HD inline uint8_t* buffer(uint8_t* data, const Geometry& geo, int buf) {
  return data + static_cast<uint64_t>(buf) * geo.buffer_bytes();
}

// --- the whole-sequence mode (every shard length a multiple of chunk_rows; causal: zigzag) ----
// One engine launch per call: the engine attends the local queries to a virtual K/V of W * seq
// rows per batch in this rank's data region, [b][W * seq][h_kv][d] for k, the same for v after
// it, in which the shard of ring step j sits at position p = W - 1 - j (rows p * seq ..). The
// engine walks key blocks last to first, so it consumes the shards in the order they arrive:
// its own (step 0) first. No buffer is reused within a call, so no credits. The local shard is
// memcpy'd into position W - 1 here (then mark_whole: its flags); one send kernel copies it
// (step 0) into position W - 2 at the next rank and forwards steps 1 .. W-2 (waiting for each
// item's arrival) to the next rank's position p - 1, releasing flag (b, p - 1, chunk) there.
// The send kernel is enqueued before the engine: the engine's CTAs may take every SM of the
// rank while they wait for the peers' sends.
MKERNEL_RING_HD constexpr uint32_t whole_slot(int world, int chunks, int b, int p, int chunk) {
  return comm::FlagSlot::kOpSlotBase +
         static_cast<uint32_t>((b * world + p) * chunks + chunk);
}
constexpr uint32_t kMaxWholeFlags = comm::kMaxRanks * kMaxItems;  // b * W * chunks
static_assert(comm::FlagSlot::kOpSlotBase + kMaxWholeFlags <= comm::FlagSlot::kOpSlotEnd,
              "the whole-sequence mode's flags fit the op range");
inline uint64_t whole_data_bytes(const Geometry& geo, int world) {
  return 2 * static_cast<uint64_t>(world) * geo.shard_bytes();
}
// Forwards steps 0 .. W-2 (the local shard k/v for step 0) to the next rank. causal (zigzag
// shards): a receiver that sees only the first half of a shard gets that half first.
cudaError_t send_whole(const comm::GroupDevice& g, const Geometry& geo, const void* k,
                       const void* v, bool causal, int ctas, cudaStream_t stream);
// The send kernel's grid for `ctas` requested CTAs (send_whole launches this many).
int send_whole_grid(const comm::GroupDevice& g, const Geometry& geo, int ctas);
// One thread waits (bounded) until each of the send kernel's `grid` CTAs of this call has
// started (flag send_started_slot(i) = e, released by the CTA on entry). On the caller's stream
// before the engine (MKERNEL_RING_SEND_FIRST=1): the engine's CTAs then cannot take the SMs the
// send kernel needs — under MPS the device's SM count is not the rank's share, so leaving
// `ctas` SMs free in the engine's grid does not guarantee it (session 7 run 3: at the GQA shape
// one rank's send ran only after its engine, serializing the ranks).
cudaError_t wait_send_started(const comm::GroupDevice& g, int grid, cudaStream_t stream);
// Releases the flags of position `pos`, batches [b0, b1), at rank `peer` (this rank: its own
// shard at W - 1), after the caller copied those rows there in stream order (a memcpy): flags
// (b, pos, chunk) = e.
cudaError_t mark_whole(const comm::GroupDevice& g, const Geometry& geo, int peer, int pos, int b0,
                       int b1, cudaStream_t stream);

// --- dK/dV travelling (the fused ring backward, csrc/ring_attention.cpp; one node) -----------
// The backward's dQ-warp kernel on arrival (attention_bwd_api.h BwdProblem::ring_dk_dst) stores
// each source's fp32 dK/dV partial straight into that source's receive area — the data region
// after the whole mode's virtual K/V (key_grads_offset): fp32 [dk: W writers][b][s][h_kv][d],
// then dv alike (ring_travel_offset) — and releases one flag there per (writer, batch, kv head,
// 64 keys) (key_grads_slot + ring_travel_flag). sum_key_grads, on the owner's stream after its
// own backward, waits (bounded, naming the writer) for the W flags of each tile and sums the
// slots in rank order from 0.f — the reduce_scatter's order (collectives.cu reduce_elems), so
// dk / dv are bit for bit what the reduce-scatter path gives — into dk / dv in the input dtype.
// The receive area is rewritten only by the next call's writers, which pass its entry barrier
// after this rank has entered it, i.e. after this call's sum.
struct KeyGradShape {
  int batch = 0, seq = 0, heads_kv = 0, head_dim = 0;
  MKERNEL_RING_HD long long slot_floats() const {
    return static_cast<long long>(batch) * seq * heads_kv * head_dim;
  }
};
inline uint64_t key_grads_offset(const Geometry& geo, int world) {
  return whole_data_bytes(geo, world);
}
inline uint64_t key_grads_bytes(const KeyGradShape& shape, int world) {
  return 2ull * static_cast<uint64_t>(world) * static_cast<uint64_t>(shape.slot_floats()) * 4;
}
constexpr uint32_t kKeyGradSlotBase = send_started_slot(kMaxSendCtas);
// The first flag of writer `writer` in an owner's flag region (ring_travel_flag indexes from it).
MKERNEL_RING_HD inline uint64_t key_grads_slot(const KeyGradShape& shape, int writer) {
  return kKeyGradSlotBase +
         static_cast<uint64_t>(writer) *
             attention::ring_travel_flags(shape.batch, shape.heads_kv, shape.seq);
}
// Whether W writers' flags fit the op range (else the caller reduce-scatters).
inline bool key_grads_fit(const KeyGradShape& shape, int world) {
  return world <= attention::kRingTravelMaxWorld &&
         key_grads_slot(shape, world) <= comm::FlagSlot::kOpSlotEnd;
}
// dk, dv: [b, s, h_kv, d] of bf16 (else fp16), 8-byte aligned. cudaErrorInvalidValue when the
// shape's flags don't fit, d is not a multiple of 4 or this rank has no data region.
cudaError_t sum_key_grads(const comm::GroupDevice& g, const KeyGradShape& shape, uint64_t offset,
                          bool bf16, void* dk, void* dv, cudaStream_t stream);

// --- the whole-sequence mode across nodes (ring13; default since s11run2, =0 pins it off) ----
// The same virtual K/V, flags and engine launch as on one node; only who fills the positions
// changes. Every rank's shard goes straight to every other rank (an all-gather, no forwarding):
//   same node : the send kernel stores it into each node-mate's virtual K/V at the position that
//               rank keeps for it, p = (rank - mate - 1) mod W, and releases flag (b, p, chunk)
//               there (peer memory, as on one node);
//   other node: the send kernel stages it into the inter-node send area (its offsets in k, then
//               v after k: [k | v], 2 * shard_bytes) chunk by chunk, counts the chunks of each
//               piece (GroupDevice::net.stage_count[piece]); the CTA staging a piece's last chunk
//               pushes it through the FIFO to every rank of another node: two commands per rank
//               (k rows, then v rows with the signal), landing in the receiver's receive half of
//               the call's parity at block `rank` (nodes_net_block bytes per source), arrival
//               flag nodes_net_slot(rank, piece) = e;
//   receive   : for each rank of another node and each of its chunks: wait (bounded) for the
//               piece's arrival flag, copy the chunk from the receive half into this rank's
//               virtual K/V at p = (src - rank - 1) mod W, release flag (b, p, chunk) here.
// Chunks go last first (the engine walks key blocks from the last one down). Work items of a
// CTA: [stage][same node][receive], in that order on every CTA, so no CTA waits before all of
// its sends are out; a receive waits only for another rank's sends (no cycle). Every rank sends
// to every rank of another node in every call, which is what makes the receive halves' parity
// rule hold (net_ops.cuh; the fused ag_gemm's argument). The send area is rewritten by the next
// call only after this kernel's net_wait_sent (its last push per CTA) and the caller's stream
// waits for this kernel before the call's end.
constexpr uint32_t kNetSlotBase = 1536;  // arrival slots [1536, 2048): free (collectives [0, 512),
constexpr int kNetPieces = 16;           // fused ag_gemm [1024, 1536), MoE [2048, 2624), gemm_rs above)
MKERNEL_RING_HD constexpr uint32_t nodes_net_slot(int src, int piece) {
  return kNetSlotBase + static_cast<uint32_t>(src * kNetPieces + piece);
}
static_assert(kNetSlotBase + comm::kMaxRanks * kNetPieces <= 2048, "below the MoE's arrival slots");
static_assert(kNetPieces <= comm::kNetStageCounters, "a stage counter per piece");
// Bytes per source rank in a receive half ([k | v] of one shard, 256-byte multiple).
inline uint64_t nodes_net_block(const Geometry& geo) {
  return (2 * geo.shard_bytes() + 255) / 256 * 256;
}
// The inter-node areas a call needs (SymmetricGroup::ensure_net): send [k | v], and two receive
// halves of W blocks.
inline uint64_t nodes_send_bytes(const Geometry& geo) { return 2 * geo.shard_bytes(); }
inline uint64_t nodes_recv_bytes(const Geometry& geo, int world) {
  return 2 * static_cast<uint64_t>(world) * nodes_net_block(geo);
}
// Chunks per piece: at most kNetPieces pieces per shard, at least kNodesMinPieceBytes of k + v
// per piece where the shard has that much (a command's fixed cost in the proxy stays small).
constexpr uint64_t kNodesMinPieceBytes = 256ull << 10;
MKERNEL_RING_HD inline int nodes_items_per_piece(const Geometry& geo) {
  const int items = geo.batch * geo.chunks;
  const uint64_t item_bytes = 2 * static_cast<uint64_t>(geo.chunk_rows) * geo.row_bytes;
  int ipp = (items + kNetPieces - 1) / kNetPieces;
  const uint64_t by_bytes = (kNodesMinPieceBytes + item_bytes - 1) / item_bytes;
  if (by_bytes > static_cast<uint64_t>(ipp)) ipp = static_cast<int>(by_bytes < static_cast<uint64_t>(items) ? by_bytes : items);
  return ipp < 1 ? 1 : ipp;
}
// The send kernel across nodes (side stream, before the engine; the local shard's own copy into
// position W - 1 is the caller's memcpy + mark_whole, as on one node). k, v: the op's inputs.
// Errors (cudaErrorInvalidValue): no inter-node path, areas or arrival slots too small, shapes
// outside the whole mode.
cudaError_t send_whole_nodes(const comm::GroupDevice& g, const Geometry& geo, const void* k,
                             const void* v, int ctas, cudaStream_t stream);

// The call's entry: e = op counter + 1, the node's entry barrier with `signature` (every rank
// finished its previous call of the group, so its buffers may be written). One thread.
cudaError_t begin(const comm::GroupDevice& g, uint64_t signature, cudaStream_t stream);

// send `step` (see above). k and v: what this rank attends at `step` (the local shard for step
// 0, its buffer step % 2 otherwise). ctas: grid size (a few: it shares the SMs with the engine).
cudaError_t send(const comm::GroupDevice& g, const Geometry& geo, const void* k, const void* v,
                 int step, int ctas, cudaStream_t stream);

// release `step`: buffer step % 2 of this rank is free (credit to rank r - 1). One thread.
cudaError_t release(const comm::GroupDevice& g, int step, cudaStream_t stream);

// The call's end: the op counter advances to e. One thread; after every kernel of the call.
cudaError_t end(const comm::GroupDevice& g, cudaStream_t stream);

}  // namespace mkernel::ring_attention
