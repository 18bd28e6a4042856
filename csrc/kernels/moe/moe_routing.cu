// The MoE routing kernels (see moe_routing_api.h): expert / pos / cnt / slot of one rank's
// topk_idx for the dispatch kernel, equal entry for entry to moe_ep.cpp's ATen routing.
#include "moe_routing_api.h"

#include <algorithm>

#include "../comm/group_device.h"
#include "moe_ep_api.h"

namespace mkernel::moe_ep {
namespace {

constexpr int kRouteThreads = 256;
constexpr unsigned kFullMask = 0xffffffffu;

struct RoutingParams {
  const void* idx;
  int64_t tokens;
  int64_t seg;     // tokens per CTA
  int ctas;        // segments (CTAs of the count launch; 0 when T == 0)
  int k, experts, e_local, world;
  int32_t* scratch;  // [ctas][experts + 1 + world]: each segment's id and destination counts
  int32_t* expert;
  int32_t* pos;
  int32_t* cnt;
  int32_t* slot;
};

template <class Idx>
__device__ __forceinline__ int bucket_of(Idx id, int experts) {
  // Out-of-range ids share the extra bucket E (the ATen path sorts them last).
  return id >= 0 && id < experts ? static_cast<int>(id) : experts;
}

// Bit d set: token's choices include an expert of rank d (valid ids only; W <= 32).
template <class Idx>
__device__ __forceinline__ uint32_t dest_mask(const Idx* choices, int k, int experts,
                                              int e_local) {
  uint32_t mask = 0;
  for (int j = 0; j < k; ++j) {
    const Idx id = choices[j];
    if (id >= 0 && id < experts) mask |= 1u << static_cast<int>(id / e_local);
  }
  return mask;
}

// 1. Each segment's histograms (order-free shared atomics) and expert[].
template <class Idx>
__global__ void __launch_bounds__(kRouteThreads) routing_count_kernel(const RoutingParams p) {
  __shared__ int32_t s_hist[kMaxExperts + 1];
  __shared__ int32_t s_dest[comm::kMaxRanks];
  const int B = p.experts + 1, W = p.world;
  for (int x = threadIdx.x; x < B; x += kRouteThreads) s_hist[x] = 0;
  for (int d = threadIdx.x; d < W; d += kRouteThreads) s_dest[d] = 0;
  __syncthreads();
  const auto* idx = static_cast<const Idx*>(p.idx);
  const int64_t t0 = blockIdx.x * p.seg, t1 = min(p.tokens, t0 + p.seg);
  for (int64_t i = t0 * p.k + threadIdx.x; i < t1 * p.k; i += kRouteThreads) {
    const int b = bucket_of(idx[i], p.experts);
    atomicAdd(&s_hist[b], 1);
    p.expert[i] = b < p.experts ? b : -1;
  }
  for (int64_t t = t0 + threadIdx.x; t < t1; t += kRouteThreads) {
    uint32_t mask = dest_mask(idx + t * p.k, p.k, p.experts, p.e_local);
    while (mask != 0) {
      atomicAdd(&s_dest[__ffs(mask) - 1], 1);
      mask &= mask - 1;
    }
  }
  __syncthreads();
  int32_t* row = p.scratch + static_cast<int64_t>(blockIdx.x) * (B + W);
  for (int x = threadIdx.x; x < B; x += kRouteThreads) row[x] = s_hist[x];
  for (int d = threadIdx.x; d < W; d += kRouteThreads) row[B + d] = s_dest[d];
}

// 2. Bases from the segments before this one, then the in-order ranks of this segment.
__global__ void __launch_bounds__(kRouteThreads) routing_rank_kernel(const RoutingParams p) {
  __shared__ int32_t s_run[kMaxExperts + 2];  // + the idle lanes' bucket E + 1
  __shared__ int32_t s_drun[comm::kMaxRanks];
  const int B = p.experts + 1, W = p.world, row = B + W;
  const int b = blockIdx.x;
  const bool last = b == max(p.ctas, 1) - 1;
  for (int x = threadIdx.x; x < row; x += kRouteThreads) {
    int32_t base = 0;
    for (int c = 0; c < b; ++c) base += p.scratch[static_cast<int64_t>(c) * row + x];
    if (last && x < p.experts) {
      p.cnt[x] = base + (p.ctas > 0 ? p.scratch[static_cast<int64_t>(b) * row + x] : 0);
    }
    if (x < B) {
      s_run[x] = base;
    } else {
      s_drun[x - B] = base;
    }
  }
  __syncthreads();
  if (p.ctas == 0) return;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const unsigned below = (1u << lane) - 1;
  const int64_t t0 = b * p.seg, t1 = min(p.tokens, t0 + p.seg);
  if (warp == 0) {
    // Choices in (token, choice) order, 32 at a time: rank among equal ids = this segment's
    // base + earlier steps (s_run) + lower lanes of this step with the same id.
    const int64_t c1 = t1 * p.k;
    for (int64_t c = t0 * p.k; c < c1; c += 32) {
      const int64_t i = c + lane;
      int key = B;  // idle lanes: a bucket of their own
      if (i < c1) {
        const int32_t x = p.expert[i];
        key = x >= 0 ? x : p.experts;
      }
      const unsigned peers = __match_any_sync(kFullMask, key);
      const int32_t r = s_run[key] + __popc(peers & below);
      __syncwarp();
      if (lane == 31 - __clz(peers)) s_run[key] += __popc(peers);
      __syncwarp();
      if (i < c1) p.pos[i] = r;
    }
  } else if (warp == 1) {
    // Tokens in order, 32 at a time: slot at rank d = base + earlier tokens sent to d.
    for (int64_t c = t0; c < t1; c += 32) {
      const int64_t t = c + lane;
      uint32_t mask = 0;
      if (t < t1) {
        for (int j = 0; j < p.k; ++j) {
          const int32_t x = p.expert[t * p.k + j];
          if (x >= 0) mask |= 1u << (x / p.e_local);
        }
      }
      for (int d = 0; d < W; ++d) {
        const bool has = (mask >> d) & 1u;
        const unsigned sent = __ballot_sync(kFullMask, has);
        const int32_t u = s_drun[d] + __popc(sent & below);
        if (t < t1) p.slot[t * W + d] = has ? u : -1;
        __syncwarp();
        if (lane == 0) s_drun[d] += __popc(sent);
        __syncwarp();
      }
    }
  }
}

}  // namespace

int64_t routing_segment_tokens(int64_t tokens) {
  constexpr int64_t kMinTokens = 128, kMaxCtas = 256;
  return std::max(kMinTokens, (tokens + kMaxCtas - 1) / kMaxCtas);
}

int64_t routing_scratch_ints(int64_t tokens, int experts, int world) {
  const int64_t seg = routing_segment_tokens(tokens);
  const int64_t ctas = (tokens + seg - 1) / seg;
  return std::max<int64_t>(ctas, 1) * (experts + 1 + world);
}

cudaError_t route(const RoutingArgs& a, const char** reason) {
  if (a.experts < 1 || a.experts > kMaxExperts || a.world < 1 || a.world > comm::kMaxRanks ||
      a.experts % a.world != 0 || a.k < 1 || a.tokens < 0 ||
      a.tokens * a.k >= (int64_t{1} << 31)) {
    if (reason) *reason = "bad routing arguments (experts, world, k or tokens)";
    return cudaErrorInvalidValue;
  }
  RoutingParams p;
  p.idx = a.topk_idx;
  p.tokens = a.tokens;
  p.seg = routing_segment_tokens(a.tokens);
  p.ctas = static_cast<int>((a.tokens + p.seg - 1) / p.seg);
  p.k = a.k;
  p.experts = a.experts;
  p.e_local = a.experts / a.world;
  p.world = a.world;
  p.scratch = a.scratch;
  p.expert = a.expert;
  p.pos = a.pos;
  p.cnt = a.cnt;
  p.slot = a.slot;
  if (p.ctas > 0) {
    if (a.idx_is_64) {
      routing_count_kernel<int64_t><<<p.ctas, kRouteThreads, 0, a.stream>>>(p);
    } else {
      routing_count_kernel<int32_t><<<p.ctas, kRouteThreads, 0, a.stream>>>(p);
    }
    const cudaError_t err = cudaGetLastError();
    if (err != cudaSuccess) return err;
  }
  routing_rank_kernel<<<std::max(p.ctas, 1), kRouteThreads, 0, a.stream>>>(p);
  return cudaGetLastError();
}

}  // namespace mkernel::moe_ep
