// Ring attention's K/V rotation kernels (protocol: ring_kv_api.h): the call's entry and end,
// the per-step send (copy one shard into the next rank's buffer, item by item, releasing each
// item's arrival flag there) and the per-step credit release; the whole mode's send kernels;
// and the ring backward's sum of the dK/dV partials that travelled to this rank (sum_key_grads).
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstring>

#include "../../env_knobs.h"
#include "../comm/group_sync.cuh"
#include "../comm/net_ops.cuh"
#include "ring_kv_api.h"

namespace mkernel::ring_attention {
namespace {

constexpr int kSendThreads = 512;
// 16-byte loads in flight per thread: the whole-sequence send takes 16 (128 KiB in flight per
// CTA; at 8, 64 KiB, its 2 CTAs moved ~100 GB/s, latency-bound, and the MHA shard of the
// benchmark took ~1.3 ms to arrive while the causal engine's first round needs it whole; 109
// registers, no spills); the per-step send 4 (at 8 ptxas spills it: two copies inlined at 128
// registers).
constexpr int kUnrollWhole = 16;
constexpr int kUnrollStep = 4;

// n bytes (a multiple of 16, both ends 16-byte aligned: rows are h_kv * d elements with d a
// multiple of 64) by all the CTA's threads.
// kFresh: the source was written by another agent after an acquire (the inter-node receive
// area: the transport's copy or an RDMA write): ld.global.cv, never a line an earlier call left
// in a cache; else ld.global.cg.
template <bool kFresh>
__device__ __forceinline__ uint4 load16(const uint4* p) {
  if constexpr (kFresh) return __ldcv(p);
  else return __ldcg(p);
}

template <int kUnroll, bool kFresh = false>
__device__ __forceinline__ void copy16(uint8_t* dst, const uint8_t* src, uint64_t n) {
  const uint64_t nv = n / 16;
  uint4* d = reinterpret_cast<uint4*>(dst);
  const uint4* s = reinterpret_cast<const uint4*>(src);
  uint64_t i = threadIdx.x;
  for (; i + (kUnroll - 1) * kSendThreads < nv; i += kUnroll * kSendThreads) {
    uint4 v[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) v[u] = load16<kFresh>(s + i + u * kSendThreads);
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) d[i + u * kSendThreads] = v[u];
  }
  for (; i < nv; i += kSendThreads) d[i] = load16<kFresh>(s + i);
}

__global__ void begin_kernel(comm::GroupDevice g, uint64_t signature) {
  if (threadIdx.x != 0) return;
  comm::entry_barrier(g, comm::op_begin(g), comm::kOpRingAttention, signature);
}

__global__ void end_kernel(comm::GroupDevice g) {
  if (threadIdx.x != 0) return;
  const uint64_t e = comm::op_begin(g);
  *reinterpret_cast<volatile uint64_t*>(g.epoch) = e;
  __threadfence();
}

__global__ void release_kernel(comm::GroupDevice g, int step) {
  if (threadIdx.x != 0) return;
  const int prev = (g.rank + g.world - 1) % g.world;
  comm::signal(g, prev, consumed_slot(step), comm::op_begin(g));
}

// Items are taken last chunk first within a batch: the engine walks a head's key blocks from
// the last one down, so the first blocks it waits for are the first to arrive.
__global__ void __launch_bounds__(kSendThreads, 1)
    send_kernel(comm::GroupDevice g, Geometry geo, const uint8_t* k, const uint8_t* v, int step) {
  const uint64_t e = comm::op_begin(g);
  const int next = (g.rank + 1) % g.world;
  const int dst_buf = (step + 1) % 2;
  uint8_t* dst = buffer(g.data[next], geo, dst_buf);
  const uint64_t shard = geo.shard_bytes();
  if (step >= 1 && threadIdx.x == 0) {
    // Credit: rank `next` finished step - 1, the last user of its buffer dst_buf.
    comm::wait_geq(g, g.flags[g.rank] + consumed_slot(step - 1), e,
                   comm::WaitSite{comm::kOpRingAttention, comm::kWaitPeerFlag, next,
                                  static_cast<int32_t>(consumed_slot(step - 1))});
  }
  const int items = geo.batch * geo.chunks;
  for (int t = blockIdx.x; t < items; t += gridDim.x) {
    const int b = t / geo.chunks;
    const int chunk = geo.chunks - 1 - t % geo.chunks;
    const int item = b * geo.chunks + chunk;
    if (step >= 1 && threadIdx.x == 0) {
      // The item we forward has arrived here (from rank - 1's send step - 1).
      const int prev = (g.rank + g.world - 1) % g.world;
      comm::wait_geq(g, g.flags[g.rank] + arrive_slot(step, item), e,
                     comm::WaitSite{comm::kOpRingAttention, comm::kWaitPeerFlag, prev, item});
    }
    __syncthreads();
    const int row0 = chunk * geo.chunk_rows;
    const int rows = min(geo.chunk_rows, geo.seq - row0);
    const uint64_t off = (static_cast<uint64_t>(b) * geo.seq + row0) * geo.row_bytes;
    const uint64_t n = static_cast<uint64_t>(rows) * geo.row_bytes;
    copy16<kUnrollStep>(dst + off, k + off, n);
    copy16<kUnrollStep>(dst + shard + off, v + off, n);
    __syncthreads();
    if (threadIdx.x == 0) comm::signal(g, next, arrive_slot(step + 1, item), e);
  }
}

// The whole-sequence mode (ring_kv_api.h): work items (step j, batch, chunk), steps in order;
// step 0 copies the local shard (the op's input) into position W - 2 at the next rank, step j
// forwards position W - 1 - j here to W - 2 - j there once it has arrived. (The local shard's
// own copy into position W - 1 is a memcpy on the caller's stream, then mark_whole.)
//
// Within a (step, batch) the chunks go last first (the engine walks a tile's key blocks from the
// last one down), except when `causal` and the receiver sees only the first half of the shard
// (zigzag: the shard of src < receiver holds global chunks src, seen by all the receiver's
// queries, and 2W-1-src, seen by none of them): that half first (last chunk first), then the
// other, which the receiver only forwards.
__global__ void __launch_bounds__(kSendThreads, 1)
    send_whole_kernel(comm::GroupDevice g, Geometry geo, const uint8_t* k, const uint8_t* v,
                      bool causal) {
  const uint64_t e = comm::op_begin(g);
  const int world = g.world;
  const int next = (g.rank + 1) % world;
  const int prev = (g.rank + world - 1) % world;
  const uint64_t half = static_cast<uint64_t>(world) * geo.shard_bytes();  // v after k
  uint8_t* own = g.data[g.rank];
  uint8_t* dst = g.data[next];
  const int per_step = geo.batch * geo.chunks;
  const int items = (world - 1) * per_step;
  if (threadIdx.x == 0) {  // this CTA runs (wait_send_started)
    comm::st_release_sys(g.flags[g.rank] + send_started_slot(static_cast<int>(blockIdx.x)), e);
  }
  for (int t = blockIdx.x; t < items; t += gridDim.x) {
    const int j = t / per_step;
    const int b = (t % per_step) / geo.chunks;
    const int u = t % geo.chunks;
    const int src = (g.rank - j + world) % world;  // whose shard step j forwards
    // Chunks that start in the shard's first half (the receiver's visible half when low_first).
    const int low = (geo.seq / 2 + geo.chunk_rows - 1) / geo.chunk_rows;
    const bool low_first = causal && src < next;
    const int chunk = !low_first ? geo.chunks - 1 - u
                                 : (u < low ? low - 1 - u : geo.chunks - 1 - (u - low));
    const int p = world - 1 - j;
    const int row0 = chunk * geo.chunk_rows;
    const int rows = min(geo.chunk_rows, geo.seq - row0);
    const uint64_t n = static_cast<uint64_t>(rows) * geo.row_bytes;
    const uint64_t src_off = (static_cast<uint64_t>(b) * geo.seq + row0) * geo.row_bytes;
    auto at = [&](int pos) {
      return ((static_cast<uint64_t>(b) * world + pos) * geo.seq + row0) * geo.row_bytes;
    };
    if (j >= 1 && threadIdx.x == 0) {
      comm::wait_geq(g, g.flags[g.rank] + whole_slot(world, geo.chunks, b, p, chunk), e,
                     comm::WaitSite{comm::kOpRingAttention, comm::kWaitPeerFlag, prev,
                                    static_cast<int32_t>(t)});
    }
    __syncthreads();
    const uint8_t* sk = j == 0 ? k + src_off : own + at(p);
    const uint8_t* sv = j == 0 ? v + src_off : own + half + at(p);
    copy16<kUnrollWhole>(dst + at(p - 1), sk, n);
    copy16<kUnrollWhole>(dst + half + at(p - 1), sv, n);
    __syncthreads();
    if (threadIdx.x == 0) comm::signal(g, next, whole_slot(world, geo.chunks, b, p - 1, chunk), e);
  }
}

// --- across nodes (ring_kv_api.h "the whole-sequence mode across nodes") --------------------

// The n-th rank (ascending, this one excluded) of another node (remote) or of this node.
__device__ __forceinline__ int nth_rank(const comm::GroupDevice& g, int n, bool remote) {
#pragma unroll 1
  for (int r = 0; r < g.world; ++r) {
    if (r == g.rank || (g.data[r] == nullptr) != remote) continue;
    if (n-- == 0) return r;
  }
  return g.rank;  // unreachable for n < the count the host passed
}

// The u-th item of a shard in the across-nodes order: batch 0 first (the engine's linear tile
// order starts there: each tile needs every key of its batch), within a batch the chunks last
// first (the engine's key walk). Session 32: the order was items - 1 - u, batch B - 1 first, so
// the engine's first tiles waited for the whole shard's transfer (W = 2 over 2 nodes, b = 4: the
// call took the compute-alone time plus the all-gather's, 6.9 vs 3.9 + 2.85 ms).
// batch_last (MKERNEL_RING_NODES_ORDER=last, a measurement pin): the old order.
__device__ __forceinline__ int nodes_item(const Geometry& geo, int u, bool batch_last) {
  if (batch_last) return geo.batch * geo.chunks - 1 - u;
  const int b = u / geo.chunks;
  return b * geo.chunks + geo.chunks - 1 - (u - b * geo.chunks);
}

// Work items t (static, strided over the CTAs; the same order on every CTA):
//   [0, sends)                stage item f = nodes_item(t) into the send area, push its piece
//                             when complete (sends = items when a rank of another node exists);
//   [sends, + mates * items)  item f to same-node rank nth_rank(u % mates) (peer memory);
//   [.., + remote * items)    item f of rank nth_rank(u % remote, remote) from the receive half.
// Item f = (b, chunk) = (f / chunks, f % chunks) sits at byte f * chunk_bytes of a shard (whole
// mode: seq = chunks * chunk_rows), so a piece (consecutive items) is one range of k and of v.
__global__ void __launch_bounds__(kSendThreads, 1)
    send_whole_nodes_kernel(comm::GroupDevice g, Geometry geo, const uint8_t* k, const uint8_t* v,
                            int mates, int remote, bool batch_last) {
  const uint64_t e = comm::op_begin(g);
  const int world = g.world, rank = g.rank;
  const uint64_t shard = geo.shard_bytes();
  const uint64_t v_off = static_cast<uint64_t>(world) * shard;  // v after k, virtual K/V
  const uint64_t net_half = (e & 1) * (g.net.recv_bytes / 2);
  const uint64_t block = (2 * shard + 255) / 256 * 256;          // nodes_net_block
  const uint64_t chunk_bytes = static_cast<uint64_t>(geo.chunk_rows) * geo.row_bytes;
  const int items = geo.batch * geo.chunks;
  const int ipp = nodes_items_per_piece(geo);
  const int sends = remote > 0 ? items : 0;
  const int local = mates * items;
  const int total = sends + local + remote * items;
  comm::NetCursor cursor;  // thread 0's
  uint64_t ticket = 0;     // thread 0: its last push (last_peer >= 0)
  int last_peer = -1;
#pragma unroll 1
  for (int t = blockIdx.x; t < total; t += gridDim.x) {
    int u = t;
    if (u < sends) {
      const int f = nodes_item(geo, u, batch_last);
      const uint64_t off = static_cast<uint64_t>(f) * chunk_bytes;
      copy16<kUnrollWhole>(g.net.send_area + off, k + off, chunk_bytes);
      copy16<kUnrollWhole>(g.net.send_area + shard + off, v + off, chunk_bytes);
      __syncthreads();  // every thread's stores of the item precede the count (and the push)
      if (threadIdx.x == 0) {
        const int piece = f / ipp;
        const int first = piece * ipp;
        const int parts = min(items, first + ipp) - first;
        __threadfence_system();  // the item's bytes are visible system-wide before it is counted
        uint32_t* count = g.net.stage_count + piece;
        if (atomicAdd(count, 1u) == static_cast<uint32_t>(parts - 1)) {
          __threadfence_system();  // every part's bytes before the push (read after the count)
          *reinterpret_cast<volatile uint32_t*>(count) = 0u;  // zero between calls
          const uint64_t pb = static_cast<uint64_t>(first) * chunk_bytes;
          const uint64_t bytes = static_cast<uint64_t>(parts) * chunk_bytes;
          const uint64_t at = net_half + static_cast<uint64_t>(rank) * block;
#pragma unroll 1
          for (int r = 0; r < world; ++r) {
            if (g.data[r] != nullptr) continue;
            comm::net_put(g, cursor, r, pb, at + pb, bytes, comm::kOpRingAttention);
            ticket = comm::net_put_signal(g, cursor, r, shard + pb, at + shard + pb, bytes,
                                          nodes_net_slot(rank, piece), e, comm::kOpRingAttention);
            last_peer = r;
          }
        }
      }
      continue;
    }
    u -= sends;
    const bool mate = u < local;
    if (!mate) u -= local;
    const int n = mate ? mates : remote;
    const int f = nodes_item(geo, u / n, batch_last);
    const int peer = nth_rank(g, u % n, !mate);
    const int b = f / geo.chunks, chunk = f % geo.chunks;
    const uint64_t off = static_cast<uint64_t>(f) * chunk_bytes;
    // Position of the shard of `src` in the virtual K/V of `dst`: (src - dst - 1) mod W.
    const int pos = mate ? (rank - peer - 1 + world) % world : (peer - rank - 1 + world) % world;
    const uint64_t at =
        ((static_cast<uint64_t>(b) * world + pos) * geo.seq +
         static_cast<uint64_t>(chunk) * geo.chunk_rows) * geo.row_bytes;
    if (mate) {
      copy16<kUnrollWhole>(g.data[peer] + at, k + off, chunk_bytes);
      copy16<kUnrollWhole>(g.data[peer] + v_off + at, v + off, chunk_bytes);
      __syncthreads();  // every thread's stores of the item precede the flag
      if (threadIdx.x == 0) comm::signal(g, peer, whole_slot(world, geo.chunks, b, pos, chunk), e);
      continue;
    }
    if (threadIdx.x == 0) {
      // A source with node-mates pushes only after its node's entry barrier: a wait for it is a
      // derived one, bounded longer, so that when a rank dies the waits that depend on it
      // directly name it first (the fused ag_gemm's rule).
      int with = 0;
#pragma unroll 1
      for (int r = 0; r < world; ++r) with += g.node_of[r] == g.node_of[peer] ? 1 : 0;
      const uint32_t slot = nodes_net_slot(peer, f / ipp);
      comm::net_wait_arrival(g, g.net.arrival + slot, e,
                             with > 1 ? 2 * g.timeout_ns + 1000000000ull : g.timeout_ns, peer,
                             comm::WaitSite{comm::kOpRingAttention, comm::kWaitNetArrival, peer,
                                            static_cast<int32_t>(slot)});
    }
    __syncthreads();  // the acquire precedes every thread's loads
    const uint8_t* src = g.net.recv_area + net_half + static_cast<uint64_t>(peer) * block + off;
    uint8_t* own = g.data[rank];
    copy16<kUnrollWhole, true>(own + at, src, chunk_bytes);
    copy16<kUnrollWhole, true>(own + v_off + at, src + shard, chunk_bytes);
    __syncthreads();  // every thread's stores of the item precede the flag
    if (threadIdx.x == 0) comm::signal(g, rank, whole_slot(world, geo.chunks, b, pos, chunk), e);
  }
  // The transport has read every piece this CTA pushed before the kernel ends (the next call
  // rewrites the send area).
  if (threadIdx.x == 0 && last_peer >= 0)
    comm::net_wait_sent(g, ticket, last_peer, comm::kOpRingAttention);
}

__global__ void wait_send_started_kernel(comm::GroupDevice g, int grid) {
  if (threadIdx.x != 0) return;
  const uint64_t e = comm::op_begin(g);
  for (int i = 0; i < grid; ++i) {
    comm::wait_geq(g, g.flags[g.rank] + send_started_slot(i), e,
                   comm::WaitSite{comm::kOpRingAttention, comm::kWaitPeerFlag, g.rank,
                                  static_cast<int32_t>(send_started_slot(i))});
  }
}

// The flags of position `pos`, batches [b0, b1), at rank `peer` (this one or the next), after
// the stream-ordered copy of those rows there: the engine's waits for them pass.
__global__ void mark_whole_kernel(comm::GroupDevice g, Geometry geo, int peer, int pos, int b0,
                                  int b1) {
  const uint64_t e = comm::op_begin(g);
  for (int i = threadIdx.x; i < (b1 - b0) * geo.chunks; i += blockDim.x) {
    const int b = b0 + i / geo.chunks, chunk = i % geo.chunks;
    comm::signal(g, peer, whole_slot(g.world, geo.chunks, b, pos, chunk), e);
  }
}

// dK/dV travelling: CTA t sums tile t (ring_travel_flag's order: (batch, kv head, 64 keys)) of
// the W writers' slots once their flags are up.
constexpr int kSumThreads = 256;
struct KeyGradSum {
  const float* area;  // this rank's receive area
  void* dk;
  void* dv;
  KeyGradShape shape;
};

__device__ __forceinline__ void store4(__nv_bfloat16* dst, float4 v) {
  __nv_bfloat162 lo = __floats2bfloat162_rn(v.x, v.y), hi = __floats2bfloat162_rn(v.z, v.w);
  uint2 raw;
  raw.x = *reinterpret_cast<uint32_t*>(&lo);
  raw.y = *reinterpret_cast<uint32_t*>(&hi);
  *reinterpret_cast<uint2*>(dst) = raw;
}
__device__ __forceinline__ void store4(__half* dst, float4 v) {
  __half2 lo = __floats2half2_rn(v.x, v.y), hi = __floats2half2_rn(v.z, v.w);
  uint2 raw;
  raw.x = *reinterpret_cast<uint32_t*>(&lo);
  raw.y = *reinterpret_cast<uint32_t*>(&hi);
  *reinterpret_cast<uint2*>(dst) = raw;
}

template <class Out>
__global__ void __launch_bounds__(kSumThreads)
    sum_key_grads_kernel(comm::GroupDevice g, KeyGradSum a) {
  const uint64_t e = comm::op_begin(g);
  const KeyGradShape& sh = a.shape;
  const int t = static_cast<int>(blockIdx.x);
  const attention::RingTravelTile tile = attention::ring_travel_tile(t, sh.heads_kv, sh.seq);
  if (static_cast<int>(threadIdx.x) < g.world) {  // one waiter per writer
    const int w = static_cast<int>(threadIdx.x);
    const uint64_t slot = key_grads_slot(sh, w) + t;
    comm::wait_geq(
        g, g.flags[g.rank] + slot, e,
        comm::WaitSite{comm::kOpRingAttention, comm::kWaitPeerFlag, w, static_cast<int32_t>(slot)});
  }
  __syncthreads();  // the waiters' acquires order the CTA's reads below
  const int row0 = tile.key0;
  const int rows = min(attention::kRingTravelRows, sh.seq - row0);
  const int vecs = sh.head_dim / 4;  // float4 per row
  const long long row_stride = static_cast<long long>(sh.heads_kv) * sh.head_dim;
  const long long base = (static_cast<long long>(tile.bi) * sh.seq + row0) * row_stride +
                         static_cast<long long>(tile.hkv) * sh.head_dim;
  const long long slot_floats = sh.slot_floats();
  const int per = rows * vecs;
  for (int i = static_cast<int>(threadIdx.x); i < 2 * per; i += kSumThreads) {
    const int which = i / per;  // 0: dk, 1: dv
    const int j = i - which * per;
    const long long off = base + (j / vecs) * row_stride + (j % vecs) * 4;
    const float* src = a.area + which * g.world * slot_floats + off;
    float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);
#pragma unroll 2
    for (int w = 0; w < g.world; ++w) {
      const float4 x = __ldcg(reinterpret_cast<const float4*>(src + w * slot_floats));
      acc.x += x.x;
      acc.y += x.y;
      acc.z += x.z;
      acc.w += x.w;
    }
    store4(static_cast<Out*>(which == 0 ? a.dk : a.dv) + off, acc);
  }
}

}  // namespace

