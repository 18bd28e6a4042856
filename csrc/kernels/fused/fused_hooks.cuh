// Hooks of the fused GEMM + communication kernels (ag_gemm, gemm_rs, gemm_ar): one policy for
// the engine's hooked kernel (kernels/gemm/gemm_kernel_sm90.cuh) whose runtime `mode` picks the
// op, so one kernel per (tile config, dtype) serves all three.
//
// Every launch is one call of the group: its number e = *epoch + 1 (comm::op_begin) is read by
// every thread at the start; the last CTA stores it back (comm::op_end). Flags are never reset:
// a flag "arrived in call e" holds e (older calls, of any op, left smaller values).
//
// kModeAllGather (ag_gemm, out = allgather(x) @ w.T on one node):
//   the GEMM's A is this rank's gathered buffer G = data[rank] as [world * m, K] (slot s holds
//   rank s's rows). COPY role (the producer warpgroup's three idle warps of every CTA): after
//   the entry barrier (every same-node peer has entered call e, so none still reads its
//   previous call's G), push this rank's x in chunks of `chunk_rows` rows into slot `rank` of
//   every same-node peer's G (this rank's own first, then rank+1, rank+2, ...: the ranks' first
//   pushes go to distinct peers), releasing arrival flag (rank, chunk) = e at that peer after
//   each chunk. Hook (a) producer_wait: before loading the A rows of a tile, wait for the
//   (source rank, chunk) flags covering those rows in this rank's own flag region. With
//   side_mode kSideCopyEngine (ag_gemm's copy-engine route) the copy engines push the rows and
//   set the flags to 1 (reset to 0 by the call's launch gate): the side warps only pass the entry
//   barrier and hook (a) waits for 1.
//
// kModeReduce (gemm_rs, gemm_ar one- and two-shot):
//   the GEMM's D is this rank's partial P = data[rank] as [m, n]. Before its first load the
//   producer passes the entry barrier (every peer has finished call e-1, so none still reads
//   the P this call overwrites). Hook (b) tile_done releases tile flag (tm, tn) = e at this rank
//   once the tile is in memory. REDUCE role: each CTA's reduce work is the tiles its own
//   consumers compute, cut into slabs (reduce_items): for each slab of the rows this rank
//   reduces (its own M/W rows for gemm_rs, all rows for one-shot gemm_ar), wait for the tile's
//   flag at every same-node rank (polled through the IPC mapping), sum the W partials in fp32 in
//   rank order 0..W-1 (the same bits on every rank and run) and store the rounded sum. Slabs are
//   claimed from a per-CTA shared-memory counter: by the producer's three idle warps as one unit
//   from the start (overlapping the GEMM; 40 registers, so each slab is staged through 16 KiB of
//   shared memory by cp.async: side_reduce), and by each of the eight consumer warps once their
//   last tile is stored (tail_role: 232 registers, 4 x 2 16-byte loads in flight per lane).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "../comm/group_sync.cuh"
#include "../comm/net_ops.cuh"
#include "../comm/warp_copy.cuh"
#include "cutlass/arch/barrier.h"
#include "fused_params.h"

// gemm_rs across nodes, its two halves (compile-time switches for checking each half's
// registers; fused_params.h MKERNEL_FUSED_RS_NODES turns both off and the host then keeps such
// groups unfused).
#ifndef MKERNEL_FUSED_RS_NODES_SEND
#define MKERNEL_FUSED_RS_NODES_SEND MKERNEL_FUSED_RS_NODES
#endif
#ifndef MKERNEL_FUSED_RS_NODES_TAIL
#define MKERNEL_FUSED_RS_NODES_TAIL MKERNEL_FUSED_RS_NODES
#endif

namespace mkernel::fused {

struct FusedHooks {
  using Params = FusedParams;
  struct Call {
    uint64_t epoch;
    bool entered;  // kModeReduce, producer lane: the entry barrier is behind it
  };
  static constexpr bool kWaitsForA = true;
  static constexpr bool kSignalsTiles = true;
  // The reduce waits for tiles anyway: no consumer stall per tile for its stores to land.
  static constexpr bool kDeferTileDone = true;
  static constexpr bool kSideRole = true;
  static constexpr int kSideThreads = 3 * 32;
  // Named barrier of the side warps (user id; the kernel's ping-pong consumers use 0 and 1).
  static constexpr uint32_t kSideBarrier = 2;
  // Every wait's timeout path writes its record inline (group_sync.cuh FailPath): as calls of
  // fail_wait its arguments went through local memory in the 128x256 / 256x128 kernels.
  static constexpr comm::FailPath kFail = comm::FailPath::kInline;

  CUTLASS_DEVICE static bool trigger_early(Params const& p) { return p.trigger_early != 0; }

  CUTLASS_DEVICE static Call call_begin(Params const& p) {
    if (threadIdx.x == 0 && p.timeline != nullptr) {
      stamp(p, kTlStart);
      uint32_t sm, cluster;
      asm volatile("mov.u32 %0, %%smid;" : "=r"(sm));
      asm volatile("mov.u32 %0, %%clusterid.x;" : "=r"(cluster));
      uint64_t* rec = p.timeline + static_cast<int64_t>(cta_id()) * kTimelineWords;
      rec[kTlSmid] = sm;
      rec[kTlCluster] = cluster;
    }
    return {comm::op_begin(p.group), false};
  }

  // The launch's timeline (fused_params.h TimelineSlot; a measurement mode, null otherwise).
  CUTLASS_DEVICE static void stamp(Params const& p, int slot) {
    if (p.timeline != nullptr) {
      p.timeline[static_cast<int64_t>(cta_id()) * kTimelineWords + slot] = comm::globaltimer_ns();
    }
  }
  CUTLASS_DEVICE static void add_items(Params const& p, int slot, int items) {
    if (p.timeline != nullptr && items > 0) {
      atomicAdd(reinterpret_cast<unsigned long long*>(
                    p.timeline + static_cast<int64_t>(cta_id()) * kTimelineWords + slot),
                static_cast<unsigned long long>(items));
    }
  }

  CUTLASS_DEVICE static void side_sync() {
    cutlass::arch::NamedBarrier::sync(kSideThreads, kSideBarrier);
  }

  CUTLASS_DEVICE static int cta_id() {
    return static_cast<int>(blockIdx.x + blockIdx.y * gridDim.x);
  }
  CUTLASS_DEVICE static int cta_count() { return static_cast<int>(gridDim.x * gridDim.y); }

  // ---- kModeAllGather -------------------------------------------------------------------

  // One warp's copy (comm/warp_copy.cuh: four 16-byte loads in flight per lane, written for the
  // side warps' 40 registers). kCoherent: src is written during the call by another agent (the
  // inter-node receive area, read after its arrival flag): loads through L2 (ld.global.cg), as
  // the collectives read it, never the non-coherent path.
  template <bool kCoherent = false>
  CUTLASS_DEVICE static uint4 load16(const uint4* s) {
    return comm::load16<kCoherent>(s);
  }
  template <bool kCoherent = false>
  CUTLASS_DEVICE static void copy_rows(uint8_t* dst, const uint8_t* src, int64_t bytes, int lane) {
    comm::warp_copy<kCoherent>(dst, src, bytes, lane);
  }

  // The next copy item of this call: a work counter in this rank's flag region, tagged with
  // the call number in its high half (the first claimant of a call restarts it), so items go
  // to the warps that run — none waits for a CTA that is not resident yet.
  CUTLASS_DEVICE static int claim_item(Params const& p, uint64_t epoch) {
    auto* counter =
        reinterpret_cast<unsigned long long*>(p.group.flags[p.group.rank] + p.counter_slot);
    const unsigned long long tag = (epoch & 0xffffffffull) << 32;
    for (;;) {
      const unsigned long long seen = *reinterpret_cast<volatile unsigned long long*>(counter);
      if ((seen & ~0xffffffffull) != tag) {  // still the previous call's count
        if (atomicCAS(counter, seen, tag | 1ull) == seen) return 0;
        continue;
      }
      return static_cast<int>(atomicAdd(counter, 1ull) & 0xffffffffull);
    }
  }

  // ---- kModeAllGather across nodes (net_remote > 0) -------------------------------------
  //
  // The copy items of a call become [send: chunks][same node: world * chunks][receive:
  // net_remote * chunks], claimed in that order from the same counter:
  //   send c    : stage chunk c of x for the other nodes — into the send area at its offset in
  //               x (the transport moves it: an RDMA write, or the copy engine under the
  //               loopback GPU-direct emulation) — then
  //               count it in stage_count[piece]; the warp counting a piece's last chunk pushes
  //               the piece to every rank of another node (one WRITE_SIGNAL each, arrival flag
  //               net_slot(rank, piece) = e) and waits for the transport only at the end of its
  //               items (the next call rewrites the send area).
  //   same node : as on one node (items whose peer is on another node are skipped).
  //   receive i : chunk c = i / net_remote of the (i % net_remote)-th rank of another node in
  //               the order rank - 1, rank - 2, ... (the GEMM's M order: remote rows last): wait
  //               for its piece's arrival flag (bounded; a lost peer's proxy failure traps at
  //               once naming it), copy the chunk from the receive half of the call's parity
  //               into slot s of G, release (s, c) at this rank — the flag the producer's hook
  //               (a) waits for, as for a same-node peer's chunk.
  // No cycle of waits: send and same-node items never wait for a peer, and every rank claims
  // all of them before any receive item; a receive waits only for another rank's send items.
  // Receive halves alternate by call parity: a rank of another node writes the half of call
  // e + 2 only after finishing call e + 1, whose rows from this rank left only after this rank
  // finished call e (every rank sends to every rank of another node in every call) — the
  // collectives' rule (collectives_api.h net sizes).
  CUTLASS_DEVICE static uint64_t net_half(Params const& p, uint64_t epoch) {
    return (epoch & 1) * (p.group.net.recv_bytes / 2);
  }

