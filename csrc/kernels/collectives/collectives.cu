// The collectives' kernels (protocol: collectives_api.h). One kernel per call; its CTAs share a
// list of work items in three roles, taken in order by every CTA (item i -> CTA i % grid):
//   stage  : copy a chunk of x into this rank's data region, release its flag at the reader(s);
//   reduce : (reduce_scatter, all_reduce) wait for a chunk of this rank's block from every peer,
//            sum the W contributions in rank order in fp32, write it out (all_reduce: also into
//            the own data region, then release it to every peer);
//   gather : (all_gather, all_reduce) wait for a peer's chunk, copy it into the output.
// Stage items never wait, and come first in every CTA's sequence; with every CTA co-resident
// (the grid never exceeds what the device holds at once) every wait is for an item some
// running CTA reaches without waiting on us: no deadlock, whatever the timing.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <map>
#include <mutex>
#include <utility>

#include "../comm/group_sync.cuh"
#include "collectives_api.h"

namespace mkernel::collectives {
namespace {

using comm::FlagSlot;
using comm::GroupDevice;

constexpr int kThreads = 512;
constexpr uint32_t kMaxChunks = 512;  // chunks per (source rank, phase)
constexpr uint64_t kMinChunkBytes = 16 << 10;
constexpr int kUnroll = 4;  // 16-byte accesses in flight per thread

// Flag slots of the collectives (in the op range): the stage flag of (source rank, chunk) and
// the reduced flag of all_reduce's second phase, both written by the source at the reader;
// the local "entered" flag CTA 0 releases after the entry barrier.
__host__ __device__ constexpr uint32_t stage_slot(int src, uint32_t chunk) {
  return FlagSlot::kOpSlotBase + static_cast<uint32_t>(src) * kMaxChunks + chunk;
}
__host__ __device__ constexpr uint32_t reduced_slot(int src, uint32_t chunk) {
  return FlagSlot::kOpSlotBase + comm::kMaxRanks * kMaxChunks + static_cast<uint32_t>(src) * kMaxChunks +
         chunk;
}
constexpr uint32_t kEnteredSlot = FlagSlot::kCollective;
static_assert(reduced_slot(comm::kMaxRanks - 1, kMaxChunks - 1) < comm::kFlagWords,
              "the collectives' flags fit the op slot range");

enum class Kind : int { kAllGather, kReduceScatter, kAllReduce };

// The call's geometry, in elements. all_gather: one block per rank = x (count). reduce_scatter
// and all_reduce: x splits into W blocks [d*block, min(count, (d+1)*block)), rank d owns block
// d; each block in `chunks` chunks of `chunk` elements (16-byte multiples).
struct Params {
  GroupDevice g;
  const uint8_t* x;
  uint8_t* out;
  uint64_t count;
  uint64_t block;
  uint64_t chunk;
  uint32_t chunks;
  uint64_t signature;
  int32_t op;  // comm::WaitOp
};

// --- element types --------------------------------------------------------------------------
template <class T> struct Elem;
template <> struct Elem<float> {
  __device__ static float load(float v) { return v; }
  __device__ static float store(float v) { return v; }
};
template <> struct Elem<__nv_bfloat16> {
  __device__ static float load(__nv_bfloat16 v) { return __bfloat162float(v); }
  __device__ static __nv_bfloat16 store(float v) { return __float2bfloat16_rn(v); }
};
template <> struct Elem<__half> {
  __device__ static float load(__half v) { return __half2float(v); }
  __device__ static __half store(float v) { return __float2half_rn(v); }
};

// --- copies (all threads of the CTA) ---------------------------------------------------------
template <class V>
__device__ __forceinline__ void copy_as(uint8_t* dst, const uint8_t* src, uint64_t n) {
  const uint64_t nv = n / sizeof(V);
  V* d = reinterpret_cast<V*>(dst);
  const V* s = reinterpret_cast<const V*>(src);
  uint64_t i = threadIdx.x;
  for (; i + (kUnroll - 1) * kThreads < nv; i += kUnroll * kThreads) {
    V v[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) v[u] = __ldcg(s + i + u * kThreads);
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) d[i + u * kThreads] = v[u];
  }
  for (; i < nv; i += kThreads) d[i] = __ldcg(s + i);
  const uint64_t done = nv * sizeof(V);
  if (threadIdx.x < n - done) dst[done + threadIdx.x] = src[done + threadIdx.x];
}

// Copies n bytes with the widest access both pointers allow (16 bytes on aligned tensors).
__device__ __forceinline__ void copy_bytes(uint8_t* dst, const uint8_t* src, uint64_t n) {
  const uintptr_t mis = reinterpret_cast<uintptr_t>(dst) | reinterpret_cast<uintptr_t>(src);
  if ((mis & 15) == 0) {
    copy_as<uint4>(dst, src, n);
  } else if ((mis & 7) == 0) {
    copy_as<uint2>(dst, src, n);
  } else if ((mis & 3) == 0) {
    copy_as<uint32_t>(dst, src, n);
  } else {
    copy_as<uint16_t>(dst, src, n);
  }
}

// out[i] = sum over p = 0..W-1 (in that order, fp32) of src_p[i], for n elements starting at
// element `off` of every source; src_p is x for p == rank, else rank p's data region. Writes
// the rounded sum to out_a and (if not null) out_b.
template <class T>
__device__ __forceinline__ const T* source(const Params& p, int r, uint64_t off) {
  const uint8_t* base = r == p.g.rank ? p.x : p.g.data[r];
  return reinterpret_cast<const T*>(base) + off;
}

template <class T>
__device__ __forceinline__ void reduce_elems(const Params& p, uint64_t off, uint64_t n, T* out_a,
                                             T* out_b) {
  constexpr int kPer = 16 / sizeof(T);
  const int world = p.g.world;
  bool aligned = (reinterpret_cast<uintptr_t>(out_a) | reinterpret_cast<uintptr_t>(out_b) |
                  reinterpret_cast<uintptr_t>(p.x) | (off * sizeof(T))) % 16 == 0;
  uint64_t first_scalar = 0;
  if (aligned) {
    const uint64_t nv = n / kPer;
    for (uint64_t v = threadIdx.x; v < nv; v += kThreads) {
      float acc[kPer];
#pragma unroll
      for (int k = 0; k < kPer; ++k) acc[k] = 0.f;
      for (int r = 0; r < world; ++r) {
        const uint4 raw = __ldcg(reinterpret_cast<const uint4*>(source<T>(p, r, off)) + v);
        const T* e = reinterpret_cast<const T*>(&raw);
#pragma unroll
        for (int k = 0; k < kPer; ++k) acc[k] += Elem<T>::load(e[k]);
      }
      uint4 packed;
      T* o = reinterpret_cast<T*>(&packed);
#pragma unroll
      for (int k = 0; k < kPer; ++k) o[k] = Elem<T>::store(acc[k]);
      reinterpret_cast<uint4*>(out_a)[v] = packed;
      if (out_b != nullptr) reinterpret_cast<uint4*>(out_b)[v] = packed;
    }
    first_scalar = nv * kPer;
  }
  for (uint64_t i = first_scalar + threadIdx.x; i < n; i += kThreads) {
    float acc = 0.f;
    for (int r = 0; r < world; ++r) acc += Elem<T>::load(source<T>(p, r, off)[i]);
    out_a[i] = Elem<T>::store(acc);
    if (out_b != nullptr) out_b[i] = Elem<T>::store(acc);
  }
}

// --- synchronization of a CTA's items --------------------------------------------------------
// One thread waits (local-memory poll) or releases; the CTA barrier extends the acquire to
// the other threads' reads and orders their writes before the release.
__device__ __forceinline__ void cta_wait(const GroupDevice& g, uint32_t slot, uint64_t e,
                                         int32_t op, int32_t kind, int peer, int32_t index) {
  if (threadIdx.x == 0) {
    comm::wait_geq(g, g.flags[g.rank] + slot, e, comm::WaitSite{op, kind, peer, index});
  }
  __syncthreads();
}

// Releases `slot` = e at every rank of this node but this one (all_gather's stage, all_reduce's
// reduced block), or at `only` when only >= 0.
__device__ __forceinline__ void cta_release(const GroupDevice& g, uint32_t slot, uint64_t e,
                                            int only) {
  __syncthreads();
  if (threadIdx.x == 0) {
    if (only >= 0) {
      comm::signal(g, only, slot, e);
    } else {
      for (int r = 0; r < g.world; ++r) {
        if (r != g.rank && g.flags[r] != nullptr) comm::signal(g, r, slot, e);
      }
    }
  }
}

// Every CTA starts only after the entry barrier (CTA 0 runs it and checks the signatures):
// before it, a peer may still read this rank's region (call e-1), and a peer of another shape
// must not be read out of bounds.
__device__ __forceinline__ uint64_t enter(const Params& p) {
  const GroupDevice& g = p.g;
  const uint64_t e = comm::op_begin(g);
  if (threadIdx.x == 0) {
    if (blockIdx.x == 0) {
      comm::entry_barrier(g, e, p.op, p.signature);
      comm::st_release_sys(g.flags[g.rank] + kEnteredSlot, e);
    } else {
      comm::wait_geq(g, g.flags[g.rank] + kEnteredSlot, e,
                     comm::WaitSite{p.op, comm::kWaitEntry, -1, 0});
    }
  }
  __syncthreads();
  return e;
}

__device__ __forceinline__ void leave(const Params& p, uint64_t e) {
  __syncthreads();
  if (threadIdx.x == 0) comm::op_end(p.g, e);
}

// Element range of chunk c of block d: [begin, begin + n).
__device__ __forceinline__ void chunk_range(const Params& p, int d, uint32_t c, uint64_t* begin,
                                            uint64_t* n) {
  const uint64_t block_begin = static_cast<uint64_t>(d) * p.block;
  const uint64_t block_end = min(p.count, block_begin + p.block);
  const uint64_t b = min(block_end, block_begin + c * p.chunk);
  *begin = b;
  *n = min(block_end, b + p.chunk) - b;
}

// --- the kernels ---------------------------------------------------------------------------
// all_gather: items [stage: chunks][gather: W * chunks, own rank first].
template <class T>
__global__ void __launch_bounds__(kThreads, 1) all_gather_kernel(const __grid_constant__ Params p) {
  const GroupDevice& g = p.g;
  const uint64_t e = enter(p);
  const uint32_t chunks = p.chunks;
  const uint64_t seg = p.count * sizeof(T);
  const uint64_t chunk_bytes = p.chunk * sizeof(T);
  const uint32_t items = chunks + static_cast<uint32_t>(g.world) * chunks;
  for (uint32_t i = blockIdx.x; i < items; i += gridDim.x) {
    if (i < chunks) {  // stage
      const uint64_t b = i * chunk_bytes, n = min(seg, b + chunk_bytes) - b;
      copy_bytes(g.data[g.rank] + b, p.x + b, n);
      cta_release(g, stage_slot(g.rank, i), e, -1);
      continue;
    }
    const uint32_t j = (i - chunks) / chunks, c = (i - chunks) % chunks;
    const int src = (g.rank + static_cast<int>(j)) % g.world;
    const uint64_t b = c * chunk_bytes, n = min(seg, b + chunk_bytes) - b;
    if (src == g.rank) {
      copy_bytes(p.out + src * seg + b, p.x + b, n);
    } else {
      cta_wait(g, stage_slot(src, c), e, p.op, comm::kWaitPeerFlag, src, static_cast<int32_t>(c));
      copy_bytes(p.out + src * seg + b, g.data[src] + b, n);
    }
    __syncthreads();  // the CTA's threads are done with this item before the next wait
  }
  leave(p, e);
}

// reduce_scatter (kAllReduce = false) and all_reduce: items
//   [stage: (W-1) * chunks, peers rank+1.. first][reduce: chunks][all_reduce gather: (W-1) * chunks].
template <class T, bool kAllReduce>
__global__ void __launch_bounds__(kThreads, 1) reduce_kernel(const __grid_constant__ Params p) {
  const GroupDevice& g = p.g;
  const uint64_t e = enter(p);
  const int world = g.world, rank = g.rank;
  const uint32_t chunks = p.chunks;
  const uint32_t peers = static_cast<uint32_t>(world - 1);
  const uint32_t stage_items = peers * chunks;
  const uint32_t items = stage_items + chunks + (kAllReduce ? peers * chunks : 0u);
  T* region = reinterpret_cast<T*>(g.data[rank]);
  const T* x = reinterpret_cast<const T*>(p.x);
  T* out = reinterpret_cast<T*>(p.out);
  for (uint32_t i = blockIdx.x; i < items; i += gridDim.x) {
    uint64_t begin, n;
    if (i < stage_items) {  // block of rank d (!= rank) into the own region, released at d
      const int d = (rank + 1 + static_cast<int>(i / chunks)) % world;
      const uint32_t c = i % chunks;
      chunk_range(p, d, c, &begin, &n);
      copy_bytes(reinterpret_cast<uint8_t*>(region + begin),
                 reinterpret_cast<const uint8_t*>(x + begin), n * sizeof(T));
      cta_release(g, stage_slot(rank, c), e, d);
    } else if (i < stage_items + chunks) {  // reduce chunk c of the own block
      const uint32_t c = i - stage_items;
      chunk_range(p, rank, c, &begin, &n);
      if (threadIdx.x == 0) {
        for (int j = 1; j < world; ++j) {
          const int src = (rank + j) % world;
          comm::wait_geq(g, g.flags[rank] + stage_slot(src, c), e,
                         comm::WaitSite{p.op, comm::kWaitPeerFlag, src, static_cast<int32_t>(c)});
        }
      }
      __syncthreads();
      if constexpr (kAllReduce) {
        reduce_elems<T>(p, begin, n, out + begin, region + begin);
        cta_release(g, reduced_slot(rank, c), e, -1);
      } else {
        reduce_elems<T>(p, begin, n, out + (begin - static_cast<uint64_t>(rank) * p.block),
                        nullptr);
      }
    } else {  // all_reduce: a peer's reduced block into the output
      const uint32_t k = i - stage_items - chunks;
      const int src = (rank + 1 + static_cast<int>(k / chunks)) % world;
      const uint32_t c = k % chunks;
      chunk_range(p, src, c, &begin, &n);
      cta_wait(g, reduced_slot(src, c), e, p.op, comm::kWaitPeerFlag, src,
               static_cast<int32_t>(c));
      copy_bytes(reinterpret_cast<uint8_t*>(out + begin),
                 reinterpret_cast<const uint8_t*>(reinterpret_cast<const T*>(g.data[src]) + begin),
                 n * sizeof(T));
    }
    __syncthreads();
  }
  leave(p, e);
}

// --- host side -----------------------------------------------------------------------------
int elem_size(DType t) { return t == DType::kFP32 ? 4 : 2; }

uint64_t round_up(uint64_t v, uint64_t m) { return (v + m - 1) / m * m; }

// Chunk length (elements, a 16-byte multiple) for a block of `block` elements.
uint64_t chunk_elems(uint64_t block, int esize) {
  const uint64_t per16 = 16 / esize;
  const uint64_t min_chunk = kMinChunkBytes / esize;
  uint64_t c = std::max(min_chunk, (block + kMaxChunks - 1) / kMaxChunks);
  return round_up(std::max<uint64_t>(c, 1), per16);
}

uint32_t chunk_count(uint64_t block, uint64_t chunk) {
  return static_cast<uint32_t>(std::max<uint64_t>(1, (block + chunk - 1) / chunk));
}

template <class T>
struct Kernels {
  static void* get(Kind k) {
    switch (k) {
      case Kind::kAllGather:
        return reinterpret_cast<void*>(&all_gather_kernel<T>);
      case Kind::kReduceScatter:
        return reinterpret_cast<void*>(&reduce_kernel<T, false>);
      case Kind::kAllReduce:
        return reinterpret_cast<void*>(&reduce_kernel<T, true>);
    }
    return nullptr;
  }
};

void* kernel_for(Kind k, DType t) {
  switch (t) {
    case DType::kBF16:
      return Kernels<__nv_bfloat16>::get(k);
    case DType::kFP16:
      return Kernels<__half>::get(k);
    case DType::kFP32:
      return Kernels<float>::get(k);
  }
  return nullptr;
}

// The co-resident grid for `kernel` on the current device (the SM count as this process sees
// it: under MPS it is the process's share), cached per (device, kernel): the queries cost more
// than a small collective.
cudaError_t resident_ctas(const void* kernel, int* out) {
  int dev = 0;
  cudaError_t err = cudaGetDevice(&dev);
  if (err != cudaSuccess) return err;
  static std::mutex mu;
  static std::map<std::pair<int, const void*>, int> cache;
  std::lock_guard<std::mutex> guard(mu);
  auto it = cache.find({dev, kernel});
  if (it != cache.end()) {
    *out = it->second;
    return cudaSuccess;
  }
  int sms = 0, per_sm = 0;
  err = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev);
  if (err != cudaSuccess) return err;
  err = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, kThreads, 0);
  if (err != cudaSuccess) return err;
  *out = sms * std::max(1, std::min(per_sm, 2));
  cache.emplace(std::make_pair(dev, kernel), *out);
  return cudaSuccess;
}

