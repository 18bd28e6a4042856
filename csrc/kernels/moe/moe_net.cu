// The control half of the MoE's inter-node exchange (protocol: moe_net_api.h): one-warp kernels
// whose lane 0 pushes FIFO commands or waits on the data path's arrival flags; the bytes move
// by the copy engines between these launches, on the same streams.
#include "../comm/fp32_accum.cuh"
#include "../comm/net_ops.cuh"
#include "moe_net_api.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cstdint>

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

// Stores e into *release (moe18): the launch starts after the stream's earlier work completed.
__device__ __forceinline__ void release_word(unsigned long long* release, uint64_t e) {
  if (release == nullptr) return;
  __threadfence();
  *reinterpret_cast<volatile unsigned long long*>(release) = e;
}

__global__ void __launch_bounds__(32, 1) wait_kernel(const __grid_constant__ GroupDevice g,
                                                     const uint64_t* state, int peer,
                                                     uint32_t slot_base, int32_t op,
                                                     unsigned long long* release) {
  if (threadIdx.x != 0) return;
  const uint64_t e = *reinterpret_cast<const volatile uint64_t*>(state);
  release_word(release, e);
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
                                                     int32_t op, unsigned long long* release) {
  if (threadIdx.x != 0) return;
  const uint64_t e = *reinterpret_cast<const volatile uint64_t*>(state);
  release_word(release, e);
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

// One warp per dst row (grid-stride): lane 0's token decides, the warp copies the row with V-byte
// accesses, 4 in flight per lane.
template <class V>
__global__ void __launch_bounds__(256) gather_rows_kernel(const uint8_t* __restrict__ src,
                                                          int64_t row0, int64_t rows,
                                                          const int64_t* __restrict__ token,
                                                          int64_t n, uint8_t* __restrict__ dst,
                                                          int64_t row_bytes) {
  const int lane = threadIdx.x & 31;
  const int64_t warps = static_cast<int64_t>(gridDim.x) * (blockDim.x >> 5);
  const int64_t vecs = row_bytes / static_cast<int64_t>(sizeof(V));
  for (int64_t q = static_cast<int64_t>(blockIdx.x) * (blockDim.x >> 5) + (threadIdx.x >> 5); q < n;
       q += warps) {
    const int64_t t = token[q] - row0;  // the same value in every lane (one load, broadcast)
    if (t < 0 || t >= rows) continue;
    const V* in = reinterpret_cast<const V*>(src + t * row_bytes);
    V* out = reinterpret_cast<V*>(dst + q * row_bytes);
    int64_t i = lane;
    for (; i + 96 < vecs; i += 128) {
      const V a = in[i], b = in[i + 32], c = in[i + 64], d = in[i + 96];
      out[i] = a;
      out[i + 32] = b;
      out[i + 64] = c;
      out[i + 96] = d;
    }
    for (; i < vecs; i += 32) out[i] = in[i];
  }
}

// moe16 (MKERNEL_MOE_DISPATCH_PIPELINE=4): the headed gather's pieces in one launch per side
// instead of a copy-engine copy and a one-warp launch per piece and source (~60 stream
// operations; session 18 measured the eager dispatch 0.2-0.3 ms over its graph replay).

constexpr int kCopyThreads = 512;

// Part `part` of `parts` of [0, bytes) (256-byte cuts) from src to dst: 16-byte vectors where
// both ends allow, 4 in flight per thread. Loads go to L2 (ld.global.cg): the source was written
// by another agent (the transport's copy, another CTA) after a flag this CTA acquired.
__device__ __forceinline__ void copy_part(const uint8_t* __restrict__ src, uint8_t* __restrict__ dst,
                                          uint64_t bytes, uint32_t part, uint32_t parts) {
  const uint64_t per = ((bytes + parts - 1) / parts + 255) / 256 * 256;
  const uint64_t lo = min(bytes, static_cast<uint64_t>(part) * per);
  const uint64_t hi = min(bytes, lo + per);
  uint64_t i = lo;
  if (((reinterpret_cast<uintptr_t>(src) | reinterpret_cast<uintptr_t>(dst)) & 15) == 0) {
    const uint64_t nv = (hi - lo) / 16;
    const uint4* in = reinterpret_cast<const uint4*>(src + lo);
    uint4* out = reinterpret_cast<uint4*>(dst + lo);
    const uint64_t step = blockDim.x;
    uint64_t v = threadIdx.x;
    for (; v + 3 * step < nv; v += 4 * step) {
      const uint4 a = __ldcg(in + v), b = __ldcg(in + v + step), c = __ldcg(in + v + 2 * step),
                  d = __ldcg(in + v + 3 * step);
      out[v] = a;
      out[v + step] = b;
      out[v + 2 * step] = c;
      out[v + 3 * step] = d;
    }
    for (; v < nv; v += step) out[v] = __ldcg(in + v);
    i = lo + nv * 16;
  }
  for (uint64_t b = i + threadIdx.x; b < hi; b += blockDim.x) dst[b] = __ldcg(src + b);
}

__device__ __forceinline__ void piece_range(uint64_t block, uint64_t piece, uint32_t c, uint64_t& off,
                                            uint64_t& n) {
  off = min(block, static_cast<uint64_t>(c) * piece);
  n = min(block, static_cast<uint64_t>(c + 1) * piece) - off;
}

// state[1] = the larger ticket (kNoTicket: none yet), for finish_kernel's net_wait_sent.
__device__ __forceinline__ void record_ticket(uint64_t* state, uint64_t ticket) {
  auto* word = reinterpret_cast<unsigned long long*>(state + 1);
  unsigned long long seen = *reinterpret_cast<volatile unsigned long long*>(word);
  while (seen == kNoTicket || seen < ticket) {
    const unsigned long long was = atomicCAS(word, seen, ticket);
    if (was == seen) break;
    seen = was;
  }
}

// Send side: CTA (c, part) stages its part of piece c of src into the send area; the CTA that
// completes the piece (counts[c], zero at launch) pushes it to every rank of another node with
// data slot 1 + c = e. Runs after the head's push on the send stream (which waited for READY).
__global__ void __launch_bounds__(kCopyThreads) stage_push_kernel(
    const __grid_constant__ GroupDevice g, uint64_t* state, const uint8_t* __restrict__ src,
    uint64_t block, uint64_t piece, uint32_t pieces, uint32_t parts, uint64_t remote_base,
    unsigned long long* counts, int32_t op) {
  const uint32_t c = blockIdx.x / parts, part = blockIdx.x % parts;
  if (c >= pieces) return;
  uint64_t off, n;
  piece_range(block, piece, c, off, n);
  copy_part(src + off, g.net.send_area + off, n, part, parts);
  __syncthreads();
  if (threadIdx.x != 0) return;
  __threadfence();  // this CTA's stores before its count; the pusher's fence is cumulative
  if (atomicAdd(counts + c, 1ull) != parts - 1) return;
  __threadfence();
  const uint64_t e = *reinterpret_cast<const volatile uint64_t*>(state);
  comm::NetCursor cur;
  uint64_t ticket = kNoTicket;
  for (int p = 0; p < g.world; ++p) {
    if (other_node(g, p)) {
      ticket = comm::net_put_signal(g, cur, p, off, remote_base + off, n, data_slot(g.rank, 1 + c), e, op);
    }
  }
  if (ticket != kNoTicket) record_ticket(state, ticket);
}

// Receive side. One CTA of the launch (the first to start) is the watcher: it waits for every
// piece of every other rank on the host-mapped arrival flags, in piece-major order, and relays
// each to a device word arrived[j * pieces + c] = e. Every other CTA is a copier (c, j, part),
// numbered in start order: it waits on its piece's device word (an L2 poll), copies its part of
// piece c of rank p = (me + 1 + j) % W from the receive area into out (rank p's block at
// p * block); the copier completing the piece releases landed[p * pieces + c] = e; the last copier
// pushes DONE to every rank of another node (every read of the receive area is done).
// Why a watcher (session 19): with every copier polling the host flags itself (2 x 64 CTAs
// issuing system-scope loads over PCIe at once) the dispatch ran 3.85 ms against mode 3's 1.87,
// where one warp polls at a time.
// words: [0, W*P) landed, [W*P, 2*W*P) per-piece counts, [2*W*P] the copiers' count, then the
// send side's P counts, then [2*W*P + 1 + P] the start ticket and (W-1)*P arrived words; all zero
// at launch.
__global__ void __launch_bounds__(kCopyThreads) unstage_kernel(
    const __grid_constant__ GroupDevice g, const uint64_t* state, uint8_t* __restrict__ out,
    uint64_t block, uint64_t recv_stride, uint64_t piece, uint32_t pieces, uint32_t parts,
    unsigned long long* words, int32_t op) {
  const int W = g.world, others = W - 1;
  const uint64_t wp = static_cast<uint64_t>(W) * pieces;
  unsigned long long* const start = words + 2 * wp + 1 + pieces;
  unsigned long long* const arrived = start + 1;
  const uint64_t e = *reinterpret_cast<const volatile uint64_t*>(state);
  __shared__ uint32_t ticket;
  if (threadIdx.x == 0) ticket = static_cast<uint32_t>(atomicAdd(start, 1ull));
  __syncthreads();
  if (ticket == 0) {  // the watcher: one thread, host flags in the order the pieces were pushed
    if (threadIdx.x != 0) return;
    for (uint32_t c = 0; c < pieces; ++c) {
      for (int j = 0; j < others; ++j) {
        const int p = (g.rank + 1 + j) % W;
        comm::net_wait(g, p, data_slot(p, 1 + c), e, comm::WaitSite{op});
        comm::st_release_sys(reinterpret_cast<uint64_t*>(arrived + static_cast<uint64_t>(j) * pieces + c), e);
      }
    }
    return;
  }
  const uint32_t k = ticket - 1;
  const uint32_t part = k % parts;
  const uint32_t j = (k / parts) % others;  // piece-major: every rank's piece 0 first
  const uint32_t c = k / (parts * others);
  const int p = (g.rank + 1 + static_cast<int>(j)) % W;
  uint64_t off, n;
  piece_range(block, piece, c, off, n);
  if (threadIdx.x == 0) {
    comm::wait_geq(g, reinterpret_cast<const uint64_t*>(arrived + static_cast<uint64_t>(j) * pieces + c), e,
                   comm::WaitSite{op, comm::kWaitNetArrival, p, static_cast<int32_t>(data_slot(p, 1 + c))});
  }
  __syncthreads();
  copy_part(g.net.recv_area + static_cast<uint64_t>(p) * recv_stride + off,
            out + static_cast<uint64_t>(p) * block + off, n, part, parts);
  __syncthreads();
  if (threadIdx.x != 0) return;
  __threadfence();
  if (atomicAdd(words + wp + static_cast<uint64_t>(p) * pieces + c, 1ull) == parts - 1) {
    __threadfence();
    *reinterpret_cast<volatile unsigned long long*>(words + static_cast<uint64_t>(p) * pieces + c) = e;
  }
  if (atomicAdd(words + 2 * wp, 1ull) == gridDim.x - 2) {  // the last copier (the watcher is not counted)
    __threadfence();
    comm::NetCursor cur;
    for (int q = 0; q < W; ++q) {
      if (other_node(g, q)) comm::net_put_signal(g, cur, q, 0, 0, 0, kDone + g.rank, e, op);
    }
  }
}

// The caller's side: per piece c (in order), once landed[p * pieces + c] = e for every other rank
// p, every dst row q whose token lies in rank p's rows that piece c completed (rows straddling a
// cut go with the later piece) is copied from all (rank p's block at p * rows_per_rank rows); rows
// of this rank (token / rows_per_rank == me) and rows past the counts (token < 0) are not
// touched. One warp per row, as gather_rows_kernel.
template <class V>
__global__ void __launch_bounds__(256) gather_landed_kernel(
    const __grid_constant__ GroupDevice g, const uint64_t* state, const unsigned long long* words,
    const uint8_t* __restrict__ all, int64_t rows_per_rank, uint64_t block, uint64_t piece,
    uint32_t pieces, const int64_t* __restrict__ token, int64_t n, uint8_t* __restrict__ dst,
    int64_t row_bytes, int32_t op) {
  const int W = g.world, me = g.rank;
  const uint64_t e = *reinterpret_cast<const volatile uint64_t*>(state);
  const int lane = threadIdx.x & 31;
  const int64_t warps = static_cast<int64_t>(gridDim.x) * (blockDim.x >> 5);
  const int64_t warp0 = static_cast<int64_t>(blockIdx.x) * (blockDim.x >> 5) + (threadIdx.x >> 5);
  const int64_t vecs = row_bytes / static_cast<int64_t>(sizeof(V));
  int64_t lo = 0;
  for (uint32_t c = 0; c < pieces; ++c) {
    const uint64_t end = c + 1 >= pieces ? block : min(block, static_cast<uint64_t>(c + 1) * piece);
    const int64_t hi = static_cast<int64_t>(end / static_cast<uint64_t>(row_bytes));
    if (threadIdx.x == 0) {
      for (int k = 1; k < W; ++k) {
        const int p = (me + k) % W;
        comm::wait_geq(g, reinterpret_cast<const uint64_t*>(words + static_cast<uint64_t>(p) * pieces + c), e,
                       comm::WaitSite{op, comm::kWaitPeerFlag, p, static_cast<int32_t>(c)});
      }
    }
    __syncthreads();
    if (hi > lo) {
      for (int64_t q = warp0; q < n; q += warps) {
        const int64_t t = token[q];  // the same value in every lane (one load, broadcast)
        if (t < 0) continue;
        const int64_t p = t / rows_per_rank, r = t - p * rows_per_rank;
        if (p == me || r < lo || r >= hi) continue;
        const V* in = reinterpret_cast<const V*>(all + t * row_bytes);
        V* o = reinterpret_cast<V*>(dst + q * row_bytes);
        int64_t i = lane;
        for (; i + 96 < vecs; i += 128) {
          const V a = __ldcg(in + i), b = __ldcg(in + i + 32), cc = __ldcg(in + i + 64),
                  d = __ldcg(in + i + 96);
          o[i] = a;
          o[i + 32] = b;
          o[i + 64] = cc;
          o[i + 96] = d;
        }
        for (; i < vecs; i += 32) o[i] = __ldcg(in + i);
      }
    }
    lo = hi;
  }
}

// moe17: out[e] = sum over ranks s = 0..W-1 in order of block s's element e, in fp32 (block me
// from own, the others from the receive area at s * stride), rounded once to TOut: the bits of
// the ATen sequence it replaces (sum = block(0).float(); sum += block(s)...; sum.to(TOut)).
// V elements per access (16 bytes of TIn; 1 where the host found rows unaligned); the conversions
// are comm::Elem's (one rounding rule for every reduction).
template <class TIn, class TOut, int V>
__global__ void __launch_bounds__(256) sum_blocks_kernel(const uint8_t* __restrict__ recv, uint64_t stride,
                                                         const TIn* __restrict__ own, int me, int W,
                                                         int64_t e0, int64_t n, TOut* __restrict__ out) {
  struct alignas(sizeof(TIn) * V) InVec {
    TIn v[V];
  };
  struct alignas(sizeof(TOut) * V) OutVec {
    TOut v[V];
  };
  const int64_t nv = n / V;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < nv;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t e = e0 + i * V;
    float acc[V];
    for (int s = 0; s < W; ++s) {
      const TIn* src = s == me ? own : reinterpret_cast<const TIn*>(recv + static_cast<uint64_t>(s) * stride);
      const InVec x = *reinterpret_cast<const InVec*>(src + e);
#pragma unroll
      for (int j = 0; j < V; ++j) acc[j] = s == 0 ? comm::Elem<TIn>::load(x.v[j]) : acc[j] + comm::Elem<TIn>::load(x.v[j]);
    }
    OutVec o;
#pragma unroll
    for (int j = 0; j < V; ++j) o.v[j] = comm::Elem<TOut>::store(acc[j]);
    *reinterpret_cast<OutVec*>(out + e) = o;
  }
}