  CUTLASS_DEVICE static void net_send_item(Params const& p, uint64_t epoch, int c, int lane,
                                           uint64_t& ticket, int& last_peer) {
    const comm::GroupDevice& g = p.group;
    const int64_t off = static_cast<int64_t>(c) * p.chunk_rows * p.row_bytes;
    const int64_t bytes = min(p.chunk_rows, p.m_local - c * p.chunk_rows) * p.row_bytes;
    const uint64_t remote_block = net_half(p, epoch) + static_cast<uint64_t>(g.rank) * p.net_block;
    // The transport moves the staged bytes to every rank of the other nodes (RDMA write from the
    // send area; under the loopback GPU-direct emulation its copy engine does).
    copy_rows(g.net.send_area + off, p.x + off, bytes, lane);
    __syncwarp();  // every lane's stores of the chunk precede the count (and the push)
    if (lane != 0) return;
    const int k = c / p.net_piece_chunks;
    const int first = k * p.net_piece_chunks;
    const int parts = min(p.chunks, first + p.net_piece_chunks) - first;
    __threadfence_system();  // the chunk's bytes are visible system-wide before it is counted
    uint32_t* count = g.net.stage_count + k;
    if (atomicAdd(count, 1u) != static_cast<uint32_t>(parts - 1)) return;
    __threadfence_system();  // every part's bytes before the push (read after the count)
    *reinterpret_cast<volatile uint32_t*>(count) = 0u;  // zero between calls
    const int64_t pb = static_cast<int64_t>(first) * p.chunk_rows * p.row_bytes;
    const int64_t pe =
        min(static_cast<int64_t>(first + parts) * p.chunk_rows, static_cast<int64_t>(p.m_local)) *
        p.row_bytes;
    comm::NetCursor cursor;
#pragma unroll 1
    for (int r = 0; r < g.world; ++r) {
      if (g.data[r] != nullptr) continue;
      ticket = comm::net_put_signal<kFail>(g, cursor, r, pb, remote_block + pb, pe - pb,
                                           kNetSlotBase + g.rank * kNetPieces + k, epoch, p.op);
      last_peer = r;
    }
  }

  CUTLASS_DEVICE static void net_recv_item(Params const& p, uint64_t epoch, int i, int lane) {
    const comm::GroupDevice& g = p.group;
    const int c = i / p.net_remote;
    int q = i - c * p.net_remote;
    int s = g.rank;
#pragma unroll 1
    for (;;) {  // the q-th rank of another node below this one (cyclically)
      s = s == 0 ? g.world - 1 : s - 1;
      if (g.data[s] == nullptr && q-- == 0) break;
    }
    if (lane == 0) {
      // A rank with node-mates sends only after its node's entry barrier: a wait for it is a
      // derived one, bounded longer, so that when a rank dies its node-mates' direct waits (and
      // the waits for its own rows) name it first, not a live rank stuck behind it.
      int mates = 0;
#pragma unroll 1
      for (int r = 0; r < g.world; ++r) mates += g.node_of[r] == g.node_of[s] ? 1 : 0;
      const uint32_t slot = kNetSlotBase + s * kNetPieces + c / p.net_piece_chunks;
      comm::net_wait_arrival<kFail>(
          g, g.net.arrival + slot, epoch,
          mates > 1 ? 2 * g.timeout_ns + 1000000000ull : g.timeout_ns, s,
          comm::WaitSite{p.op, comm::kWaitNetArrival, s, static_cast<int32_t>(slot)});
    }
    __syncwarp();  // the acquire precedes every lane's loads
    const int row0 = c * p.chunk_rows;
    const int64_t off = static_cast<int64_t>(row0) * p.row_bytes;
    copy_rows<true>(
        g.data[g.rank] + static_cast<int64_t>(s) * p.m_local * p.row_bytes + off,
        g.net.recv_area + net_half(p, epoch) + static_cast<uint64_t>(s) * p.net_block + off,
        min(p.chunk_rows, p.m_local - row0) * p.row_bytes, lane);
    __syncwarp();  // every lane's stores of the chunk precede the flag
    if (lane == 0) comm::signal(g, g.rank, p.flag_base + s * p.chunks + c, epoch);
  }

  // The COPY role: side thread t in [0, 96) of every CTA; each warp claims items (rank j's
  // chunk c pushed to peer rank + j: this rank's own slot first) until none is left; across
  // nodes also the send and receive items above.
  CUTLASS_DEVICE static void copy_role(Params const& p, Call const& call, int t) {
    const comm::GroupDevice& g = p.group;
    if (t == 0) {
      comm::entry_barrier<kFail>(g, call.epoch, p.op, p.signature);
      stamp(p, kTlEntered);
    }
    side_sync();
    const int lane = t % 32;
    const int sends = p.net_remote > 0 ? p.chunks : 0;
    const int local = sends + g.world * p.chunks;
    const int items = local + p.net_remote * p.chunks;
    uint64_t ticket = 0;  // lane 0: the last push of this warp (last_peer >= 0)
    int last_peer = -1;
#pragma unroll 1
    for (;;) {
      int i = lane == 0 ? claim_item(p, call.epoch) : 0;
      i = __shfl_sync(0xffffffffu, i, 0);
      if (i >= items) break;
      if (i < sends) {
        net_send_item(p, call.epoch, i, lane, ticket, last_peer);
        continue;
      }
      if (i >= local) {
        net_recv_item(p, call.epoch, i - local, lane);
        continue;
      }
      i -= sends;
      const int j = i / p.chunks, c = i - j * p.chunks;
      const int peer = (g.rank + j) % g.world;
      uint8_t* region = g.data[peer];
      if (region == nullptr) continue;  // another node: its receive items move these rows
      const int row0 = c * p.chunk_rows;
      const int rows = min(p.chunk_rows, p.m_local - row0);
      copy_rows(region + (static_cast<int64_t>(g.rank) * p.m_local + row0) * p.row_bytes,
                p.x + static_cast<int64_t>(row0) * p.row_bytes, rows * p.row_bytes, lane);
      __syncwarp();  // every lane's stores of the chunk precede the flag
      if (lane == 0) comm::signal(g, peer, p.flag_base + g.rank * p.chunks + c, call.epoch);
    }
    // The transport has read every piece this warp pushed before the kernel ends.
    if (lane == 0 && last_peer >= 0) comm::net_wait_sent<kFail>(g, ticket, last_peer, p.op);
  }

  // Rows [row0, row1] of G come from ranks row0 / m_local .. row1 / m_local: wait for each
  // chunk flag covering them. A tile's rows span up to 128 / chunk_rows flags (16 at K = 8192):
  // one acquiring load after another costs a memory round trip each, all of it on the producer
  // while its 4 stages (a few us of MMA work) drain, so the flags are read first with relaxed
  // loads issued 4 at a time, and when every one has arrived (the usual case: the copy runs
  // ahead) one acquire fence stands for them; otherwise the bounded waits below.
  CUTLASS_DEVICE static void wait_gathered_rows(Params const& p, Call const& call, int row0,
                                                int row1) {
    const comm::GroupDevice& g = p.group;
    const uint64_t* flags = g.flags[g.rank];
    // The copy engines' stream writes set 1 (reset by this call's launch gate), the copy role's
    // signals the call number.
    const uint64_t want = p.side_mode == kSideCopyEngine ? 1ull : call.epoch;
    bool all = true;
#pragma unroll 1
    for (int s = row0 / p.m_local; s <= row1 / p.m_local; ++s) {
      const int first = max(row0 - s * p.m_local, 0) / p.chunk_rows;
      const int last = min(row1 - s * p.m_local, p.m_local - 1) / p.chunk_rows;
      const uint64_t* f = flags + p.flag_base + s * p.chunks;
#pragma unroll 1
      for (int c = first; c <= last; c += 4) {  // 4 at a time: the producer has 40 registers
        uint64_t v[4];
        CUTLASS_PRAGMA_UNROLL
        for (int j = 0; j < 4; ++j) v[j] = c + j <= last ? comm::ld_relaxed_sys(f + c + j) : want;
        CUTLASS_PRAGMA_UNROLL
        for (int j = 0; j < 4; ++j) all = all && v[j] >= want;
      }
    }
    if (all) {
      asm volatile("fence.acq_rel.sys;" ::: "memory");  // the relaxed reads above acquire
      return;
    }
#pragma unroll 1
    for (int s = row0 / p.m_local; s <= row1 / p.m_local; ++s) {
      const int first = max(row0 - s * p.m_local, 0) / p.chunk_rows;
      const int last = min(row1 - s * p.m_local, p.m_local - 1) / p.chunk_rows;
      for (int c = first; c <= last; ++c) {
        comm::wait_geq<kFail>(g, flags + p.flag_base + s * p.chunks + c, want,
                              comm::WaitSite{p.op, comm::kWaitPeerFlag, s, c});
      }
    }
  }

  // ---- kModeReduce ----------------------------------------------------------------------
  //
  // A CTA's reduce work is the tiles its own consumers compute (the same tiles on every rank:
  // the M order of the reduce modes is rank-independent), cut into items: item i is slab
  // i % slabs (slab_rows rows of the tile) of the tile of the CTA's (i / slabs)-th unit. Items
  // [0, P) reduce the slab's rows this rank owns; two-shot items [P, 2P) copy the other owners'
  // reduced rows of the slab. Items are claimed from the CTA's shared counter: by the three
  // side warps as one unit from the start (side_reduce, below: it waits for its tile's flags as
  // the consumers of every rank store it, so the reduction overlaps the GEMM; reduce items
  // only), and by each consumer warp after its last tile (reduce_items: 232 registers, four
  // 16-byte vectors per lane of two ranks in flight). A CTA waits only for the CTA of the same
  // index on other ranks (co-residency, README), and never for its own side warps: every item
  // left when the consumers finish is theirs.

  // Every reduce path's arithmetic, shared so that they give the same bits: one 16-byte vector
  // of 8 T elements added into fp32 accumulators (the caller runs the ranks in order 0..W-1) ...
  template <class T>
  CUTLASS_DEVICE static void add8(float (&acc)[8], uint4 const& x) {
    const T* h = reinterpret_cast<const T*>(&x);
    CUTLASS_PRAGMA_UNROLL
    for (int e = 0; e < 8; ++e) acc[e] += static_cast<float>(h[e]);
  }

  // ... and the accumulators rounded back to one vector of T.
  template <class T>
  CUTLASS_DEVICE static uint4 pack8(float const (&acc)[8]) {
    uint4 o;
    T* h = reinterpret_cast<T*>(&o);
    CUTLASS_PRAGMA_UNROLL
    for (int e = 0; e < 8; ++e) h[e] = static_cast<T>(acc[e]);
    return o;
  }

  // The staged paths (side warps, consumers' tail): vector q of the W ranks' copies staged in
  // shared memory, rank s's at buf[s * per_rank + q], summed in rank order and rounded.
  template <class T>
  CUTLASS_DEVICE static uint4 sum_staged(const uint4* buf, int per_rank, int q, int world) {
    float acc[8] = {0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f};
#pragma unroll 1
    for (int s = 0; s < world; ++s) {  // rank order
      const uint4 x = buf[s * per_rank + q];
      add8<T>(acc, x);
    }
    return pack8<T>(acc);
  }