cudaError_t sum_key_grads(const comm::GroupDevice& g, const KeyGradShape& shape, uint64_t offset,
                          bool bf16, void* dk, void* dv, cudaStream_t stream) {
  if (shape.batch < 1 || shape.seq < 1 || shape.heads_kv < 1 || shape.head_dim % 4 != 0 ||
      !key_grads_fit(shape, g.world) || g.data[g.rank] == nullptr || offset % 16 != 0 ||
      reinterpret_cast<uintptr_t>(dk) % 8 != 0 || reinterpret_cast<uintptr_t>(dv) % 8 != 0)
    return cudaErrorInvalidValue;
  const KeyGradSum a{reinterpret_cast<const float*>(g.data[g.rank] + offset), dk, dv, shape};
  const auto grid =
      static_cast<unsigned>(attention::ring_travel_flags(shape.batch, shape.heads_kv, shape.seq));
  if (bf16) {
    sum_key_grads_kernel<__nv_bfloat16><<<grid, kSumThreads, 0, stream>>>(g, a);
  } else {
    sum_key_grads_kernel<__half><<<grid, kSumThreads, 0, stream>>>(g, a);
  }
  return cudaGetLastError();
}

cudaError_t mark_whole(const comm::GroupDevice& g, const Geometry& geo, int peer, int pos, int b0,
                       int b1, cudaStream_t stream) {
  if (peer < 0 || peer >= g.world || pos < 0 || pos >= g.world || b0 < 0 || b1 > geo.batch ||
      b0 >= b1 || g.flags[peer] == nullptr)
    return cudaErrorInvalidValue;
  mark_whole_kernel<<<1, 256, 0, stream>>>(g, geo, peer, pos, b0, b1);
  return cudaGetLastError();
}