// Loads both variants of an instantiation (CUDA's lazy loading would otherwise load it at its
// first launch, which may synchronize the context: moe_net_api.h preload_sum_blocks).
template <class TIn, class TOut>
cudaError_t preload_as() {
  cudaFuncAttributes a{};
  cudaError_t e = cudaFuncGetAttributes(&a, sum_blocks_kernel<TIn, TOut, 16 / sizeof(TIn)>);
  if (e == cudaSuccess) e = cudaFuncGetAttributes(&a, sum_blocks_kernel<TIn, TOut, 1>);
  return e;
}

template <class TIn, class TOut>
cudaError_t sum_blocks_as(const uint8_t* recv, uint64_t stride, const void* own, int me, int W, int64_t e0,
                          int64_t n, void* out, bool vec, int sm_count, cudaStream_t s) {
  constexpr int V = 16 / sizeof(TIn);
  const int64_t threads = vec ? n / V : n;
  const int grid = static_cast<int>(std::max<int64_t>(
      1, std::min<int64_t>((threads + 255) / 256, static_cast<int64_t>(std::max(sm_count, 1)) * 4)));
  if (vec) {
    sum_blocks_kernel<TIn, TOut, V><<<grid, 256, 0, s>>>(recv, stride, static_cast<const TIn*>(own), me, W, e0,
                                                         n, static_cast<TOut*>(out));
  } else {
    sum_blocks_kernel<TIn, TOut, 1><<<grid, 256, 0, s>>>(recv, stride, static_cast<const TIn*>(own), me, W, e0,
                                                         n, static_cast<TOut*>(out));
  }
  return cudaGetLastError();
}

