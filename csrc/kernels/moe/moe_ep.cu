// The expert-parallel MoE kernels (protocol: moe_ep_api.h): dispatch exchange and combine on
// the group's peer memory. Roles run in sequence inside each CTA; work items are claimed by
// the CTAs that run (call-tagged counters), so no CTA waits for one that is not resident, and
// every wait is for work that running CTAs of other ranks do before their own waits.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <utility>

#include "../comm/fp32_accum.cuh"
#include "../comm/group_sync.cuh"
#include "../comm/resident_grid.h"
#include "../comm/work_counter.cuh"
#include "moe_ep_api.h"
#include "moe_slots.h"

namespace mkernel::moe_ep {
namespace {

using comm::FlagSlot;
using comm::GroupDevice;
using comm::kMaxRanks;

constexpr int kThreads = 512;
constexpr int kCtasPerSm = 2;  // the launch bounds' minimum: <= 64 registers per thread

// Flag slots and work counters: moe_slots.h.

constexpr uint64_t align256(uint64_t v) { return (v + 255) & ~uint64_t{255}; }

// --- small helpers ---------------------------------------------------------------------------

// The bound of a wait that follows this rank's entry barrier (its publisher's flags: kEntered,
// kCounts): twice the op timeout, so that when a peer is gone the publisher's entry-barrier wait
// expires first and its record names that peer (session 7 run 2: a CTA waiting for its own
// publisher's counts timed out first and blamed this rank itself).
__device__ __forceinline__ uint64_t after_entry_bound(const GroupDevice& g) {
  return 2 * g.timeout_ns;
}

// Waits (thread 0) for flag `slot + s` >= e from every rank s, bounded by `bound_ns`, then
// releases the CTA.
__device__ __forceinline__ void wait_all_ranks(const GroupDevice& g, uint32_t slot, uint64_t e,
                                               int32_t op, uint64_t bound_ns) {
  if (threadIdx.x == 0) {
    for (int s = 0; s < g.world; ++s) {
      comm::wait_geq(g.flags[g.rank] + slot + s, e, bound_ns, g.diag, g.group_id, g.rank,
                     comm::WaitSite{op, comm::kWaitPeerFlag, s, static_cast<int32_t>(slot + s)});
    }
  }
  __syncthreads();
}

// The next item of counter `slot` in this call (one thread). Items go to the CTAs that run:
// none waits for a CTA that is not resident (under MPS the ranks' grids share SMs).
__device__ __forceinline__ int64_t claim(const GroupDevice& g, uint32_t slot, uint64_t e) {
  return comm::claim_tagged(g.flags[g.rank] + slot, e);
}

// claim() by thread 0, handed to the whole CTA.
__device__ __forceinline__ int64_t claim_cta(const GroupDevice& g, uint32_t slot, uint64_t e,
                                             int64_t* s_item) {
  __syncthreads();
  if (threadIdx.x == 0) *s_item = claim(g, slot, e);
  __syncthreads();
  return *s_item;
}

// After this CTA finished an item of `total`: the CTA finishing the last one releases
// `slot + rank` = e at every rank ("all of this rank's writes of the phase are visible").
__device__ __forceinline__ void item_done(const GroupDevice& g, int64_t total, uint32_t slot,
                                          uint64_t e) {
  __syncthreads();
  if (threadIdx.x == 0) {
    __threadfence_system();  // this CTA's stores (peer and local) before its count
    if (claim(g, kWorkDone, e) == total - 1) {
      __threadfence_system();  // every item's stores (observed through the counter) first
      for (int p = 0; p < g.world; ++p) comm::signal(g, p, slot + g.rank, e);
    }
  }
}

// The same release when the phase has no item at all (called by the publisher).
__device__ __forceinline__ void release_empty(const GroupDevice& g, int64_t total, uint32_t slot,
                                              uint64_t e) {
  if (total == 0 && threadIdx.x == 0) {
    for (int p = 0; p < g.world; ++p) comm::signal(g, p, slot + g.rank, e);
  }
}

// Work item sizes. A copy item moves kRowsPerItem rows with every thread's loads of all of
// them in flight before its stores: one 14 KB row per CTA at a time left the copies latency
// bound (run s7run1: the dispatch's expansion and combine's stage ran far below HBM speed).
constexpr int kRowsPerItem = 8;    // rows per copy item (expansion, stage, scatter, gather)
constexpr int kTokensPerItem = 4;  // tokens per send / sum item
constexpr int kChoicesPerItem = kThreads * 4;

// The row space of the local expert layout: packed [0, min(R, max_rows)) or padded
// [0, E_local * C) (rows n >= counts[e] of expert e are not live).
__device__ __forceinline__ int64_t row_space(const int32_t* s_count, int e_local, int capacity,
                                             int64_t max_rows) {
  if (capacity > 0) return static_cast<int64_t>(e_local) * capacity;
  int64_t rows = 0;
  for (int x = 0; x < e_local; ++x) rows += s_count[x];
  return min(rows, max_rows);
}
__device__ __forceinline__ bool row_live(const int32_t* s_count, int capacity, int64_t r) {
  return capacity == 0 || r % capacity < s_count[r / capacity];
}

// The rows of one copy item (shared memory, filled by threads 0..kRowsPerItem-1 after the
// claim): row i goes from src[i] to dst[i]; src nullptr: zeros; dst nullptr: no row.
struct CopyItem {
  const uint4* src[kRowsPerItem];
  uint4* dst[kRowsPerItem];
};

// Copies the item's rows of n16 16-byte vectors (all threads of the CTA): each thread loads
// its vector of every row before storing any (kRowsPerItem loads in flight per thread). L1
// bypassed on the sources (peers wrote them through their mappings).
__device__ __forceinline__ void copy_rows(const CopyItem& c, int64_t n16) {
  for (int64_t v = threadIdx.x; v < n16; v += kThreads) {
    uint4 buf[kRowsPerItem];
#pragma unroll
    for (int i = 0; i < kRowsPerItem; ++i) {
      buf[i] = c.src[i] != nullptr && c.dst[i] != nullptr ? __ldcg(c.src[i] + v)
                                                          : make_uint4(0, 0, 0, 0);
    }
#pragma unroll
    for (int i = 0; i < kRowsPerItem; ++i) {
      if (c.dst[i] != nullptr) c.dst[i][v] = buf[i];
    }
  }
}

// --- dispatch --------------------------------------------------------------------------------

struct DispatchParams {
  GroupDevice g;
  const uint4* x;
  int64_t tokens, n16;  // n16: 16-byte vectors per row
  int k, experts, e_local, capacity;
  int64_t max_tokens, rows_out;
  DispatchLayout lay;
  const int32_t* expert;
  const int32_t* pos;
  const int32_t* cnt;
  const int32_t* slot;
  int64_t* route;
  int32_t* counts;
  int32_t* recv_counts;
  uint4* recv_x;
  uint64_t signature;
  int phase;           // DispatchArgs::Phase
  int32_t* segments;   // kLayout: [6 E_local] (DispatchArgs::segments), or null
  int32_t* segments3;  // kLayout: [6 E_local] (DispatchArgs::segments3), or null
};

constexpr int kPhaseWhole = 0, kPhaseLayout = 1, kPhaseSend = 2;
static_assert(kPhaseWhole == static_cast<int>(DispatchArgs::Phase::kWhole) &&
                  kPhaseLayout == static_cast<int>(DispatchArgs::Phase::kLayout) &&
                  kPhaseSend == static_cast<int>(DispatchArgs::Phase::kSend),
              "DispatchParams::phase carries DispatchArgs::Phase");

// Token item `item` (kTokensPerItem tokens): each thread loads its vector of every token, then
// stores it once per other rank the token goes to (slot u >= 0 there; own tokens: the expansion
// or the gathered GEMM reads them from x). s_slot: the CTA's [kTokensPerItem * W] slot buffer.
__device__ void send_token_item(const DispatchParams& p, int64_t item, int32_t* s_slot) {
  const GroupDevice& g = p.g;
  const int me = g.rank, W = g.world;
  const int64_t t0 = item * kTokensPerItem;
  const int nt = static_cast<int>(min(static_cast<int64_t>(kTokensPerItem), p.tokens - t0));
  for (int i = threadIdx.x; i < kTokensPerItem * W; i += kThreads) {
    s_slot[i] = i / W < nt ? __ldg(p.slot + (t0 + i / W) * W + i % W) : -1;
  }
  __syncthreads();
  for (int64_t v = threadIdx.x; v < p.n16; v += kThreads) {
    uint4 buf[kTokensPerItem];
#pragma unroll
    for (int i = 0; i < kTokensPerItem; ++i) {
      buf[i] = i < nt ? __ldg(p.x + (t0 + i) * p.n16 + v) : make_uint4(0, 0, 0, 0);
    }
    for (int d = 0; d < W; ++d) {
      if (d == me) continue;
      uint4* area = reinterpret_cast<uint4*>(g.data[d] + p.lay.tokens) +
                    static_cast<int64_t>(me) * p.max_tokens * p.n16 + v;
#pragma unroll
      for (int i = 0; i < kTokensPerItem; ++i) {
        const int32_t u = s_slot[i * W + d];
        if (u >= 0) area[static_cast<int64_t>(u) * p.n16] = buf[i];
      }
    }
  }
}

// The overlapped dispatch's second launch (DispatchArgs::Phase::kSend): this rank's tokens to
// the other ranks (each token once per destination), the arrival flag, the wait for every rank's.
// The first launch (kLayout) ran the entry barrier of the same call number and placed every
// row; the token items need no layout (slot[] comes from the routing).
__device__ void dispatch_send(const DispatchParams& p, uint64_t e) {
  __shared__ int32_t s_slot[kTokensPerItem * kMaxRanks];
  __shared__ int64_t s_item;
  const GroupDevice& g = p.g;
  const int64_t total = (p.tokens + kTokensPerItem - 1) / kTokensPerItem;
  if (blockIdx.x == 0) release_empty(g, total, kArrive, e);
  for (;;) {
    const int64_t item = claim_cta(g, kWorkAfter, e, &s_item);
    if (item >= total) break;
    send_token_item(p, item, s_slot);
    item_done(g, total, kArrive, e);
  }
  wait_all_ranks(g, kArrive, e, comm::kOpMoeDispatch, g.timeout_ns);
  __syncthreads();
  if (threadIdx.x == 0) comm::op_end(g, e);
}

__global__ void __launch_bounds__(kThreads, kCtasPerSm) dispatch_kernel(const DispatchParams p) {
  __shared__ int32_t s_keep[kMaxExperts];   // rows of expert g this rank keeps at its owner
  __shared__ int32_t s_start[kMaxExperts];  // first of them in the owner's layout
  __shared__ int32_t s_total[kMaxExperts];  // rows expert g holds from every source
  __shared__ int32_t s_slot[kTokensPerItem * kMaxRanks];  // a send item's tokens' slots
  __shared__ CopyItem s_copy;
  __shared__ int64_t s_item;
  const GroupDevice& g = p.g;
  const int me = g.rank, W = g.world, E = p.experts, El = p.e_local;
  const uint64_t e = comm::op_begin(g);
  if (p.phase == kPhaseSend) {
    dispatch_send(p, e);
    return;
  }
  // The first CTA to run publishes (none waits for a CTA that is not resident).
  const bool publisher = claim_cta(g, kWorkRole, e, &s_item) == 0;

  // 1. Counts to every rank (after the entry barrier: every rank finished its previous call).
  if (publisher) {
    if (threadIdx.x == 0) comm::entry_barrier(g, e, comm::kOpMoeDispatch, p.signature);
    __syncthreads();
    for (int d = 0; d < W; ++d) {
      auto* table = reinterpret_cast<int32_t*>(g.data[d] + p.lay.counts);
      for (int i = threadIdx.x; i < E; i += kThreads) table[me * E + i] = p.cnt[i];
    }
    __syncthreads();
    if (threadIdx.x == 0) {
      for (int d = 0; d < W; ++d) comm::signal(g, d, kCounts + me, e);
    }
  }
  // 2. Every rank's counts: this rank's rows at every owner, and the owners' layouts.
  wait_all_ranks(g, kCounts, e, comm::kOpMoeDispatch, after_entry_bound(g));
  const auto* table = reinterpret_cast<const int32_t*>(g.data[me] + p.lay.counts);
  for (int x = threadIdx.x; x < E; x += kThreads) {
    int32_t taken = 0, mine = 0, first = 0;
    for (int s = 0; s < W; ++s) {
      const int32_t want = __ldcg(table + s * E + x);
      const int32_t n = p.capacity > 0 ? min(want, max(p.capacity - taken, 0)) : want;
      if (s == me) mine = n, first = taken;
      taken += n;
    }
    s_keep[x] = mine;
    s_start[x] = first;
    s_total[x] = taken;
  }
  __syncthreads();
  for (int d = threadIdx.x; d < W; d += kThreads) {  // the owners' expert bases
    int32_t base = 0;
    for (int x = d * El; x < (d + 1) * El; ++x) {
      s_start[x] += p.capacity > 0 ? (x - d * El) * p.capacity : base;
      base += s_total[x];
    }
  }
  __syncthreads();

  // 3. Items: token blocks (each token once per destination rank), then choice blocks (routes
  //    and the owners' row maps); the CTA finishing the last one releases the arrival flag.
  //    The layout launch (kLayout) takes the choice blocks only; its second launch the tokens.
  const int64_t choices = p.tokens * p.k;
  const int64_t token_items =
      p.phase == kPhaseLayout ? 0 : (p.tokens + kTokensPerItem - 1) / kTokensPerItem;
  const int64_t total = token_items + (choices + kChoicesPerItem - 1) / kChoicesPerItem;
  if (publisher && p.phase != kPhaseLayout) release_empty(g, total, kArrive, e);
  for (;;) {
    const int64_t item = claim_cta(g, kWorkSend, e, &s_item);
    if (item >= total) break;
    if (item < token_items) {
      send_token_item(p, item, s_slot);
    } else {
      const int64_t c0 = (item - token_items) * kChoicesPerItem;
      const int64_t c1 = min(choices, c0 + kChoicesPerItem);
      for (int64_t i = c0 + threadIdx.x; i < c1; i += kThreads) {
        const int32_t x = p.expert[i];
        int64_t code = -1;
        if (x >= 0) {
          const int d = x / El;
          const int32_t n = p.pos[i];
          const int64_t row = static_cast<int64_t>(s_start[x]) + n;
          if (n < s_keep[x] && row < p.rows_out) {
            // A row from this rank's own token names the token itself (-1 - t): the
            // expansion reads it from x (own tokens are not sent to this rank's area).
            const int32_t slot =
                d == me ? -1 - static_cast<int32_t>(i / p.k)
                        : static_cast<int32_t>(me * p.max_tokens) + p.slot[(i / p.k) * W + d];
            reinterpret_cast<int32_t*>(g.data[d] + p.lay.row_map)[row] = slot;
            code = (static_cast<int64_t>(d) << 32) | row;
          }
        }
        p.route[i] = code;
      }
    }
    if (p.phase == kPhaseLayout) {
      __syncthreads();  // (the item's stores precede the kernel's end; no flag: kSend follows)
      continue;
    }
    item_done(g, total, kArrive, e);
  }

  // 4. Receive: every rank's rows, expanded into the expert layout. (kLayout: no wait — its
  //    counts and segments derive from the count table alone.)
  if (p.phase != kPhaseLayout) wait_all_ranks(g, kArrive, e, comm::kOpMoeDispatch, g.timeout_ns);
  // Rows of each local expert, and where they start. Packed rows past rows_out (only reachable
  // with an expert id repeated in a token's top-k: W * max_T * min(k, E_local) bounds distinct
  // ids) were dropped by their sources (route -1): the counts leave them out too, so the GEMM
  // never reads past recv_x.
  int32_t* s_count = s_keep;  // reused
  int32_t* s_base = s_start;  // reused: first row of local expert x
  __syncthreads();
  if (threadIdx.x == 0) {
    int64_t base = 0;
    for (int x = 0; x < El; ++x) {
      const int64_t n = s_total[me * El + x];
      s_base[x] =
          static_cast<int32_t>(p.capacity > 0 ? static_cast<int64_t>(x) * p.capacity : base);
      s_count[x] = static_cast<int32_t>(
          p.capacity > 0 ? n : min(base + n, p.rows_out) - min(base, p.rows_out));
      base += n;
    }
  }
  __syncthreads();
  if (publisher) {
    for (int x = threadIdx.x; x < W * El; x += kThreads) {
      const int s = x / El, le = x % El;
      int32_t taken = 0, n = 0;
      for (int q = 0; q <= s; ++q) {
        const int32_t want = __ldcg(table + q * E + me * El + le);
        n = p.capacity > 0 ? min(want, max(p.capacity - taken, 0)) : want;
        taken += n;
      }
      if (p.capacity == 0) {  // the part of source s's rows below rows_out
        const int64_t lo = static_cast<int64_t>(s_base[le]) + (taken - n);
        n = static_cast<int32_t>(min(lo + n, p.rows_out) - min(lo, p.rows_out));
      }
      p.recv_counts[x] = n;
    }
    for (int x = threadIdx.x; x < El; x += kThreads) p.counts[x] = s_count[x];
  }
  if (p.phase == kPhaseLayout) {
    // The two GEMMs' row segments of each local expert: this rank's own rows (the sources
    // before it come first in the expert's rows), and the rows from the ranks before / after
    // it — from recv_counts as just written (this CTA's own stores).
    if (publisher) {
      __syncthreads();
      for (int le = threadIdx.x; le < El; le += kThreads) {
        int32_t pre = 0;
        for (int q = 0; q < me; ++q) pre += p.recv_counts[q * El + le];
        const int32_t base = s_base[le], end = base + s_count[le];
        const int32_t own_b = min(base + pre, end);
        const int32_t own_e = min(own_b + p.recv_counts[me * El + le], end);
        if (p.segments != nullptr) {
          p.segments[le] = own_b;
          p.segments[El + le] = own_e;
          p.segments[2 * El + 2 * le] = base;
          p.segments[2 * El + 2 * le + 1] = own_e;
          p.segments[4 * El + 2 * le] = own_b;
          p.segments[4 * El + 2 * le + 1] = end;
        }
        if (p.segments3 != nullptr) {  // begin [3 E_l], then end [3 E_l]
          int32_t* b3 = p.segments3;
          int32_t* e3 = p.segments3 + 3 * El;
          b3[le] = own_b;
          e3[le] = own_e;
          b3[El + 2 * le] = base;
          e3[El + 2 * le] = own_b;
          b3[El + 2 * le + 1] = own_e;
          e3[El + 2 * le + 1] = end;
        }
      }
    }
    return;  // the call goes on in the kSend launch (same call number, no op_end here)
  }
  const auto* row_map = reinterpret_cast<const int32_t*>(g.data[me] + p.lay.row_map);
  const auto* area = reinterpret_cast<const uint4*>(g.data[me] + p.lay.tokens);
  // No recv_x: the grouped GEMM gathers each row where it landed (row_map, the token area, x).
  const int64_t rows = p.recv_x == nullptr ? 0 : row_space(s_count, El, p.capacity, p.rows_out);
  for (;;) {
    const int64_t item = claim_cta(g, kWorkAfter, e, &s_item);
    if (item * kRowsPerItem >= rows) break;
    if (threadIdx.x < kRowsPerItem) {
      const int64_t r = item * kRowsPerItem + threadIdx.x;
      const bool live = r < rows && row_live(s_count, p.capacity, r);
      const int32_t q = live ? __ldcg(row_map + r) : 0;
      s_copy.src[threadIdx.x] = !live   ? nullptr
                                : q < 0 ? p.x + static_cast<int64_t>(-1 - q) * p.n16
                                        : area + static_cast<int64_t>(q) * p.n16;
      s_copy.dst[threadIdx.x] = live ? p.recv_x + r * p.n16 : nullptr;
    }
    __syncthreads();
    copy_rows(s_copy, p.n16);
  }
  __syncthreads();
  if (threadIdx.x == 0) comm::op_end(g, e);
}

// --- combine ---------------------------------------------------------------------------------

// Whether layout row r came from this rank's own tokens: expert x's rows from this rank are
// [lo[x], lo[x] + n[x]) (absolute rows; sources in rank order within each expert, so lo is
// non-decreasing in x and the intervals are disjoint).
__device__ __forceinline__ bool own_row(const int32_t* lo, const int32_t* n, int e_local,
                                        int capacity, int64_t r) {
  int x;
  if (capacity > 0) {
    x = static_cast<int>(r / capacity);
  } else {                   // the last expert whose own rows start at or before r
    int a = 0, b = e_local;  // lo[a] <= r (or a == 0), lo[b] > r
    while (b - a > 1) {
      const int m = (a + b) / 2;
      if (lo[m] <= r)
        a = m;
      else
        b = m;
    }
    x = a;
  }
  return r >= lo[x] && r < static_cast<int64_t>(lo[x]) + n[x];
}

using comm::Elem;  // fp32 accumulation: one rounding rule for every reduction

// The entry of the combine-side kernels (combine, gather, scatter): the first CTA to run
// publishes (entry barrier, then kEntered at this rank) and every CTA waits for kEntered, so no
// peer still reads this rank's region for its previous call. Returns whether this CTA publishes.
__device__ __forceinline__ bool combine_entry(const GroupDevice& g, int me, uint64_t e,
                                              uint64_t signature, int64_t* s_item) {
  const bool publisher = claim_cta(g, kWorkRole, e, s_item) == 0;
  if (publisher && threadIdx.x == 0) {
    comm::entry_barrier(g, e, comm::kOpMoeCombine, signature);
    comm::signal(g, me, kEntered, e);
  }
  if (threadIdx.x == 0) {
    comm::wait_geq(g.flags[me] + kEntered, e, after_entry_bound(g), g.diag, g.group_id, me,
                   comm::WaitSite{comm::kOpMoeCombine, comm::kWaitEntry, me, kEntered});
  }
  __syncthreads();
  return publisher;
}

// A choice's route (dispatch: (owner rank << 32) | row in the owner's layout, or -1): its owner
// d and row; false when the choice was dropped or the code is not a route of this group's
// dispatch (it moves and adds nothing).
__device__ __forceinline__ bool route_of(int64_t code, int world, int64_t y_rows, int& d,
                                         int64_t& row) {
  d = static_cast<int>(code >> 32);
  row = code & 0xffffffffll;
  return code >= 0 && d < world && row < y_rows;
}

struct CombineParams {
  GroupDevice g;
  const uint4* y;
  int64_t y_rows, n16;
  int capacity, e_local;
  const int32_t* recv_counts;
  const int64_t* route;
  const float* weights;
  int64_t tokens;
  int k;
  uint4* out;
  uint64_t signature;
};

// kGather: _moe_gather instead of the sum: out [T*k] rows = each choice's row (zero when
// dropped), the same stage / pull protocol.
template <class T, bool kGather>
__global__ void __launch_bounds__(kThreads, kCtasPerSm) combine_kernel(const CombineParams p) {
  __shared__ int32_t s_count[kMaxExperts];
  __shared__ int32_t s_own_lo[kMaxExperts];  // rows of expert x from this rank: [lo, lo + n)
  __shared__ int32_t s_own_n[kMaxExperts];
  __shared__ CopyItem s_copy;
  __shared__ int64_t s_item;
  constexpr int kPer = 16 / sizeof(T);
  const GroupDevice& g = p.g;
  const int me = g.rank, W = g.world, El = p.e_local;
  const uint64_t e = comm::op_begin(g);
  const bool publisher = combine_entry(g, me, e, p.signature, &s_item);
  // Stage this rank's live rows into its own region (peers finished reading the last call's).
  for (int x = threadIdx.x; x < El; x += kThreads) {
    int32_t n = 0, before = 0, own = 0;
    for (int s = 0; s < W; ++s) {
      const int32_t c = p.recv_counts[s * El + x];
      before += s < me ? c : 0;
      own = s == me ? c : own;
      n += c;
    }
    s_count[x] = n;
    s_own_lo[x] = before;  // within the expert's rows (sources in order); made absolute below
    s_own_n[x] = own;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    int32_t base = 0;
    for (int x = 0; x < El; ++x) {
      s_own_lo[x] += p.capacity > 0 ? x * p.capacity : base;
      base += s_count[x];
    }
  }
  __syncthreads();
  auto* stage = reinterpret_cast<uint4*>(g.data[me]);
  const int64_t rows = row_space(s_count, El, p.capacity, p.y_rows);
  const int64_t total = (rows + kRowsPerItem - 1) / kRowsPerItem;
  if (publisher) release_empty(g, total, kStaged, e);
  for (;;) {
    const int64_t item = claim_cta(g, kWorkSend, e, &s_item);
    if (item >= total) break;
    if (threadIdx.x < kRowsPerItem) {
      // Only the rows peers read: this rank's own rows it reads from y itself (d == me below).
      const int64_t r = item * kRowsPerItem + threadIdx.x;
      const bool live = r < rows && row_live(s_count, p.capacity, r) &&
                        !own_row(s_own_lo, s_own_n, El, p.capacity, r);
      s_copy.src[threadIdx.x] = live ? p.y + r * p.n16 : nullptr;
      s_copy.dst[threadIdx.x] = live ? stage + r * p.n16 : nullptr;
    }
    __syncthreads();
    copy_rows(s_copy, p.n16);
    item_done(g, total, kStaged, e);
  }
  wait_all_ranks(g, kStaged, e, comm::kOpMoeCombine, g.timeout_ns);

  if constexpr (kGather) {
    // Each choice's row (zero when dropped), pulled from its owner.
    const int64_t choices = p.tokens * p.k;
    for (;;) {
      const int64_t item = claim_cta(g, kWorkAfter, e, &s_item);
      if (item * kRowsPerItem >= choices) break;
      if (threadIdx.x < kRowsPerItem) {
        const int64_t i = item * kRowsPerItem + threadIdx.x;
        const uint4* src = nullptr;  // dropped, or not a route of this group's dispatch: zeros
        if (i < choices) {
          int d;
          int64_t row;
          if (route_of(__ldg(p.route + i), W, p.y_rows, d, row)) {
            src = (d == me ? p.y : reinterpret_cast<const uint4*>(g.data[d])) + row * p.n16;
          }
        }
        s_copy.src[threadIdx.x] = src;
        s_copy.dst[threadIdx.x] = i < choices ? p.out + i * p.n16 : nullptr;
      }
      __syncthreads();
      copy_rows(s_copy, p.n16);
    }
  } else {
    // Pull and sum, each token's choices in order (fp32; product and sum rounded separately,
    // as the host reference's weighted sum).
    for (;;) {
      const int64_t item = claim_cta(g, kWorkAfter, e, &s_item);
      if (item * kTokensPerItem >= p.tokens) break;
      const int64_t t1 = min(p.tokens, (item + 1) * kTokensPerItem);
      for (int64_t t = item * kTokensPerItem; t < t1; ++t) {
        for (int64_t v = threadIdx.x; v < p.n16; v += kThreads) {
          float acc[kPer];
#pragma unroll
          for (int i = 0; i < kPer; ++i) acc[i] = 0.f;
          // kBatch choices' loads in flight before their adds (in choice order): the peer
          // reads' latency overlaps instead of serialising.
          constexpr int kBatch = 4;
          for (int j0 = 0; j0 < p.k; j0 += kBatch) {
            uint4 raw[kBatch];
            float w[kBatch];
            uint32_t loaded = 0;  // bit u: choice j0 + u was loaded
#pragma unroll
            for (int u = 0; u < kBatch; ++u) {
              const int j = j0 + u;
              w[u] = 0.f;
              raw[u] = make_uint4(0, 0, 0, 0);
              if (j >= p.k) continue;
              int d;
              int64_t row;
              // Dropped, or not a route of this group's dispatch: adds nothing.
              if (!route_of(__ldg(p.route + t * p.k + j), W, p.y_rows, d, row)) continue;
              loaded |= 1u << u;
              w[u] = __ldg(p.weights + t * p.k + j);
              raw[u] = d == me
                           ? __ldg(p.y + row * p.n16 + v)
                           : __ldcg(reinterpret_cast<const uint4*>(g.data[d]) + row * p.n16 + v);
            }
#pragma unroll
            for (int u = 0; u < kBatch; ++u) {
              if (!(loaded & (1u << u))) continue;  // dropped or past k: adds nothing
              const T* val = reinterpret_cast<const T*>(&raw[u]);
#pragma unroll
              for (int i = 0; i < kPer; ++i) {
                acc[i] = __fadd_rn(acc[i], __fmul_rn(Elem<T>::load(val[i]), w[u]));
              }
            }
          }
          uint4 packed;
          T* o = reinterpret_cast<T*>(&packed);
#pragma unroll
          for (int i = 0; i < kPer; ++i) o[i] = Elem<T>::store(acc[i]);
          p.out[t * p.n16 + v] = packed;
        }
      }
    }
  }
  __syncthreads();
  if (threadIdx.x == 0) comm::op_end(g, e);
}

// --- scatter (_moe_scatter) -----------------------------------------------------------------

// rows [T*k] of this rank's choices pushed into their owners' regions at the rows their routes
// name; then every rank writes its out in y's layout: the rows it received, zero elsewhere.
__global__ void __launch_bounds__(kThreads, kCtasPerSm) scatter_kernel(const CombineParams p) {
  __shared__ int32_t s_count[kMaxExperts];
  __shared__ CopyItem s_copy;
  __shared__ int64_t s_item;
  const GroupDevice& g = p.g;
  const int me = g.rank, W = g.world, El = p.e_local;
  const uint64_t e = comm::op_begin(g);
  const bool publisher = combine_entry(g, me, e, p.signature, &s_item);
  const int64_t choices = p.tokens * p.k;
  const int64_t total = (choices + kRowsPerItem - 1) / kRowsPerItem;
  if (publisher) release_empty(g, total, kArrive, e);
  for (;;) {
    const int64_t item = claim_cta(g, kWorkSend, e, &s_item);
    if (item >= total) break;
    if (threadIdx.x < kRowsPerItem) {
      const int64_t i = item * kRowsPerItem + threadIdx.x;
      uint4* dst = nullptr;  // dropped (or past the choices): nothing to push
      if (i < choices) {
        const int64_t code = __ldg(p.route + i);
        const int d = static_cast<int>(code >> 32);
        const int64_t row = code & 0xffffffffll;
        if (code >= 0 && d < W && row < p.y_rows) {
          dst = reinterpret_cast<uint4*>(g.data[d]) + row * p.n16;
        }
      }
      s_copy.src[threadIdx.x] = dst != nullptr ? p.y + i * p.n16 : nullptr;
      s_copy.dst[threadIdx.x] = dst;
    }
    __syncthreads();
    copy_rows(s_copy, p.n16);
    item_done(g, total, kArrive, e);
  }
  wait_all_ranks(g, kArrive, e, comm::kOpMoeCombine, g.timeout_ns);
  for (int x = threadIdx.x; x < El; x += kThreads) {
    int32_t n = 0;
    for (int s = 0; s < W; ++s) n += p.recv_counts[s * El + x];
    s_count[x] = n;
  }
  __syncthreads();
  const int64_t live_rows = row_space(s_count, El, 0, p.y_rows);  // packed: [0, live_rows)
  const auto* stage = reinterpret_cast<const uint4*>(g.data[me]);
  for (;;) {
    const int64_t item = claim_cta(g, kWorkAfter, e, &s_item);
    if (item * kRowsPerItem >= p.y_rows) break;
    if (threadIdx.x < kRowsPerItem) {  // every row of out: the received one, or zeros
      const int64_t r = item * kRowsPerItem + threadIdx.x;
      const bool live =
          r < p.y_rows && (p.capacity > 0 ? row_live(s_count, p.capacity, r) : r < live_rows);
      s_copy.src[threadIdx.x] = live ? stage + r * p.n16 : nullptr;
      s_copy.dst[threadIdx.x] = r < p.y_rows ? p.out + r * p.n16 : nullptr;
    }
    __syncthreads();
    copy_rows(s_copy, p.n16);
  }
  __syncthreads();
  if (threadIdx.x == 0) comm::op_end(g, e);
}

// --- launch ----------------------------------------------------------------------------------

// The grid for `kernel`: kCtasPerSm CTAs per SM as this process sees the device (its MPS
// share; fewer if they do not fit), cached per (device, kernel): two CTAs of an SM keep twice
// the copies' loads in flight. Nothing depends on every CTA being resident: the work goes to
// the CTAs that run (claim), the publisher is the first CTA to run, and a CTA scheduled late
// finds every flag set and no item left. (Device runs 2 and 3 ran an earlier version whose
// grid barrier needed all of two CTAs per SM resident, and failed after exactly the op
// timeout: under MPS the ranks' grids may share SMs.)
cudaError_t resident_ctas(const void* kernel, int* out) {
  return comm::resident_grid(kernel, kThreads, kCtasPerSm, out);
}

bool group_ok(const GroupDevice& g, const char** reason) {
  if (g.world < 1 || g.world > kMaxRanks || g.rank < 0 || g.rank >= g.world ||
      g.flags[g.rank] == nullptr || g.epoch == nullptr || g.exit_ticket == nullptr) {
    if (reason) *reason = "the group's device view is not set up";
    return false;
  }
  for (int r = 0; r < g.world; ++r) {
    if (g.data[r] == nullptr || g.flags[r] == nullptr) {
      if (reason) *reason = "a rank of the group lives on another node (no peer mapping)";
      return false;
    }
  }
  return true;
}

}  // namespace

DispatchLayout dispatch_layout(int world, int experts, int64_t max_tokens, int64_t rows_out,
                               int64_t row_bytes) {
  DispatchLayout l;
  l.counts = 0;
  l.row_map = align256(static_cast<uint64_t>(world) * experts * sizeof(int32_t));
  l.tokens = l.row_map + align256(static_cast<uint64_t>(rows_out) * sizeof(int32_t));
  l.total = l.tokens + static_cast<uint64_t>(world) * max_tokens * row_bytes;
  return l;
}

uint64_t combine_bytes(int64_t y_rows, int64_t row_bytes) {
  return static_cast<uint64_t>(y_rows) * row_bytes;
}

cudaError_t dispatch(const DispatchArgs& a, const char** reason) {
  const GroupDevice& g = a.group;
  if (!group_ok(g, reason)) return cudaErrorInvalidValue;
  if (a.experts < 1 || a.experts > kMaxExperts || a.experts % g.world != 0 || a.k < 1 ||
      a.row_bytes % 16 != 0 || a.max_tokens < a.tokens ||
      a.max_tokens * g.world >= (int64_t{1} << 31) || a.rows_out >= (int64_t{1} << 31)) {
    if (reason) *reason = "bad dispatch arguments (experts, k, row bytes or sizes)";
    return cudaErrorInvalidValue;
  }
  if ((reinterpret_cast<uintptr_t>(a.x) | reinterpret_cast<uintptr_t>(a.recv_x)) % 16 != 0) {
    if (reason) *reason = "x and recv_x must be 16-byte aligned";
    return cudaErrorInvalidValue;
  }
  DispatchParams p;
  p.g = g;
  p.x = static_cast<const uint4*>(a.x);
  p.tokens = a.tokens;
  p.n16 = a.row_bytes / 16;
  p.k = a.k;
  p.experts = a.experts;
  p.e_local = a.experts / g.world;
  p.capacity = a.capacity;
  p.max_tokens = a.max_tokens;
  p.rows_out = a.rows_out;
  p.lay = dispatch_layout(g.world, a.experts, a.max_tokens, a.rows_out, a.row_bytes);
  if (g.data_bytes < p.lay.total) {
    if (reason) *reason = "the group's symmetric memory is smaller than the dispatch needs";
    return cudaErrorInvalidValue;
  }
  p.expert = a.expert;
  p.pos = a.pos;
  p.cnt = a.cnt;
  p.slot = a.slot;
  p.route = a.route;
  p.counts = a.counts;
  p.recv_counts = a.recv_counts;
  p.recv_x = static_cast<uint4*>(a.recv_x);
  p.signature = a.signature;
  p.phase = static_cast<int>(a.phase);
  p.segments = a.segments;
  p.segments3 = a.segments3;
  if (a.phase != DispatchArgs::Phase::kWhole &&
      (a.capacity != 0 || a.recv_x != nullptr ||
       (a.phase == DispatchArgs::Phase::kLayout && a.segments == nullptr &&
        a.segments3 == nullptr))) {
    if (reason)
      *reason = "the two-launch dispatch runs at capacity 0 without recv_x (segments set)";
    return cudaErrorInvalidValue;
  }
  const void* kernel = reinterpret_cast<const void*>(&dispatch_kernel);
  int ctas = 0;
  cudaError_t err = resident_ctas(kernel, &ctas);
  if (err != cudaSuccess) return err;
  if (a.max_ctas > 0) ctas = std::min(ctas, a.max_ctas);
  void* args[] = {&p};
  return cudaLaunchKernel(kernel, dim3(std::max(ctas, 1)), dim3(kThreads), args, 0, a.stream);
}

namespace {

enum class Move { kCombine, kGather, kScatter };

cudaError_t launch_move(Move mode, const CombineArgs& a, const char** reason) {
  const GroupDevice& g = a.group;
  if (!group_ok(g, reason)) return cudaErrorInvalidValue;
  const int esize = a.dtype == DType::kFP32 ? 4 : 2;
  const int64_t row_bytes = a.hidden * esize;
  if (a.e_local < 1 || a.e_local > kMaxExperts || a.k < 1 || row_bytes % 16 != 0 ||
      (a.capacity > 0 && a.y_rows != static_cast<int64_t>(a.e_local) * a.capacity)) {
    if (reason) *reason = "bad arguments (E_local, k, row bytes or capacity rows)";
    return cudaErrorInvalidValue;
  }
  if ((reinterpret_cast<uintptr_t>(a.y) | reinterpret_cast<uintptr_t>(a.out)) % 16 != 0) {
    if (reason) *reason = "the rows and out must be 16-byte aligned";
    return cudaErrorInvalidValue;
  }
  if (g.data_bytes < combine_bytes(a.y_rows, row_bytes)) {
    if (reason) *reason = "the group's symmetric memory is smaller than the call needs";
    return cudaErrorInvalidValue;
  }
  CombineParams p;
  p.g = g;
  p.y = static_cast<const uint4*>(a.y);
  p.y_rows = a.y_rows;
  p.n16 = row_bytes / 16;
  p.capacity = a.capacity;
  p.e_local = a.e_local;
  p.recv_counts = a.recv_counts;
  p.route = a.route;
  p.weights = a.weights;
  p.tokens = a.tokens;
  p.k = a.k;
  p.out = static_cast<uint4*>(a.out);
  p.signature = a.signature;
  const void* kernel = nullptr;
  if (mode == Move::kScatter) {
    kernel = reinterpret_cast<const void*>(&scatter_kernel);
  } else if (mode == Move::kGather) {
    kernel = reinterpret_cast<const void*>(&combine_kernel<__nv_bfloat16, true>);
  } else {
    switch (a.dtype) {
      case DType::kBF16:
        kernel = reinterpret_cast<const void*>(&combine_kernel<__nv_bfloat16, false>);
        break;
      case DType::kFP16:
        kernel = reinterpret_cast<const void*>(&combine_kernel<__half, false>);
        break;
      case DType::kFP32:
        kernel = reinterpret_cast<const void*>(&combine_kernel<float, false>);
        break;
    }
  }
  int ctas = 0;
  cudaError_t err = resident_ctas(kernel, &ctas);
  if (err != cudaSuccess) return err;
  void* args[] = {&p};
  return cudaLaunchKernel(kernel, dim3(std::max(ctas, 1)), dim3(kThreads), args, 0, a.stream);
}

}  // namespace

cudaError_t combine(const CombineArgs& a, const char** reason) {
  return launch_move(Move::kCombine, a, reason);
}
cudaError_t gather(const CombineArgs& a, const char** reason) {
  return launch_move(Move::kGather, a, reason);
}
cudaError_t scatter(const CombineArgs& a, const char** reason) {
  return launch_move(Move::kScatter, a, reason);
}

}  // namespace mkernel::moe_ep
