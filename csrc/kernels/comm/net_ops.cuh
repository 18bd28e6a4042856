// Device side of the inter-node path (GroupDevice::net, filled by csrc/comm/net_path.cpp): a
// kernel pushes WRITE / WRITE_SIGNAL commands into the host-mapped FIFO that the Go proxy drains
// into the transport (mkernel/fifo.h), and waits on the arrival flags the transport releases.
//
//   local side                                      peer (another node)
//   stores to g.net.send_area[local_off, +bytes)
//   CTA barrier (+ TMA store wait, see below)
//   one lane: net_put_signal(..., slot, value) ──▶  proxy ─▶ transport ─▶ recv_area[remote_off, +bytes)
//                                                   then arrival[slot] = value (never lowered)
//                                                   net_wait(g, src, slot, value, site) ─▶ read recv_area
//
// Ordering the producer must provide: the proxy (a CPU thread) may read send_area as soon as it
// sees the command's seq word, so every store to the data must be visible at system scope
// before seq. The push writes the slot, then stores seq with ONE st.release.sys: after a CTA
// barrier that covers every thread's stores, the barrier orders them before the pushing lane's
// release, and the system-scope release (cumulative) orders them — and the slot — before the
// command's publication. TMA stores (async proxy) must first be complete in memory
// (cp.async.bulk.wait_group 0 by the thread that issued them: tma_store_wait_all_writes) before
// that barrier. After net_wait returns, TMA loads from recv_area need fence_proxy_async_global.
//
// Source reuse: send_area[local_off, +bytes) may be overwritten once the command finished
// (net_wait_sent); a receiver's recv_area may be overwritten by the next call once the receiver
// said it is done with it (an op-level acknowledgement, e.g. the entry barrier of the next call).
//
// Every wait is bounded by g.timeout_ns and, on timeout or proxy failure, records a
// WaitDiagnostic (kWaitFifoCredit / kWaitFifoFailed / kWaitNetArrival / kWaitNetSent, naming
// the peer) and traps: no printf, and the only calls are the cold net_push_failed and (FailPath
// kCall, the default) group_sync's fail_wait.
#pragma once

#include <mkernel/fifo.h>

#include <cstdint>

#include "group_device.h"
#include "group_sync.cuh"
#include "wait_diagnostic.h"