// Parts per piece: enough CTAs to keep ~64 KiB per SM in flight, all resident at once beside
// the gather (spinning CTAs must never wait for a slot the others hold).
uint32_t copy_parts(int sm_count, uint64_t pieces_total) {
  const uint64_t budget = static_cast<uint64_t>(std::max(sm_count, 1)) * 2;
  return static_cast<uint32_t>(std::max<uint64_t>(1, std::min<uint64_t>(4, budget / std::max<uint64_t>(pieces_total, 1))));
}

}  // namespace

cudaError_t launch_gather_rows(const void* src, int64_t row0, int64_t rows, const int64_t* token,
                               int64_t n, void* dst, int64_t row_bytes, int sm_count,
                               cudaStream_t s) {
  if (n <= 0 || rows <= 0 || row_bytes <= 0) return cudaSuccess;
  constexpr int kWarps = 8;
  const int64_t want = (n + kWarps - 1) / kWarps;
  const int grid = static_cast<int>(std::min<int64_t>(want, static_cast<int64_t>(std::max(sm_count, 1)) * 8));
  const auto* in = static_cast<const uint8_t*>(src);
  auto* out = static_cast<uint8_t*>(dst);
  const uint64_t bits = reinterpret_cast<uintptr_t>(src) | reinterpret_cast<uintptr_t>(dst) |
                        static_cast<uint64_t>(row_bytes);
  if (bits % 16 == 0) {
    gather_rows_kernel<uint4><<<grid, kWarps * 32, 0, s>>>(in, row0, rows, token, n, out, row_bytes);
  } else if (bits % 4 == 0) {
    gather_rows_kernel<uint32_t><<<grid, kWarps * 32, 0, s>>>(in, row0, rows, token, n, out, row_bytes);
  } else {
    gather_rows_kernel<uint8_t><<<grid, kWarps * 32, 0, s>>>(in, row0, rows, token, n, out, row_bytes);
  }
  return cudaGetLastError();
}