  // The staged paths' store of a reduced vector at element `at`: to out and, two-shot, to this
  // rank's reduced area (the other owners copy it from there).
  template <class T>
  CUTLASS_DEVICE static void store_reduced(Params const& p, T* out, int64_t at, uint4 o) {
    *reinterpret_cast<uint4*>(out + at) = o;
    if (p.two_shot) {
      *reinterpret_cast<uint4*>(
          reinterpret_cast<T*>(p.group.data[p.group.rank] + p.reduced_offset) + at) = o;
    }
  }

  // Waits (one thread) for tile flag `tile` of call op_begin at rank s: its partial of the tile
  // is in memory.
  CUTLASS_DEVICE static void wait_tile(Params const& p, int s, int tile) {
    const comm::GroupDevice& g = p.group;
    comm::wait_geq<kFail>(g, g.flags[s] + p.flag_base + tile, comm::op_begin(g),
                          comm::WaitSite{p.op, comm::kWaitPeerFlag, s, tile});
  }

  // Element offset (in out / a rank's partial, row stride n) of vector i of the rows from r0 x
  // columns [c0, c0 + 8 v), the vectors numbered row by row.
  CUTLASS_DEVICE static int64_t slab_at(Params const& p, int r0, int c0, int v, int i) {
    const int row = i / v;
    return static_cast<int64_t>(r0 + row) * p.n + c0 + (i - row * v) * 8;
  }

  // Sums the rank partials of rows [r0, r1) x columns [c0, c1) (a multiple of 8 columns) in
  // fp32, rank order 0..W-1 (the same bits on every rank), into out (and `reduced`). One warp;
  // U vectors of 8 elements per lane per step, the loads of two ranks in flight together.
  template <class T, int U, int kB>
  CUTLASS_DEVICE static void reduce_slab(Params const& p, int r0, int r1, int c0, int c1, int lane,
                                         bool two_shot) {
    const comm::GroupDevice& g = p.group;
    const int v = (c1 - c0) / 8;
    const int total = (r1 - r0) * v;
    T* out = static_cast<T*>(p.out) - static_cast<int64_t>(p.out_row0) * p.n;
#pragma unroll 1
    for (int base = lane; base < total; base += 32 * U) {
      int64_t at[U];
      float acc[U][8];
      CUTLASS_PRAGMA_UNROLL
      for (int u = 0; u < U; ++u) {
        // Past the end a lane redoes the last vector: the same bits to the same place.
        at[u] = slab_at(p, r0, c0, v, min(base + 32 * u, total - 1));
        CUTLASS_PRAGMA_UNROLL
        for (int e = 0; e < 8; ++e) acc[u][e] = 0.f;
      }
#pragma unroll 1
      for (int s0 = 0; s0 < g.world; s0 += kB) {
        uint4 ld[U][kB];
        CUTLASS_PRAGMA_UNROLL
        for (int b = 0; b < kB; ++b) {
          if (s0 + b < g.world) {
            const T* src = reinterpret_cast<const T*>(g.data[s0 + b]);
            CUTLASS_PRAGMA_UNROLL
            for (int u = 0; u < U; ++u)
              ld[u][b] = __ldcg(reinterpret_cast<const uint4*>(src + at[u]));
          }
        }
        CUTLASS_PRAGMA_UNROLL
        for (int b = 0; b < kB; ++b) {  // rank order
          if (s0 + b < g.world) {
            CUTLASS_PRAGMA_UNROLL
            for (int u = 0; u < U; ++u) add8<T>(acc[u], ld[u][b]);
          }
        }
      }
      T* reduced = two_shot ? reinterpret_cast<T*>(g.data[g.rank] + p.reduced_offset) : nullptr;
      CUTLASS_PRAGMA_UNROLL
      for (int u = 0; u < U; ++u) {
        const uint4 o = pack8<T>(acc[u]);
        *reinterpret_cast<uint4*>(out + at[u]) = o;
        if (two_shot) *reinterpret_cast<uint4*>(reduced + at[u]) = o;
      }
    }
  }

  // Two-shot: copies rows [r0, r1) x columns [c0, c1) of rank src's reduced area into out.
  template <class T, int U>
  CUTLASS_DEVICE static void copy_slab(Params const& p, int src, int r0, int r1, int c0, int c1,
                                       int lane) {
    const int v = (c1 - c0) / 8;
    const int total = (r1 - r0) * v;
    const T* from = reinterpret_cast<const T*>(p.group.data[src] + p.reduced_offset);
    T* out = static_cast<T*>(p.out) - static_cast<int64_t>(p.out_row0) * p.n;
#pragma unroll 1
    for (int base = lane; base < total; base += 32 * U) {
      int64_t at[U];
      uint4 ld[U];
      CUTLASS_PRAGMA_UNROLL
      for (int u = 0; u < U; ++u) {
        at[u] = slab_at(p, r0, c0, v, min(base + 32 * u, total - 1));
        ld[u] = __ldcg(reinterpret_cast<const uint4*>(from + at[u]));
      }
      CUTLASS_PRAGMA_UNROLL
      for (int u = 0; u < U; ++u) *reinterpret_cast<uint4*>(out + at[u]) = ld[u];
    }
  }

  // One warp claims and runs this CTA's reduce items until none is left (module comment).
  template <class Sched, class T, int U, int kB>
  CUTLASS_DEVICE static void reduce_items(Params const& p, typename Sched::Params const& sp,
                                          int lane, int* counter) {
    const comm::GroupDevice& g = p.group;
    const int total_units = sp.units_m * sp.units_n * sp.batches * sp.splits;
    const int first = Sched::first_unit(), stride = Sched::unit_stride();
    const int units = first < total_units ? (total_units - first + stride - 1) / stride : 0;
    const int per_phase = units * p.slabs;
    const int items = p.two_shot ? 2 * per_phase : per_phase;
    const int end = min(p.reduce_row0 + p.reduce_rows, p.m);
    typename Sched::Cursor cursor;
#pragma unroll 1
    for (;;) {
      int i = lane == 0 ? atomicAdd(counter, 1) : 0;
      i = __shfl_sync(0xffffffffu, i, 0);
      if (i >= items) break;
      const bool copy = i >= per_phase;
      if (copy) i -= per_phase;
      const int k = i / p.slabs, slab = i - k * p.slabs;
      const auto work = Sched::get(sp, first + k * stride, cursor);
      if (!work.valid || work.skip) continue;
      const int row0 = work.m_block * p.block_m + slab * p.slab_rows;
      const int row1 = min(row0 + p.slab_rows, p.m);
      const int c0 = work.n_block * p.block_n, c1 = min(c0 + p.block_n, p.n);
      if (row0 >= row1 || c0 >= c1) continue;
      const int tile = work.m_block * p.tiles_n + work.n_block;
      if (!copy) {
        const int r0 = max(row0, p.reduce_row0), r1 = min(row1, end);
        if (r0 >= r1) continue;
        if (lane < g.world) wait_tile(p, lane, tile);  // lane s polls rank s's flag of the tile
        __syncwarp();  // every rank's tile is in memory (the acquires precede the warp barrier)
        reduce_slab<T, U, kB>(p, r0, r1, c0, c1, lane, p.two_shot != 0);
        if (p.two_shot) {
          __syncwarp();  // every lane's reduced stores precede the flag
          if (lane == 0) {
            comm::signal(g, g.rank, p.reduced_flag_base + tile * p.slabs + slab, comm::op_begin(g));
          }
        }
      } else {
#pragma unroll 1
        for (int q = row0 / p.rows_per_rank; q <= (row1 - 1) / p.rows_per_rank; ++q) {
          if (q == g.rank) continue;
          if (lane == 0) {
            comm::wait_geq<kFail>(g, g.flags[q] + p.reduced_flag_base + tile * p.slabs + slab,
                                  comm::op_begin(g),
                                  comm::WaitSite{p.op, comm::kWaitPeerFlag, q, tile});
          }
          __syncwarp();
          copy_slab<T, U>(p, q, max(row0, q * p.rows_per_rank),
                          min(row1, (q + 1) * p.rows_per_rank), c0, c1, lane);
        }
      }
    }
  }

  template <class Sched, int U, int kB>
  CUTLASS_DEVICE static void reduce_role(Params const& p, typename Sched::Params const& sp,
                                         int lane, int* counter) {
    // Across nodes only the consumers' tail reduces (232 registers; the host pins the side
    // warps to the sends): the inter-node variant is compiled into that instantiation only.
#if MKERNEL_FUSED_RS_NODES_TAIL
    if constexpr (U > 1) {
      if (p.net_remote > 0) {
        if (p.bf16) {
          reduce_items_net<Sched, __nv_bfloat16, U, kB>(p, sp, lane, counter);
        } else {
          reduce_items_net<Sched, __half, U, kB>(p, sp, lane, counter);
        }
        return;
      }
    }
#endif
    if (p.bf16) {
      reduce_items<Sched, __nv_bfloat16, U, kB>(p, sp, lane, counter);
    } else {
      reduce_items<Sched, __half, U, kB>(p, sp, lane, counter);
    }
  }

  // ---- kModeReduce across nodes (gemm_rs, net_remote > 0: MKERNEL_FUSED_NODES=1) ---------
  //
  // Rank o owns rows [o * R, (o + 1) * R) of the output (R = rows_per_rank). A tile of this
  // rank's partial P whose rows meet the rows of a rank of another node goes there as a
  // partial tile through the inter-node path:
  //   SEND (the three side warps of the CTA that computed the tile, in the CTA's unit order):
  //     wait for the tile's flag at this rank (its TMA stores are in memory), copy the owner's
  //     rows of it into the owner's tile slot — in the send area (its layout mirrors a receive
  //     block per owner), or with the GPU-direct emulation straight into the owner's receive
  //     area — and push them to the owner with arrival flag (this rank, this CTA) =
  //     (e << 24) | (k + 1), k the tile's unit index in the CTA's sequence. A CTA's pushes to
  //     one owner go in increasing k, and a signal lands after every earlier command to that
  //     peer, so flag >= (e << 24) | (k + 1) means tiles 0..k of that CTA have landed.
  //   REDUCE (the consumers' tail, per slab of the CTA's own tiles, as on one node): lane s
  //     waits for the tile at rank s — its tile flag through the IPC mapping on this node, the
  //     arrival flag (s, CTA) >= (e << 24) | (k + 1) for a rank of another node — then sums
  //     the W partials in fp32 in rank order 0..W-1, a remote one read from its tile slot in
  //     the receive half of the call's parity.
  // Co-residency: as on one node, a CTA waits only for the CTA of the same index on other
  // ranks (the grid and the tile order are the same on every rank), and sends never wait for
  // a peer. Receive halves alternate by call parity (every rank sends to every rank of another
  // node in every call: the collectives' rule).

