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
  int idx_stride;  // elements of Idx from one choice to the next (RoutingArgs::idx_stride)
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
__device__ __forceinline__ uint32_t dest_mask(const Idx* choices, int k, int stride, int experts,
                                              int e_local) {
  uint32_t mask = 0;
  for (int j = 0; j < k; ++j) {
    const Idx id = choices[j * stride];
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
    const int b = bucket_of(idx[i * p.idx_stride], p.experts);
    atomicAdd(&s_hist[b], 1);
    p.expert[i] = b < p.experts ? b : -1;
  }
  for (int64_t t = t0 + threadIdx.x; t < t1; t += kRouteThreads) {
    uint32_t mask = dest_mask(idx + t * p.k * p.idx_stride, p.k, p.idx_stride, p.experts, p.e_local);
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

// moe14 (nodes_layout): one thread per choice of every rank, plus the tails; each CTA first puts
// every expert's base (choices of the owner's experts before it) in shared memory.
struct NodesLayoutParams {
  const int32_t* expert;
  const int32_t* pos;
  const int32_t* cnt;
  int64_t max_tokens, tokens, rows_out, n;
  int k, experts, e_local, world, me;
  int64_t* route;
  int64_t* token;
  int32_t* counts;
  int32_t* recv_counts;
  const int32_t* packed;  // optional: pad_ids_weighted's words of every rank, as int32 pairs
  uint32_t* words;        // optional: the combine's routes [n / k, 3k]
};

__global__ void __launch_bounds__(kRouteThreads) nodes_layout_kernel(const NodesLayoutParams p) {
  __shared__ int32_t s_base[kMaxExperts];
  __shared__ int32_t s_mine;  // choices of this rank's experts (all of them, before the bound)
  const int E = p.experts, El = p.e_local;
  for (int g = threadIdx.x; g < E; g += kRouteThreads) {
    const int first = (g / El) * El;
    int32_t b = 0;
    for (int x = first; x < g; ++x) b += p.cnt[x];
    s_base[g] = b;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    const int last = p.me * El + El - 1;
    s_mine = s_base[last] + p.cnt[last];
  }
  __syncthreads();
  const int64_t stride = static_cast<int64_t>(gridDim.x) * kRouteThreads;
  const int64_t first = static_cast<int64_t>(blockIdx.x) * kRouteThreads + threadIdx.x;
  const int64_t per_rank = p.max_tokens * p.k;
  for (int64_t c = first; c < p.n; c += stride) {
    const int32_t g = p.expert[c];
    int64_t code = -1;
    if (g >= 0) {
      const int o = g / El;
      const int64_t row = static_cast<int64_t>(s_base[g]) + p.pos[c];
      if (row < p.rows_out) {
        code = (static_cast<int64_t>(o) << 32) | row;
        if (o == p.me) {
          p.token[row] = c / p.k;
          atomicAdd(&p.recv_counts[(c / per_rank) * El + (g - p.me * El)], 1);
        }
      }
    }
    const int64_t s = c / per_rank, t = (c / p.k) % p.max_tokens;
    if (s == p.me && t < p.tokens) p.route[t * p.k + c % p.k] = code;
    if (p.words != nullptr) {  // launch_pack_routes' words for slot c / k, as its source packs them
      const int j = static_cast<int>(c % p.k);
      uint32_t* slot = p.words + (c / p.k) * 3 * p.k;
      slot[2 * j] = static_cast<uint32_t>(static_cast<uint64_t>(code));
      slot[2 * j + 1] = static_cast<uint32_t>(static_cast<uint64_t>(code) >> 32);
      slot[2 * p.k + j] = code >= 0 ? static_cast<uint32_t>(p.packed[2 * c + 1]) : 0u;
    }
  }
  // Rows past this rank's counts: no choice (the kept choices above wrote exactly the rows
  // below min(s_mine, rows_out), one each).
  const int64_t live = min(static_cast<int64_t>(s_mine), p.rows_out);
  for (int64_t q = live + first; q < p.rows_out; q += stride) p.token[q] = -1;
  if (blockIdx.x == 0) {
    for (int e = threadIdx.x; e < El; e += kRouteThreads) {
      const int g = p.me * El + e;
      const int64_t b = s_base[g];
      p.counts[e] = static_cast<int32_t>(min(b + p.cnt[g], p.rows_out) - min(b, p.rows_out));
    }
  }
}

// pad_ids_weighted: the id as pad_ids_kernel writes it in the low word, the weight's bits above.
template <class Idx>
__global__ void __launch_bounds__(kRouteThreads) pad_ids_weighted_kernel(const Idx* __restrict__ idx,
                                                                        const float* __restrict__ w,
                                                                        int64_t valid, int64_t total,
                                                                        int experts, int64_t* __restrict__ out) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * kRouteThreads;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * kRouteThreads + threadIdx.x; i < total; i += stride) {
    int32_t v = -1;
    uint32_t bits = 0;
    if (i < valid) {
      const Idx id = idx[i];
      if (id >= 0 && id < experts) v = static_cast<int32_t>(id);
      bits = __float_as_uint(w[i]);
    }
    out[i] = static_cast<int64_t>((static_cast<uint64_t>(bits) << 32) | static_cast<uint32_t>(v));
  }
}