cudaError_t launch_begin(const GroupDevice& g, uint64_t* state, int32_t op, cudaStream_t s) {
  begin_kernel<<<1, 32, 0, s>>>(g, state, op);
  return cudaGetLastError();
}

cudaError_t launch_wait(const GroupDevice& g, const uint64_t* state, int peer, uint32_t slot_base,
                        int32_t op, cudaStream_t s, unsigned long long* release) {
  wait_kernel<<<1, 32, 0, s>>>(g, state, peer, slot_base, op, release);
  return cudaGetLastError();
}

cudaError_t launch_push(const GroupDevice& g, uint64_t* state, uint64_t local_off,
                        uint64_t local_stride, uint64_t remote_off, uint64_t bytes, uint32_t slot,
                        bool record, int32_t op, cudaStream_t s, unsigned long long* release) {
  push_kernel<<<1, 32, 0, s>>>(g, state, local_off, local_stride, remote_off, bytes, slot,
                               record ? 1 : 0, op, release);
  return cudaGetLastError();
}

cudaError_t launch_finish(const GroupDevice& g, const uint64_t* state, int32_t op, cudaStream_t s) {
  finish_kernel<<<1, 32, 0, s>>>(g, state, op);
  return cudaGetLastError();
}

cudaError_t launch_stage_push(const GroupDevice& g, uint64_t* state, const void* src, uint64_t block,
                              uint64_t piece, uint32_t pieces, uint64_t remote_base,
                              unsigned long long* counts, int sm_count, int32_t op, cudaStream_t s) {
  if (block == 0 || pieces == 0) return cudaSuccess;
  const uint32_t parts = copy_parts(sm_count, pieces);
  stage_push_kernel<<<pieces * parts, kCopyThreads, 0, s>>>(
      g, state, static_cast<const uint8_t*>(src), block, piece, pieces, parts, remote_base, counts, op);
  return cudaGetLastError();
}

