// The MoE's own inter-node exchange (the default on emulated nodes with one rank each, host
// staging or GPU-direct; MKERNEL_MOE_NODES_PATH=substrate opts out, =ce forces it): blocks of rows between
// ranks of different nodes, moved by the copy engines into and out of the substrate's inter-node
// staging areas and carried by its FIFO -> Go proxy -> transport path, pipelined over pieces
// (kernels/moe/moe_net_api.h has the protocol). It replaces the substrate's all_gather /
// reduce_scatter in moe_nodes.h where every node holds one rank of the group (the copy engines
// move whole blocks at PCIe rate; the collectives' SM-driven staging measured 5.3 GB/s at W=2
// over 2 nodes against 18.65 for the raw loopback transport and 27.7 for copy-engine d2h/h2d in
// the same run, s8run2).
#pragma once

#ifdef MKERNEL_WITH_CUDA

#include <ATen/ATen.h>
#include <ATen/cuda/CUDAContext.h>
#include <ATen/cuda/CUDAEvent.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <functional>
#include <memory>

namespace mkernel {
namespace moe {

// A 0|1 knob read at every call (registered in env_knobs.cpp): `unset` where it is unset or empty;
// any other value raises a ValueError naming the variable.
bool env_flag(const char* name, bool unset);
// The next stream of torch's pool, for an exchange's send / receive side or mode 1's hooks (session
// 20: a set of mkernel's own streams created together, on distinct hardware queues, measured no faster).
at::cuda::CUDAStream side_stream(c10::DeviceIndex device);

// Every rank of the group is alone on its node, and: MKERNEL_MOE_NODES_PATH=ce, or (unset) the
// nodes are emulated on this host (MKERNEL_EMULATED_NODE) and the inter-node areas are host
// staging or, under MKERNEL_NET_GDR=1, the GPU-direct emulation's GPU memory. The same answer on
// every rank.
bool exchange_by_copy_engine(const char* op, int64_t group, int64_t world_size,
                             const at::Device& device);

// all_to_all false: src [n, ...] from every rank -> [W*n, ...], rank s's rows at [s*n, (s+1)*n)
// (an all_gather). all_to_all true: src [W*n, ...], rows [p*n, (p+1)*n) for rank p -> [W*n, ...],
// block s = what rank s sent to this rank (block `rank` = this rank's own). Every rank calls it
// in the same op order with the same shape. op_id: the WaitOp its diagnostics name.
// `join`: the caller's stream waits for the exchange before it returns (the default); false:
// the caller must call exchange_join(result) before reading the result or issuing another op of
// the group (work of its own, e.g. ATen ops on other tensors, may run in between).
// `copy_own` false (moe14): this rank's own block of the result is left unwritten (the caller
// reads it from src), and the side streams fork right after begin instead of after that copy.
at::Tensor exchange_nodes(const char* op, int32_t op_id, const at::Tensor& src, bool all_to_all,
                          int64_t group, int64_t world_size, bool join = true,
                          bool copy_own = true);
void exchange_join();

// Every inter-node area of the group (send and receive) is GPU memory (the GPU-direct path, or
// its emulation under MKERNEL_NET_GDR=1): kernels may write and read them directly. The same
// answer on every rank.
bool net_areas_on_device(const char* op, int64_t group, int64_t world_size, const at::Device& device);

// moe17: the combine's reduce across nodes with the partial sums produced inside the pieces (every
// rank alone on its node; net_areas_on_device). produce(p, r0, r1, dst, stream) writes rows
// [r0, r1) of the partials for rank p ([rows, cols] of part_dtype, contiguous rows) to dst on
// `stream`: other ranks' straight into the send area, piece by piece, each piece pushed as soon
// as its launch ends; this rank's own on the receive stream while the pieces are on the link.
// Returns out [out_rows, cols] of out_dtype: per row, the fp32 sum over ranks s = 0..W-1 in order
// of rank s's partial for this rank, rounded once (part_dtype is fp32 or out_dtype), each piece's
// rows summed as they land, read from the receive area (no unstage copy). Joined on the caller's
// stream when it returns. Every rank calls it in the same op order with the same shape.
using ProduceRows = std::function<void(int rank, int64_t row_begin, int64_t row_end, void* dst,
                                       cudaStream_t stream)>;
at::Tensor reduce_nodes_pipelined(const char* op, int32_t op_id, int64_t group, int64_t world_size,
                                  const at::Device& device, int64_t rows, int64_t cols,
                                  at::ScalarType part_dtype, int64_t out_rows, at::ScalarType out_dtype,
                                  const ProduceRows& produce);

// The dispatch's all_gather with a routing head, in two halves, so that the caller derives its
// layout while the rows are still on the link and gathers each piece's rows as it lands (the
// areas and slots: kernels/moe/moe_net_plan.h). src [n, ...] and head [hn, ...] from every rank.
//
// gather_headed_start: begin on the caller's stream, then the send stream (READY, the head
// first, then src's pieces, then finish: the transport's done count and every peer's DONE) and
// the receive stream (every other rank's head, unstaged into head_out; then per piece and
// other rank the arrival wait and the unstage into out; then DONE); this rank's head is copied
// into head_out on the caller's stream, which then waits for the others': head_out ([W*hn,
// ...], rank p's at [p*hn, (p+1)*hn)) is readable on the caller's stream when it returns. out
// ([W*n, ...]) holds rank p's rows at [p*n, (p+1)*n) for every OTHER rank once their pieces
// landed; this rank's own block is not copied (the caller reads its own rows from src).
// Everything the exchange's side streams do is queued before it returns: no wait of this rank
// or of a peer depends on this host's progress afterwards (moe12: a host call that waits for
// the device between the two halves, e.g. a lazily loaded kernel's first launch, used to
// deadlock both ranks at DONE when DONE was queued by the second half).
//
// gather_headed_finish: on_rows(rank, row_begin, row_end, stream) for the rows of each other
// rank that each piece completed (rows straddling two pieces go with the later one; every row
// of every other rank exactly once), on a stream of their own: piece c's after the receive
// stream unstaged piece c, the first of them after waiting for `after` (recorded on the
// caller's stream, e.g. after its layout). The exchange is then pending: exchange_join()
// before reading out or issuing another op of the group, exactly as exchange_nodes(join=false).
struct HeadedGather;
using RowsLanded = std::function<void(int src_rank, int64_t row_begin, int64_t row_end,
                                      cudaStream_t stream)>;
std::shared_ptr<HeadedGather> gather_headed_start(const char* op, int32_t op_id,
                                                  const at::Tensor& src, const at::Tensor& head,
                                                  int64_t group, int64_t world_size,
                                                  bool timed = false);
const at::Tensor& headed_out(const HeadedGather& x);
const at::Tensor& headed_head_out(const HeadedGather& x);
void gather_headed_finish(HeadedGather& x, at::cuda::CUDAEvent& after,
                          const RowsLanded& on_rows);
// With `timed`: the send and receive streams' ends as timing events (after finish), for
// MKERNEL_MOE_PHASES; nullptr otherwise.
const at::cuda::CUDAEvent* headed_sent_event(const HeadedGather& x);
const at::cuda::CUDAEvent* headed_received_event(const HeadedGather& x);

}  // namespace moe
}  // namespace mkernel

#endif  // MKERNEL_WITH_CUDA
