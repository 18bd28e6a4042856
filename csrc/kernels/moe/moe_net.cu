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
