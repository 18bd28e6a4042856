// Host API of the MoE's own inter-node exchange (plain C++, no torch; glue: csrc/moe_net.h): the
// control half of a block exchange between ranks of different nodes whose bytes move by the
// copy engines (cudaMemcpyAsync into and out of the inter-node staging areas, which on the
// loopback / tcp transports are cudaHostRegister'ed host memory) and travel through the
// substrate's FIFO -> Go proxy -> transport path (kernels/comm/net_ops.cuh). Each launch here is
// one warp of one CTA: its lane 0 pushes FIFO commands or waits on arrival flags.
//
// One exchange (call number e, every rank, three streams forked from the caller's):
//   caller:  begin: e = the group's next call number (stored in state[0]; the epoch advances as
//            for any kernel of the group); a READY signal (slot kReady + me = e) to every rank
//            of another node: "my earlier ops are done with my receive area".
//   send:    wait READY from every such rank; per piece: d2h copy into the send area, then
//            push the piece (WRITE_SIGNAL, slot data_slot(me, piece) = e) to every such rank;
//            finish: wait until the transport has read every piece (the send area may be
//            rewritten) and for DONE from every such rank (its receive area is free again).
//   receive: per (piece, source): wait data_slot(source, piece) >= e, then h2d copy out of the
//            receive area; then DONE (slot kDone + me = e) to every such rank.
// Arrival slots [kSlotBase, kSlotEnd) are the MoE's (the collectives use [0, 512)).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "../comm/group_device.h"

namespace mkernel::moe_net {

constexpr uint32_t kPieces = 16;  // pieces per block (the copies and pushes pipeline over them)
constexpr uint32_t kSlotBase = 2048;
constexpr uint32_t kReady = kSlotBase;                      // + src rank
constexpr uint32_t kDone = kSlotBase + comm::kMaxRanks;     // + src rank
constexpr uint32_t kData = kSlotBase + 2 * comm::kMaxRanks;  // + src * kPieces + piece
constexpr uint32_t kSlotEnd = kData + comm::kMaxRanks * kPieces;
static_assert(kSlotEnd <= 4096, "the MoE's arrival slots fit the group's 4096");

constexpr uint32_t data_slot(int src, uint32_t piece) {
  return kData + static_cast<uint32_t>(src) * kPieces + piece;
}

// state: 2 device words, [0] the call number e, [1] the ticket of the send stream's last data
// push. op: the WaitOp the diagnostics name (kOpMoeDispatch / kOpMoeCombine).
cudaError_t launch_begin(const comm::GroupDevice& g, uint64_t* state, int32_t op, cudaStream_t s);

// Waits until slot_base + p holds e for every rank p of another node (peer < 0), or slot_base
// for `peer` alone.
cudaError_t launch_wait(const comm::GroupDevice& g, const uint64_t* state, int peer,
                        uint32_t slot_base, int32_t op, cudaStream_t s);

// Pushes send_area[local_off + p * local_stride, +bytes) to recv_area[remote_off, +bytes) of
// every rank p of another node with arrival slot `slot` = e (bytes 0: a pure signal). With
// `record`, state[1] = the last push's ticket.
cudaError_t launch_push(const comm::GroupDevice& g, uint64_t* state, uint64_t local_off,
                        uint64_t local_stride, uint64_t remote_off, uint64_t bytes,
                        uint32_t slot, bool record, int32_t op, cudaStream_t s);

// The send stream's end: waits until the transport finished the push state[1] names, then for
// DONE (kDone + p = e) from every rank p of another node.
cudaError_t launch_finish(const comm::GroupDevice& g, const uint64_t* state, int32_t op,
                          cudaStream_t s);

// The dispatch's row gather (no group memory, no wait): for every q < n whose token[q] lies in
// [row0, row0 + rows), dst row q = src row token[q] - row0 (rows of row_bytes bytes); every
// other row of dst is left as it is (token -1: a row past the counts, never written). Launched
// once per landed range (a source's piece, or this rank's own rows), each dst row is written by
// exactly the launch whose range holds its token. 16-byte accesses where row_bytes and both
// pointers allow, else 4 or 1.
cudaError_t launch_gather_rows(const void* src, int64_t row0, int64_t rows,
                               const int64_t* token, int64_t n, void* dst, int64_t row_bytes,
                               int sm_count, cudaStream_t s);

// moe17 (the combine's pipelined exchange): out[e0 + i] (out_type) = the fp32 sum over ranks
// s = 0..world-1, in order, of block s's element e0 + i (in's type), for i < n: block me is
// `own`, block s another rank's in the receive area at s * stride. Rounded once: the bits of
// sum = block(0).float(); sum += block(s) ...; sum.to(out_type). in is kF32 or out_type.
enum class SumType { kF32, kBF16, kF16 };
// Loads launch_sum_blocks' kernels for (in, out_type) now: under CUDA's lazy loading (the default)
// a kernel's first launch loads its module and may synchronize the context, and the receive
// stream's first sum is issued after the send stream's finish, which spins until the peers'
// DONE: a host stuck there never queues its own DONE (session 19 call C: both ranks timed out at
// DONE on their first pipelined combine). Call before the exchange's first spinning launch.
cudaError_t preload_sum_blocks(SumType in, SumType out_type);
cudaError_t launch_sum_blocks(const void* recv, uint64_t stride, const void* own, int me, int world,
                              int64_t e0, int64_t n, SumType in, void* out, SumType out_type,
                              int sm_count, cudaStream_t s);

}  // namespace mkernel::moe_net