cudaError_t launch_unstage(const GroupDevice& g, const uint64_t* state, void* out, uint64_t block,
                           uint64_t recv_stride, uint64_t piece, uint32_t pieces,
                           unsigned long long* words, int sm_count, int32_t op, cudaStream_t s) {
  if (block == 0 || pieces == 0 || g.world < 2) return cudaSuccess;
  const uint64_t total = static_cast<uint64_t>(pieces) * static_cast<uint64_t>(g.world - 1);
  const uint32_t parts = copy_parts(sm_count, total);
  unstage_kernel<<<static_cast<unsigned>(total * parts + 1), kCopyThreads, 0, s>>>(  // + the watcher
      g, state, static_cast<uint8_t*>(out), block, recv_stride, piece, pieces, parts, words, op);
  return cudaGetLastError();
}

cudaError_t launch_gather_landed(const GroupDevice& g, const uint64_t* state,
                                 const unsigned long long* words, const void* all,
                                 int64_t rows_per_rank, uint64_t block, uint64_t piece,
                                 uint32_t pieces, const int64_t* token, int64_t n, void* dst,
                                 int64_t row_bytes, int sm_count, int32_t op, cudaStream_t s) {
  if (n <= 0 || rows_per_rank <= 0 || row_bytes <= 0 || pieces == 0) return cudaSuccess;
  constexpr int kWarps = 8;
  const int grid = std::max(sm_count, 1);  // one CTA per SM: beside the unstage launch's CTAs
  const auto* in = static_cast<const uint8_t*>(all);
  auto* out = static_cast<uint8_t*>(dst);
  const uint64_t bits = reinterpret_cast<uintptr_t>(all) | reinterpret_cast<uintptr_t>(dst) |
                        static_cast<uint64_t>(row_bytes);
  if (bits % 16 == 0) {
    gather_landed_kernel<uint4><<<grid, kWarps * 32, 0, s>>>(g, state, words, in, rows_per_rank, block, piece,
                                                             pieces, token, n, out, row_bytes, op);
  } else if (bits % 4 == 0) {
    gather_landed_kernel<uint32_t><<<grid, kWarps * 32, 0, s>>>(g, state, words, in, rows_per_rank, block,
                                                                piece, pieces, token, n, out, row_bytes, op);
  } else {
    gather_landed_kernel<uint8_t><<<grid, kWarps * 32, 0, s>>>(g, state, words, in, rows_per_rank, block,
                                                               piece, pieces, token, n, out, row_bytes, op);
  }
  return cudaGetLastError();
}