namespace mkernel::comm {

// A pushing lane's cached view of the FIFO's tail (fifo.h producer protocol step 2): keep one
// per pushing thread for the kernel's lifetime (a register); the tail is re-read over PCIe only
// when the cached value grants no credit.
struct NetCursor {
  uint64_t cached_tail = 0;
};

__device__ __forceinline__ mk_fifo_ctrl* net_fifo(const GroupDevice& g) {
  return static_cast<mk_fifo_ctrl*>(g.net.fifo);
}

// Cold path of a failed push: the FIFO's state into the group's WaitDiagnostic, then trap.
// Takes scalars, not the GroupDevice: taking the address of a kernel parameter would copy the
// whole Params struct to local memory. P: how it records and traps (group_sync.cuh FailPath).
template <FailPath P = FailPath::kCall>
__device__ __noinline__ void net_push_failed(WaitDiagnostic* diag, int32_t group, int32_t rank,
                                             int32_t world, mk_fifo_ctrl* c, uint32_t capacity,
                                             mk_fifo_wait_result r, int peer, uint32_t slot,
                                             int32_t op) {
  if (r.rc == MK_FIFO_FAILED) {
    // The proxy (or another producer) failed the FIFO: error_peer names the rank it blames.
    const int blamed = r.error_peer < static_cast<uint32_t>(world) ? static_cast<int>(r.error_peer) : peer;
    fail_wait_via<P>(diag, group, rank, reinterpret_cast<const uint64_t*>(&c->error),
                     MK_FIFO_ERR_NONE, r.error, r.elapsed_ns,
                     WaitSite{op, kWaitFifoFailed, blamed, static_cast<int32_t>(slot)});
  }
  // No credit: the proxy consumed nothing for timeout_ns. expected = the tail that frees the
  // ticket's slot, seen = the tail last read.
  fail_wait_via<P>(diag, group, rank, &c->tail, r.ticket - capacity + 1, r.seen, r.elapsed_ns,
                   WaitSite{op, kWaitFifoCredit, peer, static_cast<int32_t>(slot)});
}

// One command from one lane. Returns its ticket (for net_wait_sent). P: the failure path.
template <FailPath P = FailPath::kCall>
__device__ __forceinline__ uint64_t net_push(const GroupDevice& g, NetCursor& cur, const mk_fifo_cmd& cmd,
                                             int32_t op) {
  // In the LL format (the data path's default) a system fence before the entry makes everything
  // this thread (and, cumulatively, its CTA after a barrier) stored to the data visible
  // system-wide first; it is taken only when the command carries data (bytes != 0): a pure
  // signal orders nothing before it and is published with no system fence (fifo.h, "The LL slot
  // format"). In the seq format (MKERNEL_FIFO_LL=0) mk_fifo_push_device publishes seq with a
  // system-scope release, which orders the same stores.
  const mk_fifo_wait_result r =
      g.net.fifo_format == MK_FIFO_FORMAT_LL
          ? mk_fifo_push_device_ll(net_fifo(g), g.net.fifo_capacity, g.net.fifo_head, &cur.cached_tail, cmd,
                                   g.timeout_ns, cmd.bytes != 0)
          : mk_fifo_push_device(net_fifo(g), g.net.fifo_capacity, g.net.fifo_head, &cur.cached_tail, cmd,
                                g.timeout_ns);
  if (r.rc != MK_FIFO_OK) {
    net_push_failed<P>(g.diag, g.group_id, g.rank, g.world, net_fifo(g), g.net.fifo_capacity, r,
                       cmd.peer, cmd.arrival_slot, op);
  }
  return r.ticket;
}

// WRITE send_area[local_off, +bytes) to peer's recv_area[remote_off, +bytes), then release
// `value` into the peer's arrival flag `slot` once the data (and every earlier command to that
// peer) is complete there. bytes may be 0 (a pure signal). One lane calls it, after the stores
// it sends are complete (see the header comment).
template <FailPath P = FailPath::kCall>
__device__ __forceinline__ uint64_t net_put_signal(const GroupDevice& g, NetCursor& cur, int peer,
                                                   uint64_t local_off, uint64_t remote_off, uint64_t bytes,
                                                   uint32_t slot, uint64_t value, int32_t op = kOpNone) {
  mk_fifo_cmd cmd{};
  cmd.kind = MK_FIFO_WRITE_SIGNAL;
  cmd.peer = static_cast<uint16_t>(peer);
  cmd.arrival_slot = slot;
  cmd.local_buf = g.net.send_buf_id;
  cmd.remote_buf = g.net.recv_buf_id;
  cmd.local_off = local_off;
  cmd.remote_off = remote_off;
  cmd.bytes = bytes;
  cmd.arrival_seq = value;
  return net_push<P>(g, cur, cmd, op);
}

// WRITE without a signal (a later net_put_signal to the same peer covers it: its flag is
// released only after every earlier command to that peer is complete).
template <FailPath P = FailPath::kCall>
__device__ __forceinline__ uint64_t net_put(const GroupDevice& g, NetCursor& cur, int peer, uint64_t local_off,
                                            uint64_t remote_off, uint64_t bytes, int32_t op = kOpNone) {
  mk_fifo_cmd cmd{};
  cmd.kind = MK_FIFO_WRITE;
  cmd.peer = static_cast<uint16_t>(peer);
  cmd.local_buf = g.net.send_buf_id;
  cmd.remote_buf = g.net.recv_buf_id;
  cmd.local_off = local_off;
  cmd.remote_off = remote_off;
  cmd.bytes = bytes;
  return net_push<P>(g, cur, cmd, op);
}

// Waits until *flag (a host-memory arrival flag of the path) >= value: `peer`'s data arrived.
// Bounded by timeout_ns, and it also watches the FIFO's error word: when the proxy fails (a
// peer's process or connection is gone) the kernel records kWaitFifoFailed naming the peer the
// proxy blamed and traps at once. (A dead peer's kernel may fault on its vanished host mappings
// and, under MPS, end every client of the GPU within a fraction of a second: the survivors must
// record who died before that.)
template <FailPath P = FailPath::kCall>
__device__ __forceinline__ uint64_t net_wait_arrival(const GroupDevice& g, const uint64_t* flag, uint64_t value,
                                                     uint64_t timeout_ns, int peer, WaitSite site) {
  mk_fifo_ctrl* c = net_fifo(g);
  const uint64_t seen =
      wait_geq<P>(flag, value, timeout_ns, g.diag, g.group_id, g.rank, site, &c->error);
  if (seen < value) {
    mk_fifo_wait_result r{};
    r.rc = MK_FIFO_FAILED;
    r.error = mk_fifo_ld_acquire_sys_u32(&c->error);
    r.error_peer = *reinterpret_cast<volatile uint32_t*>(&c->error_peer);
    r.seen = seen;
    net_push_failed<P>(g.diag, g.group_id, g.rank, g.world, c, g.net.fifo_capacity, r, peer,
                       site.index, site.op);
  }
  return seen;
}

// Waits until peer's signal `value` has arrived in this rank's arrival flag `slot` (the data
// sent before it is in recv_area). site.op names the op; what/peer/index are filled here.
template <FailPath P = FailPath::kCall>
__device__ __forceinline__ uint64_t net_wait(const GroupDevice& g, int peer, uint32_t slot, uint64_t value,
                                             WaitSite site) {
  site.what = kWaitNetArrival;
  site.peer = peer;
  site.index = static_cast<int32_t>(slot);
  return net_wait_arrival<P>(g, g.net.arrival + slot, value, g.timeout_ns, peer, site);
}

// Waits until command `ticket` and every earlier one finished (the transport is done reading
// their source memory: send_area may be rewritten). Bounded by g.timeout_ns like wait_geq, and it
// also watches the FIFO's error word: when the proxy fails (a peer's connection is gone) the
// record names the peer the proxy blamed (else `peer`, the command's destination) at once,
// instead of a timeout naming whichever destination came last.
template <FailPath P = FailPath::kCall>
__device__ __forceinline__ void net_wait_sent(const GroupDevice& g, uint64_t ticket, int peer, int32_t op) {
  mk_fifo_ctrl* c = net_fifo(g);
  uint64_t seen = ld_acquire_sys(&c->done);
  if (seen > ticket) return;
  const uint64_t start = globaltimer_ns();
  for (;;) {
    __nanosleep(64);
    seen = ld_acquire_sys(&c->done);
    if (seen > ticket) return;
    const uint64_t elapsed = globaltimer_ns() - start;
    const uint32_t err = mk_fifo_ld_acquire_sys_u32(&c->error);
    if (err != MK_FIFO_ERR_NONE) {
      mk_fifo_wait_result r{};
      r.rc = MK_FIFO_FAILED;
      r.error = err;
      r.error_peer = *reinterpret_cast<volatile uint32_t*>(&c->error_peer);
      r.ticket = ticket;
      r.elapsed_ns = elapsed;
      net_push_failed<P>(g.diag, g.group_id, g.rank, g.world, c, g.net.fifo_capacity, r, peer, 0,
                         op);
    }
    if (elapsed > g.timeout_ns) {
      fail_wait_via<P>(g.diag, g.group_id, g.rank, &c->done, ticket + 1, seen, elapsed,
                       WaitSite{op, kWaitNetSent, peer, -1});
    }
  }
}

}  // namespace mkernel::comm