int send_whole_grid(const comm::GroupDevice& g, const Geometry& geo, int ctas) {
  const int items = (g.world - 1) * geo.batch * geo.chunks;
  const int grid = ctas < 1 ? 1 : (ctas < items ? ctas : items);
  return grid < kMaxSendCtas ? grid : kMaxSendCtas;
}

cudaError_t wait_send_started(const comm::GroupDevice& g, int grid, cudaStream_t stream) {
  if (grid < 1 || grid > kMaxSendCtas) return cudaErrorInvalidValue;
  wait_send_started_kernel<<<1, 32, 0, stream>>>(g, grid);
  return cudaGetLastError();
}

cudaError_t send_whole(const comm::GroupDevice& g, const Geometry& geo, const void* k,
                       const void* v, bool causal, int ctas, cudaStream_t stream) {
  const int items = (g.world - 1) * geo.batch * geo.chunks;
  if (g.world < 2 || items < 1 || geo.seq % geo.chunk_rows != 0 ||
      static_cast<int64_t>(geo.batch) * g.world * geo.chunks > kMaxWholeFlags ||
      geo.row_bytes % 16 != 0 || g.data[(g.rank + 1) % g.world] == nullptr)
    return cudaErrorInvalidValue;
  const int grid = send_whole_grid(g, geo, ctas);
  send_whole_kernel<<<grid, kSendThreads, 0, stream>>>(g, geo, static_cast<const uint8_t*>(k),
                                                       static_cast<const uint8_t*>(v), causal);
  return cudaGetLastError();
}