cudaError_t launch(Kind kind, const Args& a, const char** reason) {
  const GroupDevice& g = a.group;
  if (g.world < 1 || g.world > comm::kMaxRanks || g.rank < 0 || g.rank >= g.world ||
      g.flags[g.rank] == nullptr || g.epoch == nullptr || g.exit_ticket == nullptr) {
    if (reason) *reason = "the group's device view is not set up";
    return cudaErrorInvalidValue;
  }
  for (int r = 0; r < g.world; ++r) {
    if (g.flags[r] == nullptr || g.data[r] == nullptr) {
      if (reason) *reason = "a rank of the group lives on another node (no peer mapping)";
      return cudaErrorInvalidValue;
    }
  }
  if (a.count == 0) return cudaSuccess;
  const int esize = elem_size(a.dtype);
  Params p;
  p.g = g;
  p.x = static_cast<const uint8_t*>(a.x);
  p.out = static_cast<uint8_t*>(a.out);
  p.count = a.count;
  p.signature = a.signature;
  uint64_t need = 0;
  uint32_t items = 0;
  const uint32_t world = static_cast<uint32_t>(g.world);
  switch (kind) {
    case Kind::kAllGather:
      p.block = a.count;
      p.op = comm::kOpAllGather;
      need = all_gather_bytes(a.dtype, a.count, g.world);
      break;
    case Kind::kReduceScatter:
      if (a.count % world != 0) {
        if (reason) *reason = "reduce_scatter needs count % world == 0";
        return cudaErrorInvalidValue;
      }
      p.block = a.count / world;
      p.op = comm::kOpReduceScatter;
      need = reduce_scatter_bytes(a.dtype, a.count, g.world);
      break;
    case Kind::kAllReduce:
      p.block = round_up((a.count + world - 1) / world, 16 / esize);
      p.op = comm::kOpAllReduce;
      need = all_reduce_bytes(a.dtype, a.count, g.world);
      break;
  }
  if (g.data_bytes < need) {
    if (reason) *reason = "the group's symmetric memory is smaller than the call needs";
    return cudaErrorInvalidValue;
  }
  p.chunk = chunk_elems(std::max<uint64_t>(p.block, 1), esize);
  p.chunks = chunk_count(p.block, p.chunk);
  switch (kind) {
    case Kind::kAllGather:
      items = p.chunks * (1 + world);
      break;
    case Kind::kReduceScatter:
      items = p.chunks * world;
      break;
    case Kind::kAllReduce:
      items = p.chunks * (2 * world - 1);
      break;
  }
  void* kernel = kernel_for(kind, a.dtype);
  int ctas = 0;
  cudaError_t err = resident_ctas(kernel, &ctas);
  if (err != cudaSuccess) return err;
  if (a.ctas > 0) ctas = std::min(ctas, a.ctas);
  ctas = std::max(1, std::min<int>(ctas, static_cast<int>(items)));
  void* args[] = {&p};
  return cudaLaunchKernel(kernel, dim3(ctas), dim3(kThreads), args, 0, a.stream);
}

}  // namespace

uint64_t all_gather_bytes(DType dtype, uint64_t count, int) {
  return count * elem_size(dtype);
}
uint64_t reduce_scatter_bytes(DType dtype, uint64_t count, int) {
  return count * elem_size(dtype);
}
uint64_t all_reduce_bytes(DType dtype, uint64_t count, int) { return count * elem_size(dtype); }

cudaError_t all_gather(const Args& args, const char** reason) {
  return launch(Kind::kAllGather, args, reason);
}
cudaError_t reduce_scatter(const Args& args, const char** reason) {
  return launch(Kind::kReduceScatter, args, reason);
}
cudaError_t all_reduce(const Args& args, const char** reason) {
  return launch(Kind::kAllReduce, args, reason);
}

}  // namespace mkernel::collectives