  // Byte offset of tile (m_block, n_block)'s slot in owner o's receive block.
  CUTLASS_DEVICE static uint64_t rs_slot_offset(Params const& p, int o, int m_block, int n_block) {
    const int m0 = o * p.rows_per_rank / p.block_m;  // the owner's first tile row
    return (static_cast<uint64_t>(m_block - m0) * p.tiles_n + n_block) * p.block_m * p.block_n * 2;
  }

  // With net_coalesce > 0 (MKERNEL_FUSED_RS_NODES_COALESCE, xnode6) an owner's block is laid out
  // by (CTA, unit): the slot of this CTA's k-th unit is cta * upc + k (upc: the most units a CTA
  // has), so the tiles one CTA sends to one owner in consecutive units are consecutive slots and
  // go out as one command of up to net_coalesce tiles (its flag (e << 24) | (last k + 1) says
  // "units 0..last of that CTA landed", as a single tile's does). The receiving CTA (the same
  // index, the same units) finds its slot the same way. Byte offset in an owner's block:
  template <class Sched>
  CUTLASS_DEVICE static int rs_units_per_cta(typename Sched::Params const& sp) {
    const int total = sp.units_m * sp.units_n * sp.batches * sp.splits;
    const int stride = Sched::unit_stride();
    return (total + stride - 1) / stride;
  }

  // The slot of unit k's tile (m_block, n_block) in owner o's block, in either layout (upc:
  // rs_units_per_cta, read only with net_coalesce > 0).
  CUTLASS_DEVICE static uint64_t rs_tile_slot(Params const& p, int upc, int o, int m_block,
                                              int n_block, int k) {
    return p.net_coalesce > 0
               ? (static_cast<uint64_t>(cta_id()) * upc + k) * p.block_m * p.block_n * 2
               : rs_slot_offset(p, o, m_block, n_block);
  }

  // The SEND role (side thread t in [0, 96)). Written for the side warps' 40 registers: one
  // flat loop over the CTA's units whose body (net_send_unit) re-derives everything from the
  // unit index and the (constant-bank) parameters, the last push's ticket in shared memory, and
  // pushes in the LL FIFO format only (the host checks it; net_ops.cuh's net_push inlines both
  // formats' code).
  template <class Sched, class Storage>
  CUTLASS_DEVICE static void net_send_tiles(Params const& p, typename Sched::Params const& sp,
                                            int t, Storage& st) {
    if (t == 0) {
      st.net_peer = -1;
      st.run_n = 0;
      st.run_next = 0;
      // Read by every side thread after the named barrier of a unit with a push (net_send_unit).
      st.run_upc = p.net_coalesce > 0 ? rs_units_per_cta<Sched>(sp) : 0;
    }
#pragma unroll 1
    for (int k = 0;; ++k) {
      const int unit = Sched::first_unit() + k * Sched::unit_stride();
      if (unit >= sp.units_m * sp.units_n * sp.batches * sp.splits) break;
      net_send_unit<Sched>(p, sp, t, k, unit, st);
    }
    if (t == 0) net_flush_run(p, st);  // the last run of coalesced tiles (net_coalesce > 0)
    // The transport has read every tile this CTA pushed before the kernel ends.
    if (t == 0 && st.net_peer >= 0) {
      comm::net_wait_sent<kFail>(p.group, st.net_ticket, st.net_peer, p.op);
    }
  }

  template <class Sched, class Storage>
  CUTLASS_DEVICE static void net_send_unit(Params const& p, typename Sched::Params const& sp, int t,
                                           int k, int unit, Storage& st) {
    const comm::GroupDevice& g = p.group;
    typename Sched::Cursor cursor;
    const auto work = Sched::get(sp, unit, cursor);
    if (!work.valid || work.skip) return;
    const int row0 = work.m_block * p.block_m, row1 = min(row0 + p.block_m, p.m);
    if (row0 >= row1 || work.n_block * p.block_n >= p.n) return;
    const int o0 = row0 / p.rows_per_rank, o1 = (row1 - 1) / p.rows_per_rank;
    bool remote = false;
#pragma unroll 1
    for (int o = o0; o <= o1; ++o) remote = remote || g.data[o] == nullptr;
    if (!remote) return;
    if (t == 0) wait_tile(p, g.rank, work.m_block * p.tiles_n + work.n_block);
    side_sync();  // the tile is in memory for every side thread
    const int c0 = work.n_block * p.block_n;
    const int v = (min(c0 + p.block_n, p.n) - c0) / 8;
#pragma unroll 1
    for (int o = o0; o <= o1; ++o) {
      if (g.data[o] != nullptr) continue;
      const int r0 = max(row0, o * p.rows_per_rank);
      const int n = (min(row1, (o + 1) * p.rows_per_rank) - r0) * v;
      const uint64_t at = rs_tile_slot(p, st.run_upc, o, work.m_block, work.n_block, k) +
                          static_cast<uint64_t>(r0 - row0) * p.block_n * 2;
      uint8_t* dst = g.net.send_area + o * p.net_block + at;
      const uint8_t* src = g.data[g.rank] + (static_cast<int64_t>(r0) * p.n + c0) * 2;
#pragma unroll 1
      for (int i = t; i < n; i += kSideThreads) {
        const int row = i / v, col = i - row * v;
        *reinterpret_cast<uint4*>(dst + (row * p.block_n + col * 8) * 2) = __ldcg(
            reinterpret_cast<const uint4*>(src + (static_cast<int64_t>(row) * p.n + col * 8) * 2));
      }
    }
    side_sync();  // every thread's stores precede the pushes (their release is cumulative)
    if (t != 0) return;
#pragma unroll 1
    for (int o = o0; o <= o1; ++o) {
      if (g.data[o] != nullptr) continue;
      const int r0 = max(row0, o * p.rows_per_rank);
      const int r1 = min(row1, (o + 1) * p.rows_per_rank);
      // Without coalescing: this tile's rows of o, one command. Coalescing: a whole tile of o's
      // rows extends o's open run when it is the next unit; anything else closes the open run
      // first (a later flag must never cover an unsent tile), then starts a run (a whole tile)
      // or goes alone. Up to two commands, from one push site (each inlined push costs the
      // side warps' 40 registers).
      const bool whole = p.net_coalesce > 0 && r0 == row0 && r1 - r0 == p.block_m;
      bool alone = p.net_coalesce <= 0;
      if (p.net_coalesce > 0) {
        if (whole && st.run_n > 0 && st.run_owner == o && st.run_last == k - 1) {
          st.run_last = k;
          ++st.run_n;
        } else {
          st.run_next = whole ? 1 : 0;  // after the open run: start a run, or go alone
          alone = !whole;
        }
      }
#pragma unroll 1
      for (int step = 0; step < 2; ++step) {
        int to = -1, last = k;
        uint64_t at = 0, bytes = 0;
        if (step == 0 && p.net_coalesce > 0 && st.run_n > 0 &&
            (st.run_owner != o || st.run_last != k || st.run_n >= p.net_coalesce)) {
          // the open run: closed by this tile (not its next unit) or full
          to = st.run_owner;
          last = st.run_last;
          at = st.run_slot;
          bytes = static_cast<uint64_t>(st.run_n) * p.block_m * p.block_n * 2;
          st.run_n = 0;
        } else if (step == 1 && alone) {
          to = o;
          at = rs_tile_slot(p, st.run_upc, o, work.m_block, work.n_block, k) +
               static_cast<uint64_t>(r0 - row0) * p.block_n * 2;
          bytes = static_cast<uint64_t>(r1 - r0) * p.block_n * 2;
        }
        if (step == 1 && whole && st.run_n == 0 && st.run_next != 0) {
          st.run_next = 0;
          st.run_owner = o;
          st.run_last = k;
          st.run_slot = rs_tile_slot(p, st.run_upc, o, work.m_block, work.n_block, k);
          st.run_n = 1;
          if (p.net_coalesce == 1) {  // a run of one: out at once
            to = o;
            at = st.run_slot;
            bytes = static_cast<uint64_t>(p.block_m) * p.block_n * 2;
            st.run_n = 0;
          }
        }
        if (to >= 0) net_push_cmd(p, to, at, bytes, last, st);
      }
    }
  }

  // Thread 0 of the SEND role: pushes the open run of whole tiles (net_coalesce > 0), if any.
  template <class Storage>
  CUTLASS_DEVICE static void net_flush_run(Params const& p, Storage& st) {
    if (st.run_n <= 0) return;
    const int n = st.run_n;
    st.run_n = 0;
    net_push_cmd(p, st.run_owner, st.run_slot, static_cast<uint64_t>(n) * p.block_m * p.block_n * 2,
                 st.run_last, st);
  }

