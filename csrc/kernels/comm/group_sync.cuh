// Device primitives every kernel of a group uses (CONTRACT; csrc/comm implements the host side):
//   - release/acquire system-scope flag accesses;
//   - wait_geq: THE bounded wait (%globaltimer), the only spin loop in mkernel's kernels. On
//     timeout it records (op, group, rank, peer, slot, expected, seen) into the group's
//     host-mapped WaitDiagnostic and traps. No printf anywhere: a call in a kernel makes ptxas
//     serialize wgmma (C7510).
//   - op_begin / op_end: the device-side call counter (epoch) of GroupDevice.
//   - signal: release a flag at a peer of the same node through its IPC mapping.
#pragma once

#include <mkernel/fifo.h>

#include <cstdint>

#include "group_device.h"
#include "wait_diagnostic.h"

namespace mkernel::comm {

// The clock and the acquire load are fifo.h's (the FIFO's device protocol uses them too): one
// definition of each PTX helper.
__device__ __forceinline__ uint64_t globaltimer_ns() { return mk_fifo_globaltimer(); }

__device__ __forceinline__ uint64_t ld_acquire_sys(const uint64_t* p) { return mk_fifo_ld_acquire_sys(p); }

__device__ __forceinline__ void st_release_sys(uint64_t* p, uint64_t v) {
  asm volatile("st.release.sys.global.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
}

__device__ __forceinline__ uint64_t ld_relaxed_sys(const uint64_t* p) {
  uint64_t v;
  asm volatile("ld.relaxed.sys.global.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
  return v;
}

// Orders this thread's generic-proxy accesses with later async-proxy (TMA) accesses: after
// acquiring a flag, a TMA load must see the data it guards.
__device__ __forceinline__ void fence_proxy_async_global() {
  asm volatile("fence.proxy.async.global;" ::: "memory");
}

// Waits until every async bulk (TMA) store this thread committed has been written to global
// memory — not only read out of shared memory.
__device__ __forceinline__ void tma_store_wait_all_writes() {
  asm volatile("cp.async.bulk.wait_group 0;" ::: "memory");
}

// Where a wait happened, for the diagnostic record.
struct WaitSite {
  int32_t op = kOpNone;  // WaitOp
  int32_t what = kWaitPeerFlag;  // WaitKind
  int32_t peer = -1;     // the rank that should have released the flag
  int32_t index = 0;     // flag slot / chunk / tile index
};

// Fills *diag once (first claimant wins) and returns.
__device__ __noinline__ void record_wait(WaitDiagnostic* diag, int32_t group, int32_t rank,
                                         const uint64_t* flag, uint64_t expected, uint64_t seen,
                                         uint64_t elapsed_ns, WaitSite site);

// Fills *diag once (first claimant wins), then traps. Never returns ([[noreturn]]: a caller
// saves no registers around the cold call, no spills in the 40-register side warps).
__device__ __noinline__ [[noreturn]] void fail_wait(WaitDiagnostic* diag, int32_t group, int32_t rank,
                                       const uint64_t* flag, uint64_t expected, uint64_t seen,
                                       uint64_t elapsed_ns, WaitSite site);

// How a bounded wait's timeout path reaches the record and the trap, chosen at compile time by
// the kernel family (both write the same WaitDiagnostic and trap):
//   kCall   (the default): the out-of-line fail_wait above, one copy per kernel;
//   kInline: the record written at each wait site (~40 instructions of cold code per site).
// Why both (ptxas 13.0, sm_90a): fail_wait's 16 argument words do not all go in registers in every
// kernel. In the fused 128x256 / 256x128 GEMMs (producer warpgroup on 40 registers) ptxas passed 6
// of them through local memory at each of their 29 call sites (s11 builds: 40-byte frames, 700
// bytes of "spill stores", all on this cold path); with kInline those kernels are spill-free. In
// the hooked attention kernels (a 24-register producer) the inline record spills inside itself
// instead (+4 to +16 bytes of spill stores, also cold), so they keep the call.
enum class FailPath { kCall, kInline };

// fail_wait by path P.
template <FailPath P>
[[noreturn]] __device__ __forceinline__ void fail_wait_via(WaitDiagnostic* diag, int32_t group,
                                                           int32_t rank, const uint64_t* flag,
                                                           uint64_t expected, uint64_t seen,
                                                           uint64_t elapsed_ns, WaitSite site);

// Spins until *flag >= expected (acquire, system scope). Bounded by timeout_ns of %globaltimer;
// on timeout records the site and traps. Returns the value seen.
// abort_word (optional): a word some other agent sets non-zero when the wait can never complete
// (the inter-node proxy's FIFO error: a lost peer). It is read together with every fourth poll
// of the flag; once it is non-zero the wait returns the flag's value (< expected) at once and
// the caller records why and traps (net_ops.cuh's net_wait_arrival).
// P: the timeout path (FailPath above).
template <FailPath P = FailPath::kCall>
__device__ __forceinline__ uint64_t wait_geq(const uint64_t* flag, uint64_t expected,
                                             uint64_t timeout_ns, WaitDiagnostic* diag,
                                             int32_t group, int32_t rank, WaitSite site,
                                             const uint32_t* abort_word = nullptr);

// The same with the bound and the record taken from the group.
template <FailPath P = FailPath::kCall>
__device__ __forceinline__ uint64_t wait_geq(const GroupDevice& g, const uint64_t* flag,
                                             uint64_t expected, WaitSite site);

// Release `value` into flag `slot` of intra-node peer `peer` (its IPC mapping; peer may be
// g.rank). Orders every earlier store of this thread (and, being cumulative, those it has
// observed) before the flag.
__device__ __forceinline__ void signal(const GroupDevice& g, int peer, uint32_t slot,
                                       uint64_t value);

// Call number of this launch: *g.epoch + 1. Every thread may call it (plain load; the counter
// only changes between launches of the stream).
__device__ __forceinline__ uint64_t op_begin(const GroupDevice& g);

// Called once per CTA by one thread after the CTA's last access of group memory (after a
// __syncthreads / barrier covering the CTA's work): the last CTA of the grid stores *epoch = e
// and rearms exit_ticket. gridDim is the whole launch.
__device__ __forceinline__ void op_end(const GroupDevice& g, uint64_t e);

// Entry barrier among the ranks of this node for call e: signal kEntry+rank = e at every local
// peer, then wait for kEntry+p >= e from every local peer p. After it, every local peer has
// finished call e-1 (its previous kernel of the group completed), so its buffers of the
// previous call may be overwritten. Called by one thread (others wait on a CTA barrier).
// `signature` (op id and shape hash) is published before the entry flag and checked against
// every peer's: a mismatch records kWaitSignature naming the peer and traps — after every local
// peer recorded its own mismatch (each sees one: if every peer matched this rank, they would
// match each other) or the timeout passed, because under MPS the first trap ends every client
// of the GPU, and a peer that has not recorded yet would lose its explanation.
// The signature slot is the call's parity's (FlagSlot::signature_slot, for every kernel): a CTA
// that enters call e late may find a peer one call ahead — never two — whose call e + 1
// signature must not be read as call e's (s12run1: a false mismatch from one shared slot).
// P: the timeout path of its waits (FailPath above).
template <FailPath P = FailPath::kCall>
__device__ __forceinline__ void entry_barrier(const GroupDevice& g, uint64_t e, int32_t op,
                                              uint64_t signature);

}  // namespace mkernel::comm

#include "group_sync_impl.cuh"