cudaError_t preload_sum_blocks(SumType in, SumType out_type) {
  if (in == SumType::kF32 && out_type == SumType::kF32) return preload_as<float, float>();
  if (in == SumType::kF32 && out_type == SumType::kBF16) return preload_as<float, __nv_bfloat16>();
  if (in == SumType::kF32 && out_type == SumType::kF16) return preload_as<float, __half>();
  if (in == SumType::kBF16 && out_type == SumType::kBF16) return preload_as<__nv_bfloat16, __nv_bfloat16>();
  if (in == SumType::kF16 && out_type == SumType::kF16) return preload_as<__half, __half>();
  return cudaErrorInvalidValue;
}

cudaError_t launch_sum_blocks(const void* recv, uint64_t stride, const void* own, int me, int world,
                              int64_t e0, int64_t n, SumType in, void* out, SumType out_type,
                              int sm_count, cudaStream_t s) {
  if (n <= 0) return cudaSuccess;
  const auto* r = static_cast<const uint8_t*>(recv);
  const uint64_t in_bytes = in == SumType::kF32 ? 4 : 2;
  const uint64_t v = 16 / in_bytes;  // elements per vector access
  const uint64_t bits = reinterpret_cast<uintptr_t>(recv) | reinterpret_cast<uintptr_t>(own) |
                        reinterpret_cast<uintptr_t>(out) | stride;
  const bool vec = bits % 16 == 0 && static_cast<uint64_t>(e0) % v == 0 && static_cast<uint64_t>(n) % v == 0;
  if (in == SumType::kF32 && out_type == SumType::kF32)
    return sum_blocks_as<float, float>(r, stride, own, me, world, e0, n, out, vec, sm_count, s);
  if (in == SumType::kF32 && out_type == SumType::kBF16)
    return sum_blocks_as<float, __nv_bfloat16>(r, stride, own, me, world, e0, n, out, vec, sm_count, s);
  if (in == SumType::kF32 && out_type == SumType::kF16)
    return sum_blocks_as<float, __half>(r, stride, own, me, world, e0, n, out, vec, sm_count, s);
  if (in == SumType::kBF16 && out_type == SumType::kBF16)
    return sum_blocks_as<__nv_bfloat16, __nv_bfloat16>(r, stride, own, me, world, e0, n, out, vec, sm_count, s);
  if (in == SumType::kF16 && out_type == SumType::kF16)
    return sum_blocks_as<__half, __half>(r, stride, own, me, world, e0, n, out, vec, sm_count, s);
  return cudaErrorInvalidValue;  // narrow partials travel in out's own dtype
}

}  // namespace mkernel::moe_net