  // Thread 0 of the SEND role: the push of `bytes` at byte `at` of owner o's block (one tile's
  // rows of o, or a run of whole tiles), unit k of the CTA the last of them, to owner o,
  // in the LL FIFO format (fifo.h mk_fifo_push_device_ll's protocol). The command's 14 payload
  // words are built in shared memory one at a time and streamed from there into the slot: the
  // inlined push held them all in registers at once and spilled ~940 bytes in these 40.
  template <class Storage>
  CUTLASS_DEVICE static void net_push_cmd(Params const& p, int o, uint64_t at, uint64_t bytes,
                                          int k, Storage& st) {
    const comm::GroupDevice& g = p.group;
    uint32_t* w = st.net_words;
    {
      const uint64_t e = comm::op_begin(g);
      const uint64_t local_off = o * p.net_block + at;
      const uint64_t remote_off = (e & 1) * (g.net.recv_bytes / 2) + g.rank * p.net_block + at;
      const uint64_t seq = (e << kRsNetSeqBits) | static_cast<uint64_t>(k + 1);
      w[0] = static_cast<uint32_t>(MK_FIFO_WRITE_SIGNAL) | (static_cast<uint32_t>(o) << 16);
      w[1] = kRsNetSlotBase + g.rank * cta_count() + cta_id();
      w[2] = g.net.send_buf_id;
      w[3] = g.net.recv_buf_id;
      w[4] = static_cast<uint32_t>(local_off);
      w[5] = static_cast<uint32_t>(local_off >> 32);
      w[6] = static_cast<uint32_t>(remote_off);
      w[7] = static_cast<uint32_t>(remote_off >> 32);
      w[8] = static_cast<uint32_t>(bytes);
      w[9] = static_cast<uint32_t>(bytes >> 32);
      w[10] = static_cast<uint32_t>(seq);
      w[11] = static_cast<uint32_t>(seq >> 32);
    }
    uint64_t cached_tail = 0;
    const mk_fifo_wait_result r =
        mk_fifo_take_ticket_device(comm::net_fifo(g), g.net.fifo_capacity, g.net.fifo_head,
                                   &cached_tail, static_cast<uint16_t>(o), g.timeout_ns);
    if (r.rc != MK_FIFO_OK) {
      comm::net_push_failed<kFail>(g.diag, g.group_id, g.rank, g.world, comm::net_fifo(g),
                                   g.net.fifo_capacity, r, o, w[1], p.op);
    }
    const uint64_t now = mk_fifo_globaltimer();
    w[12] = static_cast<uint32_t>(now);
    w[13] = static_cast<uint32_t>(now >> 32);
    const uint64_t tag = static_cast<uint64_t>(mk_fifo_ll_tag(r.ticket)) << 32;
    uint64_t* d = mk_fifo_ll_entries(comm::net_fifo(g))[r.ticket & (g.net.fifo_capacity - 1u)].word;
    // The tile's bytes (every side thread's stores, ordered before this thread by the named
    // barrier) are visible system-wide before any word of the command.
    asm volatile("fence.acq_rel.sys;" ::: "memory");
#pragma unroll 1
    for (int i = 0; i < static_cast<int>(MK_FIFO_LL_WORDS); i += 2) {
      asm volatile("st.relaxed.sys.global.v2.u64 [%0], {%1, %2};" ::"l"(d + i), "l"(tag | w[i]),
                   "l"(tag | w[i + 1])
                   : "memory");
    }
    st.net_ticket = r.ticket;
    st.net_peer = o;
  }

  // reduce_slab with the ranks of other nodes read from their tile slots in the receive half:
  // rows [r0, r1) x columns [c0, c1) of tile (m_block, n_block).
  template <class T, int U, int kB>
  CUTLASS_DEVICE static void reduce_slab_net(Params const& p, uint64_t e, int m_block,
                                             uint64_t slot, int r0, int r1, int c0, int c1,
                                             int lane) {
    const comm::GroupDevice& g = p.group;
    const int v = (c1 - c0) / 8;
    const int total = (r1 - r0) * v;
    T* out = static_cast<T*>(p.out) - static_cast<int64_t>(p.out_row0) * p.n;
    // Source s's copy of this slab: its block s of the receive half, this tile's slot, row r0.
    const T* remote =
        reinterpret_cast<const T*>(g.net.recv_area + (e & 1) * (g.net.recv_bytes / 2) + slot +
                                   static_cast<uint64_t>(r0 - m_block * p.block_m) * p.block_n * 2);
#pragma unroll 1
    for (int base = lane; base < total; base += 32 * U) {
      int64_t at[U];
      int32_t rat[U];
      float acc[U][8];
      CUTLASS_PRAGMA_UNROLL
      for (int u = 0; u < U; ++u) {
        const int i = min(base + 32 * u, total - 1);
        const int row = i / v;
        at[u] = slab_at(p, r0, c0, v, i);
        rat[u] = row * p.block_n + (i - row * v) * 8;
        CUTLASS_PRAGMA_UNROLL
        for (int h = 0; h < 8; ++h) acc[u][h] = 0.f;
      }
#pragma unroll 1
      for (int s0 = 0; s0 < g.world; s0 += kB) {
        uint4 ld[U][kB];
        CUTLASS_PRAGMA_UNROLL
        for (int b = 0; b < kB; ++b) {
          if (s0 + b < g.world) {
            const uint8_t* region = g.data[s0 + b];
            CUTLASS_PRAGMA_UNROLL
            for (int u = 0; u < U; ++u) {
              const T* src =
                  region != nullptr
                      ? reinterpret_cast<const T*>(region) + at[u]
                      : reinterpret_cast<const T*>(reinterpret_cast<const uint8_t*>(remote) +
                                                   (s0 + b) * p.net_block) +
                            rat[u];
              ld[u][b] = __ldcg(reinterpret_cast<const uint4*>(src));
            }
          }
        }
        CUTLASS_PRAGMA_UNROLL
        for (int b = 0; b < kB; ++b) {  // rank order
          if (s0 + b < g.world) {
            CUTLASS_PRAGMA_UNROLL
            for (int u = 0; u < U; ++u) add8<T>(acc[u], ld[u][b]);
          }
        }
      }
      CUTLASS_PRAGMA_UNROLL
      for (int u = 0; u < U; ++u) *reinterpret_cast<uint4*>(out + at[u]) = pack8<T>(acc[u]);
    }
  }

  // reduce_items across nodes (gemm_rs: no two-shot items).
  template <class Sched, class T, int U, int kB>
  CUTLASS_DEVICE static void reduce_items_net(Params const& p, typename Sched::Params const& sp,
                                              int lane, int* counter) {
    const comm::GroupDevice& g = p.group;
    const uint64_t e = comm::op_begin(g);
    const int total_units = sp.units_m * sp.units_n * sp.batches * sp.splits;
    const int first = Sched::first_unit(), stride = Sched::unit_stride();
    const int units = first < total_units ? (total_units - first + stride - 1) / stride : 0;
    const int items = units * p.slabs;
    const int end = min(p.reduce_row0 + p.reduce_rows, p.m);
    const int upc = p.net_coalesce > 0 ? rs_units_per_cta<Sched>(sp) : 0;
    typename Sched::Cursor cursor;
#pragma unroll 1
    for (;;) {
      int i = lane == 0 ? atomicAdd(counter, 1) : 0;
      i = __shfl_sync(0xffffffffu, i, 0);
      if (i >= items) break;
      const int k = i / p.slabs, slab = i - k * p.slabs;
      const auto work = Sched::get(sp, first + k * stride, cursor);
      if (!work.valid || work.skip) continue;
      const int row0 = work.m_block * p.block_m + slab * p.slab_rows;
      const int row1 = min(row0 + p.slab_rows, p.m);
      const int c0 = work.n_block * p.block_n, c1 = min(c0 + p.block_n, p.n);
      if (row0 >= row1 || c0 >= c1) continue;
      const int r0 = max(row0, p.reduce_row0), r1 = min(row1, end);
      if (r0 >= r1) continue;
      if (lane < g.world) {
        if (g.data[lane] != nullptr) {  // lane s polls rank s's flag of the tile
          const int tile = work.m_block * p.tiles_n + work.n_block;
          comm::wait_geq<kFail>(g, g.flags[lane] + p.flag_base + tile, e,
                                comm::WaitSite{p.op, comm::kWaitPeerFlag, lane, tile});
        } else {
          // A rank with node-mates computes after its node's entry barrier: a derived wait,
          // bounded longer (so a dead rank's node-mates name it first; net_recv_item).
          int mates = 0;
#pragma unroll 1
          for (int r = 0; r < g.world; ++r) mates += g.node_of[r] == g.node_of[lane] ? 1 : 0;
          const uint32_t slot = kRsNetSlotBase + lane * cta_count() + cta_id();
          comm::net_wait_arrival<kFail>(
              g, g.net.arrival + slot, (e << kRsNetSeqBits) | static_cast<uint64_t>(k + 1),
              mates > 1 ? 2 * g.timeout_ns + 1000000000ull : g.timeout_ns, lane,
              comm::WaitSite{p.op, comm::kWaitNetArrival, lane, static_cast<int32_t>(slot)});
        }
      }
      __syncwarp();  // every rank's tile is in memory (the acquires precede the warp barrier)
      reduce_slab_net<T, U, kB>(p, e, work.m_block,
                                rs_tile_slot(p, upc, g.rank, work.m_block, work.n_block, k), r0, r1,
                                c0, c1, lane);
    }
  }

  // ---- kModeReduce, side warps -----------------------------------------------------------
  //
  // The three side warps reduce as one unit of 96 threads, with cp.async 16-byte copies into
  // SideStorage (16 KiB in flight per SM without registers: the warps have 40) — thread 0
  // claims a reduce item while any is left (never a two-shot copy item), threads < W wait for
  // the tile's flags, then the slab goes through the buffer in chunks of rows (every rank's
  // rows of a chunk at once), summed in rank order from shared memory and stored.

  // 16 KiB: a 96 KiB buffer on a 2-stage mainloop (fused19) measured 1.08-1.13x slower.
  static constexpr int kSideBufBytes = 16 * 1024;
  static_assert(kSideBufBytes % 32 == 0, "the side buffer splits into two 16-byte-vector halves");
  // One round of the staged tail (tail_reduce_staged): up to kTailMaxSlabs slabs, each
  // rows [r0, r0 + rows) x columns [c0, c0 + 8 v) of tile `tile` (slab `slab` of it), staged at
  // vector `at` of the ring (rank s's rows at at + s * rows * v).
  static constexpr int kTailMaxSlabs = 24;
  struct TailRound {
    int count;
    int r0[kTailMaxSlabs], c0[kTailMaxSlabs], at[kTailMaxSlabs], tile[kTailMaxSlabs];
    int shape[kTailMaxSlabs];  // rows | v << 10 | slab << 20
    int src[kTailMaxSlabs];    // -1: reduce every rank's rows; q: copy rank q's reduced rows
  };
  struct SideStorage {
    alignas(16) uint4 buf[kSideBufBytes / 16];
    uint64_t bulk_bar[2];  // kSideBulk: the two halves' load barriers
    int item;
    int item_run;  // kSidePipe: the claimed run of slabs
    TailRound round;
    uint64_t net_ticket;  // gemm_rs across nodes: the SEND role's last push (net_peer >= 0)
    int net_peer;
    // ... the open run of whole tiles to one owner (net_coalesce > 0): the run_n units of this
    // CTA up to run_last, from byte run_slot of owner run_owner's block
    int run_owner, run_last, run_n;
    int run_next;  // 1: the tile that closed the run starts the next one
    int run_upc;   // the most units a CTA has (rs_units_per_cta), with net_coalesce > 0
    uint64_t run_slot;
#if MKERNEL_FUSED_RS_NODES_SEND
    uint32_t net_words[MK_FIFO_LL_WORDS];  // ... and the payload of the command it builds
#endif
  };

