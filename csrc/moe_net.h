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

#include <cstdint>

namespace mkernel {
namespace moe {

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
at::Tensor exchange_nodes(const char* op, int32_t op_id, const at::Tensor& src, bool all_to_all,
                          int64_t group, int64_t world_size, bool join = true);
void exchange_join();

}  // namespace moe
}  // namespace mkernel

#endif  // MKERNEL_WITH_CUDA