cudaError_t send_whole_nodes(const comm::GroupDevice& g, const Geometry& geo, const void* k,
                             const void* v, int ctas, cudaStream_t stream) {
  int mates = 0, remote = 0;
  for (int r = 0; r < g.world && r < comm::kMaxRanks; ++r) {
    if (r == g.rank) continue;
    (g.data[r] == nullptr ? remote : mates) += 1;
  }
  const int items = geo.batch * geo.chunks;
  if (g.world < 2 || remote < 1 || items < 1 || geo.chunk_rows < 1 ||
      geo.seq % geo.chunk_rows != 0 ||
      static_cast<int64_t>(geo.batch) * g.world * geo.chunks > kMaxWholeFlags ||
      geo.row_bytes % 16 != 0 || g.net.fifo == nullptr || g.net.stage_count == nullptr ||
      g.net.arrival_slots < kNetSlotBase + comm::kMaxRanks * kNetPieces ||
      g.net.send_bytes < nodes_send_bytes(geo) || g.net.recv_bytes < nodes_recv_bytes(geo, g.world))
    return cudaErrorInvalidValue;
  const char* order = env::get("MKERNEL_RING_NODES_ORDER");
  const bool batch_last = order != nullptr && std::strcmp(order, "last") == 0;
  const int work = (1 + mates + remote) * items;
  int grid = ctas < 1 ? 1 : (ctas < work ? ctas : work);
  if (grid > kMaxSendCtas) grid = kMaxSendCtas;
  send_whole_nodes_kernel<<<grid, kSendThreads, 0, stream>>>(g, geo, static_cast<const uint8_t*>(k),
                                                             static_cast<const uint8_t*>(v), mates,
                                                             remote, batch_last);
  return cudaGetLastError();
}