  CUTLASS_DEVICE static void cp_async_16(void* smem, const void* gmem) {
    const uint32_t s = static_cast<uint32_t>(__cvta_generic_to_shared(smem));
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(s), "l"(gmem) : "memory");
  }

  template <class Sched, class T>
  CUTLASS_DEVICE static void side_reduce(Params const& p, typename Sched::Params const& sp, int t,
                                         int* counter, SideStorage& st) {
    const comm::GroupDevice& g = p.group;
    const int total_units = sp.units_m * sp.units_n * sp.batches * sp.splits;
    const int first = Sched::first_unit(), stride = Sched::unit_stride();
    const int units = first < total_units ? (total_units - first + stride - 1) / stride : 0;
    const int per_phase = units * p.slabs;
    const int end = min(p.reduce_row0 + p.reduce_rows, p.m);
    T* out = static_cast<T*>(p.out) - static_cast<int64_t>(p.out_row0) * p.n;
    typename Sched::Cursor cursor;
    int done = 0;  // items reduced (thread 0's count, for the timeline)
#pragma unroll 1
    for (;;) {
      if (t == 0) {  // claim a reduce item only: the consumers take the copy items
        int c = *reinterpret_cast<volatile int*>(counter);
        while (c < per_phase) {
          const int seen = atomicCAS(counter, c, c + 1);
          if (seen == c) break;
          c = seen;
        }
        st.item = c;
      }
      side_sync();
      const int i = st.item;
      side_sync();  // every thread has read the item before thread 0 claims the next
      if (i >= per_phase) {
        if (t == 0) add_items(p, kTlSideItems, done);
        break;
      }
      const int k = i / p.slabs, slab = i - k * p.slabs;
      const auto work = Sched::get(sp, first + k * stride, cursor);
      if (!work.valid || work.skip) continue;
      const int row0 = work.m_block * p.block_m + slab * p.slab_rows;
      const int r0 = max(row0, p.reduce_row0);
      const int r1 = min(min(row0 + p.slab_rows, p.m), end);
      const int c0 = work.n_block * p.block_n, c1 = min(c0 + p.block_n, p.n);
      if (r0 >= r1 || c0 >= c1) continue;
      const int tile = work.m_block * p.tiles_n + work.n_block;
      ++done;
      if (t < g.world) wait_tile(p, t, tile);
      side_sync();  // every rank's tile is in memory
      const int v = (c1 - c0) / 8;
      const int chunk_rows = max(1, kSideBufBytes / 16 / (g.world * v));
#pragma unroll 1
      for (int a = r0; a < r1; a += chunk_rows) {
        const int rows = min(chunk_rows, r1 - a);
        const int per_rank = rows * v;
#pragma unroll 1
        for (int j = t; j < g.world * per_rank; j += kSideThreads) {
          const int s = j / per_rank, q = j - s * per_rank, row = q / v;
          cp_async_16(&st.buf[j],
                      reinterpret_cast<const T*>(g.data[s]) +
                          (static_cast<int64_t>(a + row) * p.n + c0 + (q - row * v) * 8));
        }
        asm volatile("cp.async.commit_group;\ncp.async.wait_group 0;" ::: "memory");
        side_sync();  // every thread's copies are in shared memory
#pragma unroll 1
        for (int q = t; q < per_rank; q += kSideThreads) {
          const uint4 o = sum_staged<T>(st.buf, per_rank, q, g.world);
          store_reduced<T>(p, out, slab_at(p, a, c0, v, q), o);
        }
        side_sync();  // the buffer is read before the next chunk's copies overwrite it
      }
      if (p.two_shot && t == 0) {  // every thread's stores precede the barrier above
        comm::signal(g, g.rank, p.reduced_flag_base + tile * p.slabs + slab, comm::op_begin(g));
      }
    }
  }

  // ---- kModeReduce, the consumers' tail through the mainloop's ring (kTailStaged) -----------
  //
  // After their last tile the 256 consumer threads reduce the CTA's remaining slabs in rounds:
  // thread 0 claims as many reduce items as the ring holds (every rank's rows of each slab:
  // ~190 KiB, 12 slabs at W = 2), threads < W wait for the rounds' tiles at their rank, every
  // thread issues cp.async copies of its share into the ring (no registers held: the whole
  // round's loads are in flight at once, where the per-warp register path keeps 32 KiB per SM),
  // then each sums its vectors in rank order from shared memory and stores them. Two-shot: the
  // reduced slabs' flags follow a barrier, and later rounds copy the other owners' reduced slabs
  // the same way (staged, then stored). Whatever is left (none, normally) goes to reduce_items.

  static constexpr int kTailThreads = 2 * cutlass::NumThreadsPerWarpGroup;
  static constexpr uint32_t kTailBarrier = 3;  // named barrier (user id; the side warps use 2)
  CUTLASS_DEVICE static void tail_sync() {
    cutlass::arch::NamedBarrier::sync(kTailThreads, kTailBarrier);
  }

  // Thread 0: claims this round's items while the ring has room for another full item: reduce
  // items (item < per_phase) and, two-shot, copy items (the other owners' reduced rows of a
  // slab, one entry per owner) — never both in one round: a round waits for all its flags
  // before moving anything, so a copy waiting for a peer's reduced slab must not hold back a
  // reduction that peer waits for. Items with nothing for this rank are claimed and dropped.
  template <class Sched>
  CUTLASS_DEVICE static int claim_round(Params const& p, typename Sched::Params const& sp,
                                        int* counter, int per_phase, int first, int stride,
                                        int ring_vecs, TailRound& round) {
    const comm::GroupDevice& g = p.group;
    const int max_v = p.block_n / 8;
    const int need_max = g.world * p.slab_rows * max_v;
    const int end = min(p.reduce_row0 + p.reduce_rows, p.m);
    const int limit = p.two_shot ? 2 * per_phase : per_phase;
    typename Sched::Cursor cursor;
    int n = 0, used = 0;
    bool copies = false;  // this round's kind, set by its first entry
    int c = *reinterpret_cast<volatile int*>(counter);
#pragma unroll 1
    while (n + g.world <= kTailMaxSlabs && used + need_max <= ring_vecs && c < limit) {
      if (n > 0 && (c >= per_phase) != copies) break;  // one kind per round
      const int seen = atomicCAS(counter, c, c + 1);
      if (seen != c) {
        c = seen;
        continue;
      }
      int i = c++;
      const bool copy = i >= per_phase;
      if (copy) i -= per_phase;
      const int k = i / p.slabs, slab = i - k * p.slabs;
      const auto work = Sched::get(sp, first + k * stride, cursor);
      if (!work.valid || work.skip) continue;
      const int row0 = work.m_block * p.block_m + slab * p.slab_rows;
      const int row1 = min(row0 + p.slab_rows, p.m);
      const int c0 = work.n_block * p.block_n, c1 = min(c0 + p.block_n, p.n);
      if (row0 >= row1 || c0 >= c1) continue;
      const int v = (c1 - c0) / 8;
      const int tile = work.m_block * p.tiles_n + work.n_block;
      if (!copy) {
        const int r0 = max(row0, p.reduce_row0), r1 = min(row1, end);
        if (r0 >= r1) continue;
        round.r0[n] = r0;
        round.c0[n] = c0;
        round.at[n] = used;
        round.tile[n] = tile;
        round.shape[n] = (r1 - r0) | v << 10 | slab << 20;
        round.src[n] = -1;
        used += g.world * (r1 - r0) * v;
        ++n;
      } else {
#pragma unroll 1
        for (int q = row0 / p.rows_per_rank; q <= (row1 - 1) / p.rows_per_rank; ++q) {
          if (q == g.rank) continue;
          const int r0 = max(row0, q * p.rows_per_rank);
          const int r1 = min(row1, (q + 1) * p.rows_per_rank);
          round.r0[n] = r0;
          round.c0[n] = c0;
          round.at[n] = used;
          round.tile[n] = tile;
          round.shape[n] = (r1 - r0) | v << 10 | slab << 20;
          round.src[n] = q;
          used += (r1 - r0) * v;
          ++n;
        }
      }
      copies = copy;
    }
    return n;
  }

