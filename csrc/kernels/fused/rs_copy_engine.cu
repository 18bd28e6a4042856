// gemm_rs's copy-engine route: its entry barrier and its reduce (rs_copy_engine_api.h; the route
// as a whole: csrc/fused_copy_engine.h).
//
// Why a reduce of local slots: on two whole H200s the fused kernel's reduce role pulled the peers'
// partial tiles over NVLink with SM loads beside a power-capped GEMM and ran 1.13-1.19x the GEMM
// alone at Llama-70B fc2 (benchmarks/NOTES.md "Session 22", "Session 24"), while PyTorch's
// async-TP — per-destination GEMMs whose outputs the copy engines move, then one local reduce —
// ran at 1.01-1.05x. Here the copy engines bring every peer's partial of this rank's rows into
// this rank's own region, so the only SM work besides the GEMMs is this bandwidth-bound pass over
// local memory (world + 1 streams of elems each).
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "../comm/fp32_accum.cuh"
#include "../comm/group_sync.cuh"
#include "rs_copy_engine_api.h"

namespace mkernel::fused {
namespace {

constexpr int kThreads = 256;
constexpr int kVec = 8;  // elements per 16-byte vector

__global__ void __launch_bounds__(32)
    route_entry_kernel(const comm::GroupDevice g, int32_t op, uint64_t signature) {
  if (threadIdx.x == 0) comm::entry_barrier(g, comm::op_begin(g), op, signature);
}

// Source s's partial: the own one or slot s of this rank's region.
template <class T>
__device__ __forceinline__ const T* source(const RsSlotsReduce& p, int s) {
  return s == p.group.rank
             ? static_cast<const T*>(p.own)
             : reinterpret_cast<const T*>(p.group.data[p.group.rank] + s * p.slot_bytes);
}

// The W - 1 sources' flags, one lane each, in a kernel of its own ahead of the reduce: the
// reduce's CTAs are placed only once every partial has landed. Why not wait inside the reduce:
// ranks sharing a GPU (MPS) place their kernels on one pool of SMs, and a reduce grid spinning
// on its flags would hold SMs a peer's block GEMM (one 64K-register CTA per SM) still needs
// before its partial can be copied here — a wait on itself until the bound. One warp holds at
// most one SM, as the launch gate does.
__global__ void __launch_bounds__(32) rs_slots_wait_kernel(const RsSlotsReduce p) {
  const comm::GroupDevice& g = p.group;
  const int s = static_cast<int>(threadIdx.x);
  if (s < g.world && s != g.rank) {
    const uint32_t slot = p.flag_base + static_cast<uint32_t>(s);
    comm::wait_geq(g, g.flags[g.rank] + slot, 1,
                   comm::WaitSite{p.op, comm::kWaitPeerFlag, s, static_cast<int32_t>(slot)});
  }
}

template <class T>
__global__ void __launch_bounds__(kThreads) rs_slots_reduce_kernel(const RsSlotsReduce p) {
  const comm::GroupDevice& g = p.group;
  const uint64_t e = comm::op_begin(g);
  const int64_t stride = static_cast<int64_t>(gridDim.x) * kThreads;
  const int64_t first = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x;
  const int64_t vecs = p.elems / kVec;
  // Every slot landed before rs_slots_wait_kernel ended (stream order). Loads bypass L1
  // (ld.global.cg) all the same: the copy engines wrote the slots during this call.
  for (int64_t v = first; v < vecs; v += stride) {
    float acc[kVec];
#pragma unroll
    for (int j = 0; j < kVec; ++j) acc[j] = 0.f;
    for (int r = 0; r < g.world; ++r) {  // rank order: the same sum on every path
      const uint4 raw = __ldcg(reinterpret_cast<const uint4*>(source<T>(p, r)) + v);
      const T* h = reinterpret_cast<const T*>(&raw);
#pragma unroll
      for (int j = 0; j < kVec; ++j) acc[j] += comm::Elem<T>::load(h[j]);
    }
    uint4 packed;
    T* o = reinterpret_cast<T*>(&packed);
#pragma unroll
    for (int j = 0; j < kVec; ++j) o[j] = comm::Elem<T>::store(acc[j]);
    reinterpret_cast<uint4*>(p.out)[v] = packed;
  }
  for (int64_t i = vecs * kVec + first; i < p.elems; i += stride) {  // elems % 8 tail
    float acc = 0.f;
    for (int r = 0; r < g.world; ++r) acc += comm::Elem<T>::load(__ldcg(source<T>(p, r) + i));
    static_cast<T*>(p.out)[i] = comm::Elem<T>::store(acc);
  }
  // The call's end, as the fused kernels' (fused_hooks.cuh call_end): the last CTA stores the
  // epoch, then kExit = e at every same-node rank — this rank no longer reads its slots, so the
  // peers' launch gates of the next call may let their copies in.
  __syncthreads();
  if (threadIdx.x == 0) {
    comm::op_end(g, e);
    if (*reinterpret_cast<volatile uint64_t*>(g.epoch) == e) {
      for (int q = 0; q < g.world; ++q) {
        if (g.flags[q] != nullptr)
          comm::st_release_sys(g.flags[q] + comm::FlagSlot::kExit + g.rank, e);
      }
    }
  }
}

}  // namespace

cudaError_t launch_route_entry(const comm::GroupDevice& g, int32_t op, uint64_t signature,
                               cudaStream_t stream) {
  route_entry_kernel<<<1, 32, 0, stream>>>(g, op, signature);
  return cudaGetLastError();
}

cudaError_t launch_rs_slots_reduce(const RsSlotsReduce& p, int grid, cudaStream_t stream) {
  const uintptr_t align = reinterpret_cast<uintptr_t>(p.own) | reinterpret_cast<uintptr_t>(p.out) |
                          reinterpret_cast<uintptr_t>(p.group.data[p.group.rank]) | p.slot_bytes;
  if (grid < 1 || align % 16 != 0) return cudaErrorInvalidValue;  // 16-byte vectors
  static_assert(comm::kMaxRanks <= 32, "a lane per source's flag");
  rs_slots_wait_kernel<<<1, 32, 0, stream>>>(p);
  if (p.bf16) {
    rs_slots_reduce_kernel<__nv_bfloat16><<<grid, kThreads, 0, stream>>>(p);
  } else {
    rs_slots_reduce_kernel<__half><<<grid, kThreads, 0, stream>>>(p);
  }
  return cudaGetLastError();
}

}  // namespace mkernel::fused
