// The control half of the MoE's inter-node exchange (protocol: moe_net_api.h): one-warp kernels
// whose lane 0 pushes FIFO commands or waits on the data path's arrival flags; the bytes move
// by the copy engines between these launches, on the same streams.
#include "../comm/net_ops.cuh"
#include "moe_net_api.h"

namespace mkernel::moe_net {
namespace {

using comm::GroupDevice;

constexpr uint64_t kNoTicket = ~0ull;

__device__ __forceinline__ bool other_node(const GroupDevice& g, int p) {
  return p != g.rank && g.node_of[p] != g.node_of[g.rank];
}

// The call number and READY to every rank of another node (the caller's stream has finished
// every earlier op of the group here, its reads of this rank's receive area included).
__global__ void __launch_bounds__(32, 1) begin_kernel(const __grid_constant__ GroupDevice g,
                                                      uint64_t* state, int32_t op) {
  if (threadIdx.x != 0) return;
  const uint64_t e = comm::op_begin(g);
  state[0] = e;
  state[1] = kNoTicket;
  comm::NetCursor cur;
  for (int p = 0; p < g.world; ++p) {
    if (other_node(g, p)) comm::net_put_signal(g, cur, p, 0, 0, 0, kReady + g.rank, e, op);
  }
  comm::op_end(g, e);
}

__global__ void __launch_bounds__(32, 1) wait_kernel(const __grid_constant__ GroupDevice g,
                                                     const uint64_t* state, int peer,
                                                     uint32_t slot_base, int32_t op) {
  if (threadIdx.x != 0) return;
  const uint64_t e = *reinterpret_cast<const volatile uint64_t*>(state);
  if (peer >= 0) {
    comm::net_wait(g, peer, slot_base, e, comm::WaitSite{op});
    return;
  }
  for (int p = 0; p < g.world; ++p) {
    if (other_node(g, p)) {
      comm::net_wait(g, p, slot_base + static_cast<uint32_t>(p), e, comm::WaitSite{op});
    }
  }
}

// The copy engine wrote send_area before this launch (stream order): the kernel boundary makes
// those writes visible to the proxy's host thread before the command is published.
__global__ void __launch_bounds__(32, 1) push_kernel(const __grid_constant__ GroupDevice g,
                                                     uint64_t* state, uint64_t local_off,
                                                     uint64_t local_stride, uint64_t remote_off,
                                                     uint64_t bytes, uint32_t slot, int record,
                                                     int32_t op) {
  if (threadIdx.x != 0) return;
  const uint64_t e = *reinterpret_cast<const volatile uint64_t*>(state);
  comm::NetCursor cur;
  uint64_t ticket = kNoTicket;
  for (int p = 0; p < g.world; ++p) {
    if (!other_node(g, p)) continue;
    const uint64_t off = local_off + static_cast<uint64_t>(p) * local_stride;
    ticket = comm::net_put_signal(g, cur, p, off, remote_off, bytes, slot, e, op);
  }
  if (record && ticket != kNoTicket) state[1] = ticket;
}

__global__ void __launch_bounds__(32, 1) finish_kernel(const __grid_constant__ GroupDevice g,
                                                       const uint64_t* state, int32_t op) {
  if (threadIdx.x != 0) return;
  const uint64_t e = *reinterpret_cast<const volatile uint64_t*>(state);
  const uint64_t ticket = *reinterpret_cast<const volatile uint64_t*>(state + 1);
  int last = -1;
  for (int p = 0; p < g.world; ++p) last = other_node(g, p) ? p : last;
  if (ticket != kNoTicket && last >= 0) comm::net_wait_sent(g, ticket, last, op);
  for (int p = 0; p < g.world; ++p) {
    if (other_node(g, p)) comm::net_wait(g, p, kDone + static_cast<uint32_t>(p), e, comm::WaitSite{op});
  }
}

}  // namespace

cudaError_t launch_begin(const GroupDevice& g, uint64_t* state, int32_t op, cudaStream_t s) {
  begin_kernel<<<1, 32, 0, s>>>(g, state, op);
  return cudaGetLastError();
}

cudaError_t launch_wait(const GroupDevice& g, const uint64_t* state, int peer, uint32_t slot_base,
                        int32_t op, cudaStream_t s) {
  wait_kernel<<<1, 32, 0, s>>>(g, state, peer, slot_base, op);
  return cudaGetLastError();
}

cudaError_t launch_push(const GroupDevice& g, uint64_t* state, uint64_t local_off,
                        uint64_t local_stride, uint64_t remote_off, uint64_t bytes, uint32_t slot,
                        bool record, int32_t op, cudaStream_t s) {
  push_kernel<<<1, 32, 0, s>>>(g, state, local_off, local_stride, remote_off, bytes, slot,
                               record ? 1 : 0, op);
  return cudaGetLastError();
}

cudaError_t launch_finish(const GroupDevice& g, const uint64_t* state, int32_t op, cudaStream_t s) {
  finish_kernel<<<1, 32, 0, s>>>(g, state, op);
  return cudaGetLastError();
}

}  // namespace mkernel::moe_net