  template <class Sched, class T>
  CUTLASS_DEVICE static void tail_reduce_staged(Params const& p, typename Sched::Params const& sp,
                                                int t, int* counter, TailRound& round, uint4* ring,
                                                int ring_vecs) {
    const comm::GroupDevice& g = p.group;
    const int total_units = sp.units_m * sp.units_n * sp.batches * sp.splits;
    const int first = Sched::first_unit(), stride = Sched::unit_stride();
    const int units = first < total_units ? (total_units - first + stride - 1) / stride : 0;
    const int per_phase = units * p.slabs;
    T* out = static_cast<T*>(p.out) - static_cast<int64_t>(p.out_row0) * p.n;
    T* reduced = reinterpret_cast<T*>(g.data[g.rank] + p.reduced_offset);
    int done = 0;
#pragma unroll 1
    for (;;) {
      tail_sync();  // the last round's reads of the ring and of `round` are over
      if (t == 0) {
        round.count =
            claim_round<Sched>(p, sp, counter, per_phase, first, stride, ring_vecs, round);
      }
      tail_sync();
      const int n = round.count;
      if (n == 0) break;
      done += n;
      if (round.src[0] < 0 && t < g.world) {  // thread s waits for rank s's tiles of the round
#pragma unroll 1
        for (int e = 0; e < n; ++e) {
          const int tile = round.tile[e];
          if (e > 0 && tile == round.tile[e - 1]) continue;
          wait_tile(p, t, tile);
        }
      } else if (round.src[0] >= 0 && t < n) {  // thread e waits for entry e's reduced slab
        const int q = round.src[t], tile = round.tile[t];
        comm::wait_geq<kFail>(
            g, g.flags[q] + p.reduced_flag_base + tile * p.slabs + (round.shape[t] >> 20),
            comm::op_begin(g), comm::WaitSite{p.op, comm::kWaitPeerFlag, q, tile});
      }
      tail_sync();  // everything the round reads is in memory
#pragma unroll 1
      for (int e = 0; e < n; ++e) {
        const int rows = round.shape[e] & 1023, v = (round.shape[e] >> 10) & 1023;
        const int per_rank = rows * v;
        const int shift = (v & (v - 1)) == 0 ? __ffs(v) - 1 : -1;
        const int64_t base = static_cast<int64_t>(round.r0[e]) * p.n + round.c0[e];
        uint4* dst = ring + round.at[e];
        const int from = round.src[e];
#pragma unroll 1
        for (int s = 0; s < (from < 0 ? g.world : 1); ++s, dst += per_rank) {
          const T* src = from < 0
                             ? reinterpret_cast<const T*>(g.data[s]) + base
                             : reinterpret_cast<const T*>(g.data[from] + p.reduced_offset) + base;
#pragma unroll 1
          for (int q = t; q < per_rank; q += kTailThreads) {
            const int row = shift >= 0 ? q >> shift : q / v;
            cp_async_16(dst + q, src + static_cast<int64_t>(row) * p.n + (q - row * v) * 8);
          }
        }
      }
      asm volatile("cp.async.commit_group;\ncp.async.wait_group 0;" ::: "memory");
      tail_sync();  // every thread's copies are in shared memory
#pragma unroll 1
      for (int e = 0; e < n; ++e) {
        const int rows = round.shape[e] & 1023, v = (round.shape[e] >> 10) & 1023;
        const int per_rank = rows * v;
        const int shift = (v & (v - 1)) == 0 ? __ffs(v) - 1 : -1;
        const int64_t base = static_cast<int64_t>(round.r0[e]) * p.n + round.c0[e];
        const uint4* src = ring + round.at[e];
        if (round.src[e] >= 0) {  // a copy of another owner's reduced rows
#pragma unroll 1
          for (int q = t; q < per_rank; q += kTailThreads) {
            const int row = shift >= 0 ? q >> shift : q / v;
            *reinterpret_cast<uint4*>(out + base + static_cast<int64_t>(row) * p.n +
                                      (q - row * v) * 8) = src[q];
          }
          continue;
        }
#pragma unroll 1
        for (int q = t; q < per_rank; q += kTailThreads) {
          const uint4 o = sum_staged<T>(src, per_rank, q, g.world);
          const int row = shift >= 0 ? q >> shift : q / v;
          const int64_t at = base + static_cast<int64_t>(row) * p.n + (q - row * v) * 8;
          *reinterpret_cast<uint4*>(out + at) = o;
          if (p.two_shot) *reinterpret_cast<uint4*>(reduced + at) = o;
        }
      }
      if (p.two_shot && round.src[0] < 0) {
        tail_sync();  // every thread's reduced stores precede the flags
        if (t == 0) {
#pragma unroll 1
          for (int e = 0; e < n; ++e) {
            comm::signal(g, g.rank,
                         p.reduced_flag_base + round.tile[e] * p.slabs + (round.shape[e] >> 20),
                         comm::op_begin(g));
          }
        }
      }
    }
    if (t == 0) {
      add_items(p, kTlTailItems, done);
      stamp(p, kTlTailDone);
    }
  }

  // The side warps' reduce, pipelined (kSidePipe): thread 0 claims the slabs left in the tile of
  // the next item (one run, one flag check at every rank), then the run's rows go through the
  // two halves of the side buffer in pieces, piece j + 1's copies in flight while piece j is
  // summed in rank order (same bits as every other path) and stored.
  template <class Sched, class T>
  CUTLASS_DEVICE static void side_reduce_pipe(Params const& p, typename Sched::Params const& sp,
                                              int t, int* counter, SideStorage& st) {
    const comm::GroupDevice& g = p.group;
    const int total_units = sp.units_m * sp.units_n * sp.batches * sp.splits;
    const int first = Sched::first_unit(), stride = Sched::unit_stride();
    const int units = first < total_units ? (total_units - first + stride - 1) / stride : 0;
    const int per_phase = units * p.slabs;
    T* out = static_cast<T*>(p.out) - static_cast<int64_t>(p.out_row0) * p.n;
    constexpr int kHalf = kSideBufBytes / 32;  // vectors per half
    typename Sched::Cursor cursor;
    int done = 0;
#pragma unroll 1
    for (;;) {
      if (t == 0) {  // reduce items only, up to the end of the tile
        int c = *reinterpret_cast<volatile int*>(counter), run = 0;
        while (c < per_phase) {
          run = min(p.slabs - c % p.slabs, per_phase - c);
          const int seen = atomicCAS(counter, c, c + run);
          if (seen == c) break;
          c = seen;
        }
        st.item = c;
        st.item_run = run;
      }
      side_sync();
      const int i = st.item, run = st.item_run;
      side_sync();  // every thread has read the claim before thread 0 makes the next
      if (i >= per_phase) {
        if (t == 0) add_items(p, kTlSideItems, done);
        break;
      }
      const int k = i / p.slabs, slab0 = i - k * p.slabs;
      const auto work = Sched::get(sp, first + k * stride, cursor);
      if (!work.valid || work.skip) continue;
      const int tile_row0 = work.m_block * p.block_m;
      const int r0 = max(tile_row0 + slab0 * p.slab_rows, p.reduce_row0);
      const int r1 = min(min(tile_row0 + (slab0 + run) * p.slab_rows, p.m),
                         min(p.reduce_row0 + p.reduce_rows, p.m));
      const int c0 = work.n_block * p.block_n;
      const int v = (min(c0 + p.block_n, p.n) - c0) / 8;
      if (r0 >= r1 || v <= 0) continue;
      const int tile = work.m_block * p.tiles_n + work.n_block;
      done += run;
      if (t < g.world) wait_tile(p, t, tile);
      side_sync();  // every rank's tile is in memory
      const int piece_rows = max(1, kHalf / (g.world * v));
      // Issues the copies of the piece starting at row a into half h (every thread its share).
      auto issue = [&](int a, int h) {
        const int per_rank = min(piece_rows, r1 - a) * v;
#pragma unroll 1
        for (int j = t; j < g.world * per_rank; j += kSideThreads) {
          const int s = j / per_rank, q = j - s * per_rank, row = q / v;
          cp_async_16(&st.buf[h * kHalf + j],
                      reinterpret_cast<const T*>(g.data[s]) +
                          (static_cast<int64_t>(a + row) * p.n + c0 + (q - row * v) * 8));
        }
        asm volatile("cp.async.commit_group;" ::: "memory");
      };
      issue(r0, 0);
      int h = 0;
#pragma unroll 1
      for (int a = r0; a < r1; a += piece_rows, h ^= 1) {
        if (a + piece_rows < r1) {
          issue(a + piece_rows, h ^ 1);  // its half was freed by the last piece's barrier
        } else {
          asm volatile("cp.async.commit_group;" ::: "memory");  // keeps the group count even
        }
        asm volatile("cp.async.wait_group 1;" ::: "memory");  // piece a has landed
        side_sync();  // every thread's copies of piece a are in shared memory
        const int per_rank = min(piece_rows, r1 - a) * v;
#pragma unroll 1
        for (int q = t; q < per_rank; q += kSideThreads) {
          const uint4 o = sum_staged<T>(st.buf + h * kHalf, per_rank, q, g.world);
          store_reduced<T>(p, out, slab_at(p, a, c0, v, q), o);
        }
        side_sync();  // half h is read before piece a + 2 is copied into it
      }
      if (p.two_shot && t == 0) {  // every thread's stores precede the barrier above
#pragma unroll 1
        for (int sl = slab0; sl < slab0 + run; ++sl) {
          const int s0 = tile_row0 + sl * p.slab_rows;
          if (max(s0, r0) < min(s0 + p.slab_rows, r1)) {  // a slab with rows of this rank's share
            comm::signal(g, g.rank, p.reduced_flag_base + tile * p.slabs + sl, comm::op_begin(g));
          }
        }
      }
    }
  }

  // The COPY role staged through SideStorage (kSideStaged): the 96 side threads move one item at
  // a time as a unit, 16 KiB per round by cp.async (no registers held), then store it to the
  // peer; the item's flag follows the unit's barrier.
  CUTLASS_DEVICE static void copy_role_staged(Params const& p, Call const& call, int t,
                                              SideStorage& st) {
    const comm::GroupDevice& g = p.group;
    if (t == 0) comm::entry_barrier<kFail>(g, call.epoch, p.op, p.signature);
    side_sync();
    const int items = g.world * p.chunks;
#pragma unroll 1
    for (;;) {
      if (t == 0) st.item = claim_item(p, call.epoch);
      side_sync();
      const int i = st.item;
      side_sync();  // every thread has read the item before thread 0 claims the next
      if (i >= items) break;
      const int j = i / p.chunks, c = i - j * p.chunks;
      const int peer = (g.rank + j) % g.world;
      uint8_t* region = g.data[peer];
      if (region == nullptr) continue;  // another node: the host never fuses that case
      const int row0 = c * p.chunk_rows;
      const int rows = min(p.chunk_rows, p.m_local - row0);
      uint8_t* dst = region + (static_cast<int64_t>(g.rank) * p.m_local + row0) * p.row_bytes;
      const uint8_t* src = p.x + static_cast<int64_t>(row0) * p.row_bytes;
      const int vecs = static_cast<int>(rows * p.row_bytes / 16);  // a chunk is <= 128 KiB
#pragma unroll 1
      for (int v0 = 0; v0 < vecs; v0 += kSideBufBytes / 16) {
        const int n = min(kSideBufBytes / 16, vecs - v0);
        const uint4* s = reinterpret_cast<const uint4*>(src) + v0;
        uint4* d = reinterpret_cast<uint4*>(dst) + v0;
#pragma unroll 1
        for (int q = t; q < n; q += kSideThreads) cp_async_16(&st.buf[q], s + q);
        asm volatile("cp.async.commit_group;\ncp.async.wait_group 0;" ::: "memory");
        side_sync();
#pragma unroll 1
        for (int q = t; q < n; q += kSideThreads) d[q] = st.buf[q];
        side_sync();  // the buffer is read (and every store issued) before it is reused
      }
      if (t == 0) comm::signal(g, peer, p.flag_base + g.rank * p.chunks + c, call.epoch);
    }
  }