template <class Idx>
__global__ void __launch_bounds__(kRouteThreads) pad_ids_kernel(const Idx* __restrict__ idx, int64_t valid,
                                                               int64_t total, int experts,
                                                               int32_t* __restrict__ out) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * kRouteThreads;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * kRouteThreads + threadIdx.x; i < total; i += stride) {
    int32_t v = -1;
    if (i < valid) {
      const Idx id = idx[i];
      if (id >= 0 && id < experts) v = static_cast<int32_t>(id);
    }
    out[i] = v;
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
  if (a.idx_stride != 1 && (a.idx_stride != 2 || a.idx_is_64)) {
    if (reason) *reason = "bad routing arguments (idx_stride: 1, or 2 over int32 pairs)";
    return cudaErrorInvalidValue;
  }
  RoutingParams p;
  p.idx = a.topk_idx;
  p.idx_stride = a.idx_stride;
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

cudaError_t nodes_layout(const NodesLayoutArgs& a, const char** reason) {
  const int64_t n = static_cast<int64_t>(a.world) * a.max_tokens * a.k;
  if (a.experts < 1 || a.experts > kMaxExperts || a.world < 1 || a.world > comm::kMaxRanks ||
      a.experts % a.world != 0 || a.k < 1 || a.me < 0 || a.me >= a.world || a.tokens < 0 ||
      a.tokens > a.max_tokens || a.rows_out < 0 || n >= (int64_t{1} << 31) ||
      a.rows_out >= (int64_t{1} << 31)) {
    if (reason) *reason = "bad layout arguments (experts, world, rank, k, tokens or rows_out)";
    return cudaErrorInvalidValue;
  }
  NodesLayoutParams p;
  p.expert = a.expert;
  p.pos = a.pos;
  p.cnt = a.cnt;
  p.max_tokens = a.max_tokens;
  p.tokens = a.tokens;
  p.rows_out = a.rows_out;
  p.n = n;
  p.k = a.k;
  p.experts = a.experts;
  p.e_local = a.experts / a.world;
  p.world = a.world;
  p.me = a.me;
  p.route = a.route;
  p.token = a.token;
  p.counts = a.counts;
  p.recv_counts = a.recv_counts;
  if ((a.packed == nullptr) != (a.words == nullptr)) {
    if (reason) *reason = "bad layout arguments (the packed ids and the words go together)";
    return cudaErrorInvalidValue;
  }
  p.packed = a.packed;
  p.words = a.words;
  const int64_t work = std::max(n, a.rows_out);
  const int grid = static_cast<int>(std::min<int64_t>(
      std::max<int64_t>(1, (work + kRouteThreads - 1) / kRouteThreads), 1024));
  nodes_layout_kernel<<<grid, kRouteThreads, 0, a.stream>>>(p);
  return cudaGetLastError();
}

cudaError_t pad_ids(const void* topk_idx, bool idx_is_64, int64_t tokens, int64_t max_tokens, int k,
                    int experts, int32_t* out, cudaStream_t stream) {
  if (tokens < 0 || max_tokens < tokens || k < 1 || experts < 1) return cudaErrorInvalidValue;
  const int64_t total = max_tokens * k, valid = tokens * k;
  if (total == 0) return cudaSuccess;
  const int grid = static_cast<int>(std::min<int64_t>((total + kRouteThreads - 1) / kRouteThreads, 1024));
  if (idx_is_64) {
    pad_ids_kernel<int64_t><<<grid, kRouteThreads, 0, stream>>>(
        static_cast<const int64_t*>(topk_idx), valid, total, experts, out);
  } else {
    pad_ids_kernel<int32_t><<<grid, kRouteThreads, 0, stream>>>(
        static_cast<const int32_t*>(topk_idx), valid, total, experts, out);
  }
  return cudaGetLastError();
}

cudaError_t pad_ids_weighted(const void* topk_idx, bool idx_is_64, const float* topk_weights,
                             int64_t tokens, int64_t max_tokens, int k, int experts, int64_t* out,
                             cudaStream_t stream) {
  if (tokens < 0 || max_tokens < tokens || k < 1 || experts < 1) return cudaErrorInvalidValue;
  const int64_t total = max_tokens * k, valid = tokens * k;
  if (total == 0) return cudaSuccess;
  const int grid = static_cast<int>(std::min<int64_t>((total + kRouteThreads - 1) / kRouteThreads, 1024));
  if (idx_is_64) {
    pad_ids_weighted_kernel<int64_t><<<grid, kRouteThreads, 0, stream>>>(
        static_cast<const int64_t*>(topk_idx), topk_weights, valid, total, experts, out);
  } else {
    pad_ids_weighted_kernel<int32_t><<<grid, kRouteThreads, 0, stream>>>(
        static_cast<const int32_t*>(topk_idx), topk_weights, valid, total, experts, out);
  }
  return cudaGetLastError();
}

}  // namespace mkernel::moe_ep