cudaError_t begin(const comm::GroupDevice& g, uint64_t signature, cudaStream_t stream) {
  begin_kernel<<<1, 32, 0, stream>>>(g, signature);
  return cudaGetLastError();
}

cudaError_t send(const comm::GroupDevice& g, const Geometry& geo, const void* k, const void* v,
                 int step, int ctas, cudaStream_t stream) {
  const int items = geo.batch * geo.chunks;
  if (items < 1 || items > static_cast<int>(kMaxItems) || geo.row_bytes % 16 != 0 ||
      step < 0 || step + 1 >= g.world || g.data[(g.rank + 1) % g.world] == nullptr)
    return cudaErrorInvalidValue;
  const int grid = ctas < 1 ? 1 : (ctas < items ? ctas : items);
  send_kernel<<<grid, kSendThreads, 0, stream>>>(g, geo, static_cast<const uint8_t*>(k),
                                                 static_cast<const uint8_t*>(v), step);
  return cudaGetLastError();
}

cudaError_t release(const comm::GroupDevice& g, int step, cudaStream_t stream) {
  release_kernel<<<1, 32, 0, stream>>>(g, step);
  return cudaGetLastError();
}

cudaError_t end(const comm::GroupDevice& g, cudaStream_t stream) {
  end_kernel<<<1, 32, 0, stream>>>(g);
  return cudaGetLastError();
}

}  // namespace mkernel::ring_attention