  // The COPY role by bulk copies (kSideBulk): side thread 0 alone moves each claimed item in
  // pieces of half the side buffer, double-buffered: while piece j goes out to the peer as a
  // bulk store, piece j + 1 comes in as a bulk load completing on its half's mbarrier; before a
  // half is loaded again the store that read it has finished reading. The item's flag follows
  // once its stores are written (bulk wait_group 0) and ordered for the generic proxy.
  CUTLASS_DEVICE static void copy_role_bulk(Params const& p, Call const& call, int t,
                                            SideStorage& st) {
    const comm::GroupDevice& g = p.group;
    if (t == 0) {
      comm::entry_barrier<kFail>(g, call.epoch, p.op, p.signature);
      stamp(p, kTlEntered);
    }
    if (t != 0) return;  // one thread moves everything; the others have nothing to do
    constexpr uint32_t kPiece = kSideBufBytes / 2;
    cutlass::arch::ClusterTransactionBarrier::init(&st.bulk_bar[0], 1);
    cutlass::arch::ClusterTransactionBarrier::init(&st.bulk_bar[1], 1);
    asm volatile("fence.mbarrier_init.release.cluster;\nfence.proxy.async.shared::cta;" ::
                     : "memory");
    // The two halves' mbarrier phases, bit b for half b: a register (a uint32_t[2] indexed by
    // k & 1 lived in local memory, one load and one store per piece).
    uint32_t phases = 0;
    const uint32_t buf0 = static_cast<uint32_t>(__cvta_generic_to_shared(&st.buf[0]));
    const uint32_t bar0 = static_cast<uint32_t>(__cvta_generic_to_shared(&st.bulk_bar[0]));
    const int items = g.world * p.chunks;
#pragma unroll 1
    for (;;) {
      const int i = claim_item(p, call.epoch);
      if (i >= items) break;
      const int j = i / p.chunks, c = i - j * p.chunks;
      const int peer = (g.rank + j) % g.world;
      uint8_t* region = g.data[peer];
      if (region == nullptr) continue;  // another node: the host never fuses that case
      const int row0 = c * p.chunk_rows;
      const int rows = min(p.chunk_rows, p.m_local - row0);
      uint8_t* dst = region + (static_cast<int64_t>(g.rank) * p.m_local + row0) * p.row_bytes;
      const uint8_t* src = p.x + static_cast<int64_t>(row0) * p.row_bytes;
      const uint32_t bytes = static_cast<uint32_t>(rows * p.row_bytes);  // <= 128 KiB
      const int pieces = static_cast<int>((bytes + kPiece - 1) / kPiece);
      auto load = [&](int k) {
        const uint32_t b = k & 1, n = min(kPiece, bytes - k * kPiece);
        cutlass::arch::ClusterTransactionBarrier::arrive_and_expect_tx(&st.bulk_bar[b], n);
        asm volatile(
            "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, "
            "[%3];" ::"r"(buf0 + b * kPiece),
            "l"(src + static_cast<int64_t>(k) * kPiece), "r"(n), "r"(bar0 + b * 8)
            : "memory");
      };
      load(0);
#pragma unroll 1
      for (int k = 0; k < pieces; ++k) {
        const uint32_t b = k & 1;
        if (k + 1 < pieces) {
          // The other half was read by piece k - 1's store: wait until it has been read out.
          asm volatile("cp.async.bulk.wait_group.read 0;" ::: "memory");
          load(k + 1);
        }
        cutlass::arch::ClusterTransactionBarrier::wait(&st.bulk_bar[b], (phases >> b) & 1u);
        phases ^= 1u << b;
        const uint32_t n = min(kPiece, bytes - k * kPiece);
        asm volatile(
            "cp.async.bulk.global.shared::cta.bulk_group [%0], [%1], %2;\n"
            "cp.async.bulk.commit_group;" ::"l"(dst + static_cast<int64_t>(k) * kPiece),
            "r"(buf0 + b * kPiece), "r"(n)
            : "memory");
      }
      comm::tma_store_wait_all_writes();  // the item's bulk stores are written
      comm::fence_proxy_async_global();
      comm::signal(g, peer, p.flag_base + g.rank * p.chunks + c, call.epoch);
    }
  }

  // ---- the hooks the kernel calls ---------------------------------------------------------

  // The producer warpgroup's three idle warps (t in [0, 96)), from the start of the call.
  template <class Sched>
  CUTLASS_DEVICE static void side_role(Params const& p, Call const& call, int t,
                                       typename Sched::Params const& sp, int* counter,
                                       SideStorage& st) {
    side_work<Sched>(p, call, t, sp, counter, st);
    if (t == 0) stamp(p, kTlSideDone);
  }

  template <class Sched>
  CUTLASS_DEVICE static void side_work(Params const& p, Call const& call, int t,
                                       typename Sched::Params const& sp, int* counter,
                                       SideStorage& st) {
#if MKERNEL_FUSED_RS_NODES_SEND
    if (p.mode == kModeReduce && p.net_remote > 0) {
      net_send_tiles<Sched>(p, sp, t, st);  // across nodes the consumers' tail reduces everything
      return;
    }
#endif
    if (p.mode == kModeAllGather) {
      if (p.side_mode == kSideCopyEngine) {  // the copy engines move the rows
        if (t == 0) {
          comm::entry_barrier<kFail>(p.group, call.epoch, p.op, p.signature);
          stamp(p, kTlEntered);
        }
      } else if (p.side_mode == kSideBulk) {
        copy_role_bulk(p, call, t, st);
      } else if (p.side_mode == kSideStaged) {
        copy_role_staged(p, call, t, st);
      } else {
        copy_role(p, call, t);
      }
    } else if (p.side_mode == kSideIdle) {
      return;  // the consumers take every slab
    } else if (p.side_mode == kSidePipe) {
      if (p.bf16) {
        side_reduce_pipe<Sched, __nv_bfloat16>(p, sp, t, counter, st);
      } else {
        side_reduce_pipe<Sched, __half>(p, sp, t, counter, st);
      }
    } else if (p.side_mode == kSideRegs) {
      // Per warp from registers (the A/B alternative, kept for measuring: 40 registers hold one
      // vector of one rank at a time per lane; two ranks' loads spilled 80 bytes).
      reduce_role<Sched, 1, 1>(p, sp, t % 32, counter);
    } else if (p.bf16) {
      side_reduce<Sched, __nv_bfloat16>(p, sp, t, counter, st);
    } else {
      side_reduce<Sched, __half>(p, sp, t, counter, st);
    }
  }

  // The consumer warpgroups (t in [0, 256)) after their last tile is stored; `ring` is the
  // mainloop's shared memory (ring_bytes), theirs from now on.
  template <class Sched>
  CUTLASS_DEVICE static void tail_role(Params const& p, Call const&, int t,
                                       typename Sched::Params const& sp, int* counter,
                                       SideStorage& st, void* ring, int ring_bytes) {
    if (t == 0) stamp(p, kTlGemmDone);
    if (p.mode != kModeReduce) return;
    const int ring_vecs = ring_bytes / 16;
    // The staged rounds need room for one slab of every rank (W = 2..12 with the fused configs).
    if (p.tail_mode == kTailStaged && p.group.world * p.slab_rows * (p.block_n / 8) <= ring_vecs) {
      if (p.bf16) {
        tail_reduce_staged<Sched, __nv_bfloat16>(p, sp, t, counter, st.round,
                                                 static_cast<uint4*>(ring), ring_vecs);
      } else {
        tail_reduce_staged<Sched, __half>(p, sp, t, counter, st.round, static_cast<uint4*>(ring),
                                          ring_vecs);
      }
    }
    // The rest, per warp: every item with tail_mode kTailRegs (or a ring too small for one
    // item), else nothing (each warp finds the counter past the last item).
    reduce_role<Sched, 4, 2>(p, sp, t % 32, counter);
  }

  // Hook (a), one lane of the producer warp, before the A loads of tile row m_block.
  CUTLASS_DEVICE static void producer_wait(Params const& p, Call& call, int m_block, int block_m) {
    if (p.mode == kModeAllGather) {
      const int row0 = m_block * block_m;
      if (row0 >= p.m_total) return;
      wait_gathered_rows(p, call, row0, min(row0 + block_m, p.m_total) - 1);
      comm::fence_proxy_async_global();  // the TMA loads that follow must see those rows
    } else if (!call.entered) {
      // The first tile of this CTA: no peer may still be reading the partial we overwrite.
      comm::entry_barrier<kFail>(p.group, call.epoch, p.op, p.signature);
      stamp(p, kTlEntered);
      call.entered = true;
    }
  }

  // Hook (b) after the TMA-store epilogue (every consumer thread): the storing warp waits for
  // its writes, then one thread releases the tile's flag at this rank. The call number is read
  // again rather than carried through the mainloop in the consumers' registers (*epoch changes
  // only in the last CTA's call_end, after every CTA's tiles).
  CUTLASS_DEVICE static void tile_done(Params const& p, Call const&, int m_block, int n_block,
                                       int block_m, int mma_thread_idx) {
    if (p.mode != kModeReduce || m_block * block_m >= p.m) return;
    if (mma_thread_idx < 32) {
      comm::tma_store_wait_all_writes();
      __syncwarp();
      if (mma_thread_idx == 0) {
        // The tile's bulk stores are written; the proxy fence orders them before this thread's
        // generic accesses, and the release store (MEMBAR.SYS + strong store) publishes them:
        // no second, sequentially consistent system fence (comm::signal's) per tile.
        comm::fence_proxy_async_global();
        comm::st_release_sys(
            p.group.flags[p.group.rank] + p.flag_base + m_block * p.tiles_n + n_block,
            comm::op_begin(p.group));
      }
    }
  }

  // The same after register stores (ping-pong consumers; a warpgroup barrier precedes it).
  CUTLASS_DEVICE static void tile_stored(Params const& p, Call const&, int m_block, int n_block,
                                         int block_m, int warpgroup_thread_idx) {
    if (p.mode != kModeReduce || m_block * block_m >= p.m || warpgroup_thread_idx != 0) return;
    comm::signal(p.group, p.group.rank, p.flag_base + m_block * p.tiles_n + n_block,
                 comm::op_begin(p.group));
  }

  // One thread per CTA after the CTA's last access of group memory. The call number is read
  // again (this CTA has not taken its exit ticket yet, so *epoch is still e - 1): a Call used
  // here would stay live through every role, the consumers' mainloop included.
  // Then the launch gate's exit flag (fused_gate.cu): the CTA that finds *epoch == e after
  // op_end took the last ticket (or ran after it), so every CTA of the grid is past its group
  // work; it releases kExit + rank = e at every same-node rank. (A non-last CTA reading e too
  // releases the same value again: harmless.)
  CUTLASS_DEVICE static void call_end(Params const& p, Call const&) {
    stamp(p, kTlExit);
    const uint64_t e = comm::op_begin(p.group);
    comm::op_end(p.group, e);
    if (*reinterpret_cast<volatile uint64_t*>(p.group.epoch) == e) {
      for (int q = 0; q < p.group.world; ++q) {
        if (p.group.flags[q] != nullptr) {
          comm::st_release_sys(p.group.flags[q] + comm::FlagSlot::kExit + p.group.rank, e);
        }
      }
    }
  }
};

}  // namespace mkernel::fused
