// mkernel.ring_attention: attention over a sequence sharded across the ranks (context
// parallelism): the K/V shards circulate around the ring while each rank attends its local
// queries to them.
//
//   q [b, s, h, d], k and v [b, s_kv, h_kv, d] (local sequence shards; h % h_kv == 0, GQA)
//     ->  out [b, s, h, d] in q's dtype, lse [b, h, s] fp32 (log-sum-exp of the scores)
//
// Holds the op's validator and its Meta, CPU-reference and CUDA kernels.
#include <ATen/ATen.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/library.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include <cmath>
#include <limits>
#include <optional>
#include <string>
#include <tuple>
#include <utility>

#include "attention_backward.h"
#include "attention_reference.h"
#include "env_knobs.h"
#include "host_reference.h"
#include "ops_validation.h"

#ifdef MKERNEL_WITH_CUDA
#include <ATen/cuda/CUDAContext.h>
#include <ATen/cuda/CUDAEvent.h>
#include <c10/cuda/CUDAGuard.h>

#include "comm/symmetric_group.h"
#include "kernels/attention/attention_api.h"
#include "kernels/ring_attention/ring_kv_api.h"
#endif  // MKERNEL_WITH_CUDA

namespace mkernel {
namespace {
constexpr const char* kOp = "mkernel.ring_attention";
}  // namespace

RingAttentionSizes validate_ring_attention(const at::Tensor& q, const at::Tensor& k,
                                           const at::Tensor& v, int64_t group, int64_t world_size,
                                           std::optional<double> softmax_scale) {
  using namespace validation;
  check_group(kOp, group, world_size);
  check_attention_operands(kOp, q, k, v, softmax_scale);
  return {q.sym_size(0), q.sym_size(1), q.sym_size(2), q.sym_size(3)};
}

namespace {

std::tuple<at::Tensor, at::Tensor> ring_attention_meta(const at::Tensor& q, const at::Tensor& k,
                                                       const at::Tensor& v, int64_t group,
                                                       int64_t world_size, bool /*causal*/,
                                                       std::optional<double> softmax_scale) {
  const RingAttentionSizes sizes =
      validate_ring_attention(q, k, v, group, world_size, softmax_scale);
  at::Tensor out = q.new_empty_symint({sizes.batch, sizes.seq, sizes.heads, sizes.head_dim});
  at::Tensor lse =
      q.new_empty_symint({sizes.batch, sizes.heads, sizes.seq}, q.options().dtype(at::kFloat));
  return {out, lse};
}

// Global sequence positions of a rank's local shard of length s. Causal ring attention uses
// the zigzag (load-balanced) layout: the global sequence (W * s tokens) is cut into 2W chunks
// of s / 2, and rank r holds chunks r and 2W - 1 - r, in that order (so every rank has the
// same causal work). At W = 1 it is the natural order.
at::Tensor zigzag_positions(int64_t s, int rank, int world, const at::TensorOptions& opts) {
  const int64_t c = s / 2;
  const at::Tensor i = at::arange(c, opts.dtype(at::kLong));
  return at::cat({i + rank * c, i + (2 * world - 1 - rank) * c});
}

// The host reference at world_size > 1 (protocol: host_reference.h): every rank sends its k
// and v shards to every peer (phase A), then attends its queries to the whole sequence in
// fp32, keys ordered by rank (and, causal, masked by zigzag positions).
std::tuple<at::Tensor, at::Tensor> ring_attention_host(const at::Tensor& q, const at::Tensor& k,
                                                       const at::Tensor& v, int64_t group,
                                                       int64_t world_size, bool causal,
                                                       double scale) {
  const int64_t b = q.size(0), s = q.size(1), s_kv = k.size(1), h_kv = k.size(2), d = k.size(3);
  host::Call call(kOp, group, world_size);
  const int rank = call.rank(), world = call.world();
  const uint64_t kv_bytes = static_cast<uint64_t>(k.numel()) * k.element_size();
  host::CallInfo info{host::OpKind::kRingAttention,
                      q.scalar_type(),
                      {b, s_kv, h_kv, d},
                      0b1111u,
                      {"b", "s_kv (the local k/v shard length)", "h_kv", "d"},
                      world * 2 * kv_bytes,
                      2 * kv_bytes};
  call.begin(info);
  std::vector<uint8_t*> staged;
  for (int j = 1; j < world; ++j) {  // rank + 1 first: the first sends go to distinct peers
    const int peer = (rank + j) % world;
    uint8_t* stage = call.send_area(peer);
    if (std::find(staged.begin(), staged.end(), stage) == staged.end()) {
      std::memcpy(stage, k.data_ptr(), kv_bytes);
      std::memcpy(stage + kv_bytes, v.data_ptr(), kv_bytes);
      staged.push_back(stage);
    }
    call.send(peer, 0, rank * 2 * kv_bytes, 2 * kv_bytes, host::Arrival::kPhaseA);
  }
  std::vector<at::Tensor> ks, vs;
  for (int r = 0; r < world; ++r) {
    if (r == rank) {
      ks.push_back(k);
      vs.push_back(v);
      continue;
    }
    call.wait(r, host::Arrival::kPhaseA, "the k/v shard");
    uint8_t* at_r = call.recv_area(r) + r * 2 * kv_bytes;
    ks.push_back(at::from_blob(at_r, k.sizes(), k.options()).clone());
    vs.push_back(at::from_blob(at_r + kv_bytes, v.sizes(), v.options()).clone());
  }
  call.end();
  const at::Tensor k_all = at::cat(ks, 1), v_all = at::cat(vs, 1);
  at::Tensor q_pos, k_pos;
  if (causal) {
    const auto opts = q.options();
    q_pos = zigzag_positions(s, rank, world, opts);
    std::vector<at::Tensor> pos;
    for (int r = 0; r < world; ++r) pos.push_back(zigzag_positions(s_kv, r, world, opts));
    k_pos = at::cat(pos);
  } else {
    q_pos = at::zeros({s}, q.options().dtype(at::kLong));
    k_pos = at::zeros({world * s_kv}, q.options().dtype(at::kLong));
  }
  return reference_attention(q, k_all, v_all, causal, scale, q_pos, k_pos);
}

std::tuple<at::Tensor, at::Tensor> ring_attention_cpu(const at::Tensor& q, const at::Tensor& k,
                                                      const at::Tensor& v, int64_t group,
                                                      int64_t world_size, bool causal,
                                                      std::optional<double> softmax_scale) {
  validate_ring_attention(q, k, v, group, world_size, softmax_scale);
  if (causal && world_size > 1) {
    TORCH_CHECK_VALUE(q.size(1) == k.size(1) && q.size(1) % 2 == 0, kOp,
                      ": causal ring attention takes zigzag shards: q and k must have the same "
                      "even local length (q: ", q.sizes(), ", k: ", k.sizes(), ")");
  }
  const double scale = softmax_scale.has_value() ? *softmax_scale
                                                 : 1.0 / std::sqrt(static_cast<double>(q.size(3)));
  if (world_size == 1) {
    const auto pos = q.options().dtype(at::kLong);
    return reference_attention(q, k, v, causal, scale, at::arange(q.size(1), pos),
                               at::arange(k.size(1), pos));
  }
  return ring_attention_host(q, k, v, group, world_size, causal, scale);
}

// --- the compute-alone ceiling of the ring (benchmarks/bench_ring_attention.py) ---------------
//
// mkernel.ring_attention_compute_alone(q, k_ring, v_ring, rank, world_size, causal): rank's
// attention for its (zigzag, when causal) shard q [b, s, h, d] over the whole sequence, whose
// W K/V shards the caller already holds locally, in ring order: k_ring, v_ring
// [b, W * s_kv, h_kv, d], rows [p * s_kv, (p + 1) * s_kv) = rank (rank + 1 + p) mod W's shard
// (the own shard last: the layout of the whole-sequence mode's virtual K/V). The same result as
// ring_attention on that rank, with no communication: on CUDA the whole mode's own engine
// launch — the same kernel (hook policy, mainloop, tile, zigzag mode, claimed tiles) on the
// rank's whole SM share, its KV flags released before the launch, no send, no forwarding, no
// own-shard copy, no entry or exit barrier. The ring's time over this one's, every rank running
// it at once, is what its communication and overlap cost (the bench's "ceiling").
constexpr const char* kOpAlone = "mkernel.ring_attention_compute_alone";

void validate_compute_alone(const at::Tensor& q, const at::Tensor& k_ring,
                            const at::Tensor& v_ring, int64_t rank, int64_t world_size,
                            bool causal, std::optional<double> softmax_scale) {
  validation::check_attention_operands(kOpAlone, q, k_ring, v_ring, softmax_scale);
  TORCH_CHECK_VALUE(world_size >= 1 && rank >= 0 && rank < world_size, kOpAlone,
                    ": rank must be in [0, world_size), got rank ", rank, ", world_size ",
                    world_size);
  TORCH_CHECK_VALUE(k_ring.size(1) % world_size == 0 && k_ring.size(1) > 0, kOpAlone,
                    ": k_ring must hold world_size shards of equal length (k_ring: ",
                    k_ring.sizes(), ", world_size ", world_size, ")");
  if (causal) {
    TORCH_CHECK_VALUE(k_ring.size(1) == world_size * q.size(1) && q.size(1) % 2 == 0, kOpAlone,
                      ": causal takes zigzag shards: k_ring must hold world_size shards of q's "
                      "(even) length (q: ", q.sizes(), ", k_ring: ", k_ring.sizes(), ")");
  }
}

std::tuple<at::Tensor, at::Tensor> compute_alone_meta(const at::Tensor& q, const at::Tensor& k_ring,
                                                      const at::Tensor& v_ring, int64_t rank,
                                                      int64_t world_size, bool causal,
                                                      std::optional<double> softmax_scale) {
  validate_compute_alone(q, k_ring, v_ring, rank, world_size, causal, softmax_scale);
  at::Tensor out = at::empty_like(q);
  at::Tensor lse = at::empty({q.size(0), q.size(2), q.size(1)}, q.options().dtype(at::kFloat));
  return {out, lse};
}

// The fp32 reference: keys in ring order at their global (zigzag) positions.
std::tuple<at::Tensor, at::Tensor> compute_alone_cpu(const at::Tensor& q, const at::Tensor& k_ring,
                                                     const at::Tensor& v_ring, int64_t rank,
                                                     int64_t world_size, bool causal,
                                                     std::optional<double> softmax_scale) {
  validate_compute_alone(q, k_ring, v_ring, rank, world_size, causal, softmax_scale);
  const double scale = softmax_scale.has_value() ? *softmax_scale
                                                 : 1.0 / std::sqrt(static_cast<double>(q.size(3)));
  const int world = static_cast<int>(world_size), r = static_cast<int>(rank);
  const int64_t s = q.size(1), s_kv = k_ring.size(1) / world;
  const auto opts = q.options().dtype(at::kLong);
  at::Tensor q_pos, k_pos;
  if (causal) {
    q_pos = zigzag_positions(s, r, world, opts);
    std::vector<at::Tensor> pos;
    for (int p = 0; p < world; ++p) pos.push_back(zigzag_positions(s_kv, (r + 1 + p) % world, world, opts));
    k_pos = at::cat(pos);
  } else {
    q_pos = at::zeros({s}, opts);
    k_pos = at::zeros({k_ring.size(1)}, opts);
  }
  return reference_attention(q, k_ring, v_ring, causal, scale, q_pos, k_pos);
}

#ifdef MKERNEL_WITH_CUDA
// --- the CUDA ring (W > 1, one node) ----------------------------------------------------------
//
// A first step towards the one persistent kernel per call of issue 13: per ring step one
// launch of the attention engine (hooked: it waits for each key chunk's arrival flag before
// the chunk's TMA loads) and one fp32 merge on the caller's stream, while a side stream sends
// the shard of that step to the next rank (kernels/ring_attention/ring_kv_api.h: double-
// buffered symmetric memory, per-chunk epoch-valued flags, credits, bounded waits).
//
// Causal (zigzag shards: rank r holds global chunks r and 2W-1-r of 2W, each c = s/2 long),
// the work of step j with the shard of src = (r - j) mod W:
//   j = 0     : the local shard, causal (positions increase along the shard);
//   src < r   : every query sees the first half of src's shard (chunk src < r), none of its
//               second half (chunk 2W-1-src > 2W-1-r >= ... > r) -> q x kv[:c], non-causal;
//   src > r   : only the second query half (chunk 2W-1-r) sees anything, and it sees all of
//               src's shard -> q[c:] x kv, non-causal, merged into rows [c, s).
// Every rank does the same work per step (the layout's load balance).

// CTAs of the send kernels: they share the rank's SMs with the engine (the whole-sequence mode
// keeps them free of engine CTAs). Two move >= 100 GB/s; a shard must move in one step's
// compute time, which needs ~20 GB/s at s = 4096 (MHA, d = 128), less with GQA.
constexpr int kSendCtas = 2;

// How the whole-sequence mode moves the K/V to the next rank: inside the engine (an idle
// producer warp per CTA, attention/kv_forward_hooks.cuh; no kernel and no SMs of its own) or
// by the send kernel on a side stream with `send_ctas` CTAs (the engine's grid leaves them
// free). Either way the same bytes land in the same places under the same flags, so ranks may
// differ.
struct WholeSend {
  bool in_engine = false;
  int send_ctas = 0;
};
// Default: inside the engine wherever the forwarding policy's kernel is the engine's own tile
// (bf16, 128x128: d = 128, and d = 64 except non-causal with >= 2048 queries, whose 192x128 tile
// is 11-17% faster), else the send kernel with kSendCtas CTAs. Measured (W = 2 under MPS,
// benchmarks/NOTES.md, session 8 runs 1 and 2): the send kernel beside the engine gets SMs only
// where the hardware places it first (run 1, GQA: 0.94-1.27x the unfused ring); with claimed
// tiles, forwarding inside the engine was the fastest path or within 1.5% of it at every bench
// shape of run 2 (1.34-1.84x the unfused ring; 1.9x run 1's default path at GQA, 2-6% at MHA).
// Pins (tests and benchmarks; ranks may differ): MKERNEL_RING_SEND=engine (bf16; else the send
// kernel) or =kernel, MKERNEL_RING_SEND_CTAS=1..16 (the send kernel with that many CTAs),
// MKERNEL_RING_SEND_FIRST=1 (the send kernel, the engine started once its CTAs run).
// MKERNEL_RING_BLOCK_N=144 (opt-in until measured on whole GPUs; every rank the same value): the
// whole mode's non-causal bf16 d=128 engine on the plain engine's 128x144 tile (attention_api.h
// HookArgs::keys_per_flag: flags by keys, a block may wait for two), with the send kernel (the
// forwarding policy is built for 128x128 only). Session 25 (ring_hooked_gap.py, one H200): the
// plain 128x144 kernel 5-8 % ahead of the 128x128 one the hooked ring runs.
bool ring_wide_tile(const at::Tensor& q, bool causal) {
  const char* value = env::get("MKERNEL_RING_BLOCK_N");
  return value != nullptr && std::strcmp(value, "144") == 0 && !causal &&
         q.scalar_type() == at::kBFloat16 && q.size(3) == 128;
}

WholeSend whole_send(const at::Tensor& q, bool causal) {
  if (ring_wide_tile(q, causal)) return {false, kSendCtas};  // no forwarding policy on 128x144
  const bool bf16 = q.scalar_type() == at::kBFloat16;
  const char* ctas = env::get("MKERNEL_RING_SEND_CTAS");
  const int n = ctas != nullptr ? std::atoi(ctas) : 0;
  if (n >= 1 && n <= 16) return {false, n};
  const char* how = env::get("MKERNEL_RING_SEND");
  const char* first = env::get("MKERNEL_RING_SEND_FIRST");  // a send-kernel knob
  if ((how != nullptr && std::strcmp(how, "kernel") == 0) ||
      (first != nullptr && std::strcmp(first, "1") == 0))
    return {false, kSendCtas};
  if (how != nullptr && std::strcmp(how, "engine") == 0) return {bf16, bf16 ? 0 : kSendCtas};
  const int d = static_cast<int>(q.size(3));
  const bool own_tile = attention::block_m(d, causal, static_cast<int>(q.size(1))) == 128;
  if (bf16 && own_tile) return {true, 0};
  return {false, kSendCtas};
}

// Claimed tiles (attention/tile_handoff.cuh) in the whole mode's engine: the CTAs take tiles
// from a per-call counter, so a CTA that starts late (under MPS the ranks' kernels overlap on
// SMs) finds only what is left instead of running a static list after the others. Pin
// MKERNEL_RING_TILES=static for the static order (benchmarks; ranks may differ).
bool whole_claims_tiles() {
  const char* value = env::get("MKERNEL_RING_TILES");
  return value == nullptr || std::strcmp(value, "static") != 0;
}

// MKERNEL_RING_SPLIT_MASK=1 (opt-in until a GPU run measures it; ranks may differ): the causal
// engine kernels run their masked (diagonal) and wholly visible KV blocks in two loops
// (attention_api.h HookArgs::split_masked; the same result bit for bit).
bool ring_split_masked() {
  const char* value = env::get("MKERNEL_RING_SPLIT_MASK");
  return value != nullptr && std::strcmp(value, "1") == 0;
}

// On by default since s11run1 (MKERNEL_RING_FLAG_SKIP=0 turns it off; ranks may differ): the
// hooked engine's load lane acquires a KV flag only for the first block of each flag in a tile's
// walk (attention_api.h HookArgs::skip_seen_flags; the blocks below it in the same flag were
// released together), instead of one system-scope acquire + proxy fence per block. Measured
// (W=2, bench_ring_attention): 6-14% faster fused calls on all 6 shapes, the same bits.
bool ring_flag_skip() {
  const char* value = env::get("MKERNEL_RING_FLAG_SKIP");
  return value == nullptr || std::strcmp(value, "0") != 0;
}

// The ring's KV-wait options of the hooked engine (every launch: whole mode, its ceiling, the
// per-step ring; ranks may differ, the same data loaded either way):
//  - split_masked, skip_seen_flags: above;
//  - remember_flags (MKERNEL_RING_FLAG_CACHE=0 turns it off): the load lane acquires each flag
//    once per launch instead of once per tile (attention_hooks.cuh SeenFlags). Session 25
//    (ring_hooked_gap.py, one H200, no communication): 1-4 % faster hooked launches;
//  - late_claim (MKERNEL_RING_LATE_CLAIM=0 turns it off): with claimed tiles a CTA claims its
//    next tile once its load lane issued the current tile's last load, as the plain engine's
//    claimed variants do, instead of when its consumers start the current one. Session 25, same
//    script: causal 4-5 % faster at the 4k / 8k-key rows, the 12k rows 1.5-4 % slower.
void set_ring_wait_options(attention::HookArgs& hooks) {
  hooks.split_masked = ring_split_masked();
  hooks.skip_seen_flags = ring_flag_skip();
  const char* cache = env::get("MKERNEL_RING_FLAG_CACHE");
  hooks.remember_flags = cache == nullptr || std::strcmp(cache, "0") != 0;
  const char* late = env::get("MKERNEL_RING_LATE_CLAIM");
  hooks.late_claim = late == nullptr || std::strcmp(late, "0") != 0;
}

// The own-shard-first split of the whole mode's engine (attention_api.h
// HookArgs::phase_split_keys): every query tile's keys of the rank's own shard (the top of the
// walk) as a first item, claimed for all tiles before any tile's peer keys. Without it the first
// wave of tiles waits for the first peer chunks of its batch — across nodes the inter-node
// transfer of a whole batch (session 32: every row the ceiling plus the all-gather at batch 1).
// The same output bit for bit; costs a workspace of ~(d + 8) floats per query row and head.
// Default: on across nodes; inside a node on where the rank's shard has at most
// kOwnFirstMaxKeysInNode keys; MKERNEL_RING_OWN_FIRST=1 on everywhere, =0 off (ranks may
// differ). Not with the 128x144 tile (the split must be whole key blocks of 144). By default
// not where the workspace would pass kOwnFirstMaxBytes (~2.1x the bf16 output: 0.43 GB at the
// seed's s12k rows): the split's gain is the first wave's wait, one chunk's transfer, a
// shrinking share of a call as the sequence grows, while the workspace grows with it.
// Inside a node (H100, MPS, bench_ring_attention own1; sessions 33-34): shards of 4096 and
// 8192 keys 1.01-1.08x the unsplit engine at W = 4 in two 20-iteration runs (per-rank spread
// under 3 %; the shorter runs, spread wider, read 0.78-1.11x) and 1.01-1.06x at W = 2 (three
// runs); the seed's 12288-key shards 0.97-1.01x (W = 2, three runs).
constexpr int64_t kOwnFirstMaxBytes = int64_t{2} << 30;
constexpr int64_t kOwnFirstMaxKeysInNode = 8192;
bool ring_own_first(bool nodes, const attention::Problem& p, const at::Tensor& q, bool causal,
                    int64_t shard_keys) {
  if (ring_wide_tile(q, causal)) return false;
  const char* value = env::get("MKERNEL_RING_OWN_FIRST");
  if (value != nullptr && std::strcmp(value, "1") == 0) return true;
  if (value != nullptr && std::strcmp(value, "0") == 0) return false;
  if (!nodes && shard_keys > kOwnFirstMaxKeysInNode) return false;
  return attention::phase_ws_floats(p) * int64_t{4} <= kOwnFirstMaxBytes;
}

// The own shard read in place (MKERNEL_RING_OWN_COPY=1 pins the copy; ranks may differ): the
// engine loads the keys of position W - 1 of the virtual K/V — the rank's own shard — from the
// op's k / v through TMA descriptors of their own (attention_api.h Problem::k_own), and the
// engine's forwarding reads step 0 from them too (HookArgs::fwd_own_k), so the call skips the
// stream-ordered copy of the shard into that position ahead of the engine: at W = 2 on an H100
// 0.25 ms of mha s4096's 4.2 ms (session 31's phase log), the one phase the compute-alone
// ceiling lacks. Session 32 moved that copy into the forwarding warps instead: 5-11 % slower.
// The send kernels already read step 0 from k / v; nothing else reads position W - 1. Needs
// whole key blocks below the own shard: (W - 1) * s a multiple of the kernel's kBlockN (always
// with 128-key blocks in the whole mode; the 128x144 tile mostly not: it keeps the copy), and
// k / v 16-byte aligned (TMA and bulk-copy sources; a contiguous view at an odd offset keeps
// the copy).
bool ring_own_direct(const attention::Problem& p, const ring_attention::Geometry& geo, int world,
                     const at::Tensor& k, const at::Tensor& v) {
  const char* value = env::get("MKERNEL_RING_OWN_COPY");
  if (value != nullptr && std::strcmp(value, "1") == 0) return false;
  if (reinterpret_cast<uintptr_t>(k.data_ptr()) % 16 != 0 ||
      reinterpret_cast<uintptr_t>(v.data_ptr()) % 16 != 0)
    return false;
  const int bn = p.block_n > 0 ? p.block_n : attention::block_n(p.head_dim);
  return (static_cast<int64_t>(world - 1) * geo.seq) % bn == 0;
}

// The refill of the whole mode across nodes (MKERNEL_RING_REFILL=0 turns it off; ranks may
// differ): the engine's grid leaves the send kernel's CTAs their SMs, which idle once it ended
// (its shard pushed, the other nodes' shards copied in: ~1/8 of a GQA call, ~2/3 of mha s4096's
// at W = 2 over 2 nodes), and the engine runs on 60 of a rank's 66 SMs (27 of 33 at W = 4)
// where the ceiling has all of them. A second launch of the same engine with send_ctas CTAs
// goes on the side stream behind the send kernel: its CTAs start on those SMs when it ends and
// claim the items left from the same counter (attention_api.h, shared counters). The SMs left to
// the emulated link's copies stay free (session 32's stall).
bool ring_refill() {
  const char* value = env::get("MKERNEL_RING_REFILL");
  return value == nullptr || std::strcmp(value, "0") != 0;
}

// On by default since s11run2 (ring13; MKERNEL_RING_FUSED_NODES=0 pins the all-gather path;
// every rank the same value): a group spanning several nodes runs the whole-sequence mode (one
// hooked engine launch consuming each KV chunk on arrival) with the across-nodes send kernel
// (ring_kv_api.h send_whole_nodes: same-node shards over peer memory, the other nodes' through
// the inter-node FIFO, pushed by the kernel) instead of the all-gather + per-step launches.
// Shapes outside the whole mode (ragged shards) keep the all-gather path. Measured (W=2 over 2
// emulated nodes, 50GB/s,3us, benchmarks/NOTES.md ring13): 1.80-2.21x the all-gather path and
// 1.92-2.20x the unfused ring at the 4 bench rows; W=2 (with graph replay) and W=4 over 2 nodes
// passed against float64.
bool ring_fused_nodes() {
  const char* value = env::get("MKERNEL_RING_FUSED_NODES");
  return value == nullptr || std::strcmp(value, "0") != 0;
}

// CTAs of the across-nodes send kernel: it stages the shard into the send area, copies it to
// the node-mates and copies the other nodes' shards out of the receive area (host memory on the
// staged path), all beside the engine, whose refill takes their SMs once it ended. At most a
// sixteenth of the rank's SMs, 2 to 4: session 34 (H100, MPS, the refill on;
// bench_ring_attention xn1/xn2/xn3): at W = 4 over 2 nodes (33 SMs a rank) 2 CTAs were 1-4 %
// faster than 4 on five of six rows over three runs, 1 up to 1.8x slower (link-bound mha); at
// W = 2 over 2 (66 SMs) 2 and 4 within the noise (0.97-1.09x). MKERNEL_RING_SEND_CTAS=1..16
// pins it.
int nodes_send_ctas(const at::Tensor& q) {
  const char* ctas = env::get("MKERNEL_RING_SEND_CTAS");
  const int n = ctas != nullptr ? std::atoi(ctas) : 0;
  if (n >= 1 && n <= ring_attention::kMaxSendCtas) return n;
  int sms = 0;
  C10_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, q.device().index()));
  return std::clamp(sms / 16, 2, 4);
}

// MKERNEL_RING_PHASES=<path> (ring12; a measurement mode, never for timing the op itself: it
// synchronizes at the end of each call): the whole mode's call timed phase by phase with CUDA
// events on the caller's stream, one line appended per call to <path>.rank<r>:
//   "<what> <causal> <b> <s> <h> | entry_ms copy_ms engine_ms exit_ms"
// entry: the entry barrier (includes waiting for the slower peer to arrive); copy: the own
// shard's copy into the virtual K/V (none where the engine reads it in place,
// ring_own_direct), its flags and the claim counters; engine: the engine
// launch (communication inside it: the first chunks' waits, the forwarding); exit: the exit
// barrier. The compute-alone op logs its engine launch as "alone" (entry/copy/exit 0).
// Nothing inside a CUDA-graph capture.
class RingPhases {
 public:
  explicit RingPhases(cudaStream_t stream) : stream_(stream) {
    path_ = env::get("MKERNEL_RING_PHASES");
    if (path_ == nullptr || path_[0] == '\0') return;
    cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
    C10_CUDA_CHECK(cudaStreamIsCapturing(stream, &status));
    if (status != cudaStreamCaptureStatusNone) return;
    on_ = true;
    for (auto& e : events_) C10_CUDA_CHECK(cudaEventCreate(&e));
    mark();
  }
  RingPhases(const RingPhases&) = delete;
  RingPhases& operator=(const RingPhases&) = delete;
  ~RingPhases() {
    if (!on_) return;
    for (auto& e : events_) cudaEventDestroy(e);
  }
  // The next phase boundary (in stream order).
  void mark() {
    if (on_ && marks_ < static_cast<int>(events_.size()))
      C10_CUDA_CHECK(cudaEventRecord(events_[marks_++], stream_));
  }
  // Waits for the call, appends its line. `phases`: the names of the marks after the first.
  void finish(const char* what, int rank, bool causal, const at::Tensor& q,
              std::initializer_list<int> slots) {
    if (!on_) return;
    C10_CUDA_CHECK(cudaEventSynchronize(events_[marks_ - 1]));
    std::array<float, 4> ms{};
    int i = 0, prev = 0;
    for (int slot : slots) {  // slot: the phase (0 entry, 1 copy, 2 engine, 3 exit) of mark i+1
      ++i;
      if (i >= marks_) break;
      float t = 0.f;
      C10_CUDA_CHECK(cudaEventElapsedTime(&t, events_[prev], events_[i]));
      ms[static_cast<size_t>(slot)] = t;
      prev = i;
    }
    const std::string file = std::string(path_) + ".rank" + std::to_string(rank);
    if (FILE* f = std::fopen(file.c_str(), "a")) {
      std::fprintf(f, "%s %d %lld %lld %lld | %.4f %.4f %.4f %.4f\n", what, causal ? 1 : 0,
                   static_cast<long long>(q.size(0)), static_cast<long long>(q.size(1)),
                   static_cast<long long>(q.size(2)), ms[0], ms[1], ms[2], ms[3]);
      std::fclose(f);
    }
  }

 private:
  cudaStream_t stream_;
  const char* path_ = nullptr;
  bool on_ = false;
  std::array<cudaEvent_t, 5> events_{};
  int marks_ = 0;
};

// A launch error of one of the ring's kernels, with the group's wait record when a device wait
// failed first (the clear error names the flag and the peer).
void check_launch(comm::SymmetricGroup& g, cudaError_t err, const char* what) {
  if (err == cudaSuccess) return;
  cudaGetLastError();
  const std::string wait = g.diagnostic();
  TORCH_CHECK(false, kOp, ": ", what, " launch failed: ", cudaGetErrorString(err),
              wait.empty() ? std::string() : "; " + wait);
}

struct EngineCall {
  const void* q;
  int64_t q_batch_stride;
  int seq_q;
  const void* k;
  const void* v;
  int64_t kv_batch_stride;
  int seq_kv;
  void* out;
  int64_t out_batch_stride;
  float* lse;
  int64_t lse_head_stride;
  bool causal;
};

// sm_count: the persistent grid (0: every SM). A send kernel running beside it needs its SMs:
// a persistent CTA that finds none free starts only after the send, with its whole tile list.
void launch_step_engine(const at::Tensor& q, const at::Tensor& k, const EngineCall& c, float scale,
                        const attention::HookArgs* hooks, cudaStream_t stream, int sm_count = 0) {
  attention::Problem p{};
  p.q = c.q;
  p.k = c.k;
  p.v = c.v;
  p.out = c.out;
  p.lse = c.lse;
  p.batch = static_cast<int>(q.size(0));
  p.seq_q = c.seq_q;
  p.seq_kv = c.seq_kv;
  p.heads = static_cast<int>(q.size(2));
  p.heads_kv = static_cast<int>(k.size(2));
  p.head_dim = static_cast<int>(q.size(3));
  p.softmax_scale = scale;
  p.causal = c.causal;
  p.dtype = q.scalar_type() == at::kBFloat16 ? attention::DType::kBF16 : attention::DType::kFP16;
  p.q_batch_stride = c.q_batch_stride;
  p.kv_batch_stride = c.kv_batch_stride;
  p.out_batch_stride = c.out_batch_stride;
  p.lse_head_stride = c.lse_head_stride;
  attention::Launch l;
  l.stream = stream;
  l.sm_count = sm_count;
  const char* reason = nullptr;
  const cudaError_t err = hooks != nullptr ? attention::run_hooked(p, l, *hooks, &reason)
                                           : attention::run(p, l, &reason);
  TORCH_CHECK_VALUE(reason == nullptr, kOp, ": ", reason, " (dtype ", q.scalar_type(), ", d ",
                    q.size(3), ")");
  TORCH_CHECK(err == cudaSuccess, kOp, ": engine launch failed: ", cudaGetErrorString(err));
}

void merge_rows(at::Tensor& out_acc, at::Tensor& lse_acc, const at::Tensor& part,
                const at::Tensor& lse_part, int64_t row0, int64_t rows, cudaStream_t stream) {
  const int64_t s = out_acc.size(1), h = out_acc.size(2), d = out_acc.size(3);
  attention::Merge m{};
  m.out_acc = out_acc.data_ptr<float>() + row0 * h * d;
  m.lse_acc = lse_acc.data_ptr<float>() + row0;
  m.out_part = static_cast<const uint8_t*>(part.data_ptr()) + row0 * h * d * part.element_size();
  m.lse_part = lse_part.data_ptr<float>() + row0;
  m.batch = static_cast<int>(out_acc.size(0));
  m.seq = static_cast<int>(rows);
  m.heads = static_cast<int>(h);
  m.head_dim = static_cast<int>(d);
  m.part_dtype = part.scalar_type() == at::kBFloat16 ? attention::DType::kBF16
                                                      : attention::DType::kFP16;
  m.out_batch_stride = s * h * d;
  m.lse_head_stride = s;
  const cudaError_t err = attention::merge_partial(m, stream);
  TORCH_CHECK(err == cudaSuccess, kOp, ": merge launch failed: ", cudaGetErrorString(err));
}

// Ring step j's engine call (the work split in the comment above): the rank's queries against
// kj/vj, the K/V shard of src = (rank - j) mod W, writing rows [row0, row0 + rows) of the
// partial (part, lse_part; q's shape).
struct StepCall {
  EngineCall c;
  int64_t row0, rows;
};
StepCall step_call(const at::Tensor& q, const at::Tensor& k, int rank, int world, int j,
                   bool causal, const void* kj, const void* vj, at::Tensor& part,
                   at::Tensor& lse_part) {
  const int64_t s = q.size(1), h = q.size(2), d = q.size(3), s_kv = k.size(1), h_kv = k.size(2);
  const int64_t half = s / 2;  // causal: the zigzag chunk length (s == s_kv, s even)
  const int src = (rank - j + world) % world;
  const uint8_t* q_bytes = static_cast<const uint8_t*>(q.data_ptr());
  uint8_t* part_bytes = static_cast<uint8_t*>(part.data_ptr());
  const int64_t elt = q.element_size();
  StepCall sc{{q_bytes, 0, static_cast<int>(s), kj, vj, 0, static_cast<int>(s_kv), part_bytes, 0,
               lse_part.data_ptr<float>(), 0, false},
              0,
              s};
  EngineCall& c = sc.c;
  if (causal && j == 0) {
    c.causal = true;
  } else if (causal && src < rank) {  // q x kv[:half]
    c.seq_kv = static_cast<int>(half);
    c.kv_batch_stride = s_kv * h_kv * d;
  } else if (causal) {  // q[half:] x kv, into rows [half, s)
    c.q = q_bytes + half * h * d * elt;
    c.q_batch_stride = s * h * d;
    c.seq_q = static_cast<int>(half);
    c.out = part_bytes + half * h * d * elt;
    c.out_batch_stride = s * h * d;
    c.lse = lse_part.data_ptr<float>() + half;
    c.lse_head_stride = s;
    sc.row0 = half;
    sc.rows = half;
  }
  return sc;
}

// Key blocks per flag: at most 16 chunks per batch (a flag and its fence per >= 1/16 of the
// shard), and at most kMaxItems (batch, chunk) flags per step.
ring_attention::Geometry ring_geometry(const at::Tensor& k) {
  ring_attention::Geometry geo;
  geo.batch = static_cast<int>(k.size(0));
  geo.seq = static_cast<int>(k.size(1));
  geo.row_bytes = static_cast<uint64_t>(k.size(2) * k.size(3) * k.element_size());
  const int block_n = attention::block_n(static_cast<int>(k.size(3)));
  const int blocks = (geo.seq + block_n - 1) / block_n;
  int per_flag = std::max(1, (blocks + 15) / 16);
  while (per_flag < blocks && static_cast<int64_t>(geo.batch) *
                                   ((blocks + per_flag - 1) / per_flag) >
                               ring_attention::kMaxItems) {
    per_flag *= 2;
  }
  geo.chunk_rows = per_flag * block_n;
  geo.chunks = (blocks + per_flag - 1) / per_flag;
  return geo;
}

// Shard lengths a multiple of the key block (causal: zigzag halves a multiple of 128): the
// whole-sequence mode of ring_kv_api.h — one send kernel (side stream) and ONE launch of the
// hooked engine over the W shards' virtual K/V, consuming each chunk on arrival; no partials,
// no merges. Causal runs the engine's zigzag ring mode (visibility by global chunk, so every
// rank does the same work and skips what it must not see). The engine's
// grid leaves kSendCtas SMs free: the send kernel must run beside it (the engine waits on the
// shards it forwards).
//
// At most kWholeChunks key chunks (flags) per shard: each is one acquire + proxy fence per CTA
// that loads from it (attention_hooks.cuh SeenFlags: once per launch), and those stall the
// engine's load lane. Session 25 (ring_hooked_gap.py, one H200, no communication): with 16 per
// shard the remaining acquires cost the hooked launch 3-9 % non-causal (no waits at all vs the
// cached ones); 4 per shard left it within 1.6 % of no waits at all and 5-13 % faster than
// session 24's default, the fused ring under MPS within +-1.6 % (the first peer chunk is a
// quarter shard: it lands while the engine walks the own shard, consumed first).
// MKERNEL_RING_CHUNKS=n (1..16; every rank the same value) pins it.
constexpr int kWholeChunks = 4;
int whole_chunks() {
  const char* value = env::get("MKERNEL_RING_CHUNKS");
  const int n = value != nullptr ? std::atoi(value) : 0;
  return n >= 1 && n <= 16 ? n : kWholeChunks;
}

std::optional<ring_attention::Geometry> whole_geometry(const at::Tensor& k, int world) {
  const int block_n = attention::block_n(static_cast<int>(k.size(3)));
  if (k.size(1) % block_n != 0) return std::nullopt;
  ring_attention::Geometry geo;
  geo.batch = static_cast<int>(k.size(0));
  geo.seq = static_cast<int>(k.size(1));
  geo.row_bytes = static_cast<uint64_t>(k.size(2) * k.size(3) * k.element_size());
  const int blocks = geo.seq / block_n;
  const int max_chunks = whole_chunks();
  for (int per_flag = std::max(1, (blocks + max_chunks - 1) / max_chunks); per_flag <= blocks;
       ++per_flag) {
    if (blocks % per_flag != 0) continue;
    if (static_cast<int64_t>(geo.batch) * world * (blocks / per_flag) >
        ring_attention::kMaxWholeFlags)
      continue;
    geo.chunk_rows = per_flag * block_n;
    geo.chunks = blocks / per_flag;
    return geo;
  }
  return std::nullopt;
}

// The whole mode's KV flags as the engine reads them: one flag per (batch, ring position, key
// chunk), shared by every head (ring_kv_api.h whole_slot).
void set_whole_flags(attention::HookArgs& hooks, const ring_attention::Geometry& geo, int world,
                     const at::Tensor& q) {
  hooks.blocks_per_flag = geo.chunk_rows / attention::block_n(static_cast<int>(q.size(3)));
  hooks.flags_per_head = world * geo.chunks;
  hooks.flag_batch_stride = world * geo.chunks;
  hooks.flag_head_stride = 0;
  hooks.keys_per_flag = geo.chunk_rows;  // read by the 128x144 kernel only (flags by keys)
}

// The whole mode's engine problem: the local query shard q against the virtual K/V at k_virt /
// v_virt ([b, W * s_kv, h_kv, d] each, dense: the W shards by ring position, position p holding
// rank (rank + 1 + p) mod W's, the own shard last), causal through the engine's zigzag ring mode.
// engine_tile: the forwarding policy's 128x128 tile (ring attention pins it with that policy).
attention::Problem whole_problem(const at::Tensor& q, const at::Tensor& k, int world, int rank,
                                 bool causal, float scale, bool engine_tile, const void* k_virt,
                                 const void* v_virt, at::Tensor& out, at::Tensor& lse) {
  attention::Problem p{};
  p.q = q.data_ptr();
  p.k = k_virt;
  p.v = v_virt;
  p.out = out.data_ptr();
  p.lse = lse.data_ptr<float>();
  p.batch = static_cast<int>(q.size(0));
  p.seq_q = static_cast<int>(q.size(1));
  p.seq_kv = world * static_cast<int>(k.size(1));
  p.heads = static_cast<int>(q.size(2));
  p.heads_kv = static_cast<int>(k.size(2));
  p.head_dim = static_cast<int>(q.size(3));
  p.softmax_scale = scale;
  p.causal = causal;
  if (causal) {  // zigzag shards: the engine masks by global chunk (attention_api.h)
    p.zz_world = world;
    p.zz_rank = rank;
    p.zz_chunk = static_cast<int>(q.size(1) / 2);
    // The zigzag mode needs whole query tiles per chunk: the 128-row tile when the default
    // causal tile does not divide the chunk.
    if (p.zz_chunk % attention::block_m(static_cast<int>(q.size(3)), true, p.seq_q) != 0) {
      p.block_m = 128;
      p.block_n = attention::block_n(static_cast<int>(q.size(3)));
    }
  }
  p.dtype = q.scalar_type() == at::kBFloat16 ? attention::DType::kBF16 : attention::DType::kFP16;
  if (engine_tile) {  // the forwarding policy's tile
    p.block_m = 128;
    p.block_n = 128;
  } else if (ring_wide_tile(q, causal)) {
    p.block_m = 128;
    p.block_n = 144;
  }
  return p;
}

// The whole mode's engine grid: the device's SM count (under MPS: the client's share) less the
// send kernel's CTAs. MKERNEL_RING_GRID=n (1..1024; a measurement knob, ranks may differ): the
// engine's grid. Under MPS the clients' SM sets can overlap (session 8 run 1's fused_diag: the
// later kernel got 30 of its 66 SMs, 36 only when the other's CTAs left), so a smaller grid may
// leave the shared SMs to both ranks instead of to the first one; with claimed tiles any grid
// covers every tile.
// Across emulated nodes (the loopback transport's GPU-direct emulation) the link's copies are
// submitted to this same GPU and may run as SM kernels: with every SM of the ranks' shares held
// by engine and send CTAs that wait for those copies, they never ran (session 32, H100, W = 2
// over 2 nodes: a stall at the op timeout in every run). kCopierSms per rank stay free for them
// (grids 60 / 58 / 54 of 62 measured alike on an H200, +-3 %); real NICs' DMA needs none.
constexpr int kCopierSms = 2;
int whole_grid(const at::Tensor& q, int send_ctas, bool copier_sms) {
  int sms = 0;
  C10_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, q.device().index()));
  int grid = std::max(1, sms - send_ctas - (copier_sms ? kCopierSms : 0));
  if (const char* value = env::get("MKERNEL_RING_GRID")) {
    const int n = std::atoi(value);
    if (n >= 1 && n <= 1024) grid = n;
  }
  return grid;
}

// The own shard into position W - 1 of the whole mode's virtual K/V at `kv` (k, then v after
// W shards): strided per batch, 2D memcpys on `stream`.
void copy_own_shard(const at::Tensor& k, const at::Tensor& v, uint8_t* kv,
                    const ring_attention::Geometry& geo, int world, cudaStream_t stream) {
  const uint64_t row = static_cast<uint64_t>(geo.seq) * geo.row_bytes;  // one batch's shard
  const uint64_t v_off = static_cast<uint64_t>(world) * geo.shard_bytes();
  for (const auto& [src, dst] : {std::pair<const void*, uint8_t*>{k.data_ptr(), kv},
                                 std::pair<const void*, uint8_t*>{v.data_ptr(), kv + v_off}}) {
    uint8_t* at = dst + static_cast<uint64_t>(world - 1) * row;
    if (world * row < (uint64_t{1} << 31)) {  // within the 2D copy's pitch limit
      C10_CUDA_CHECK(cudaMemcpy2DAsync(at, world * row, src, row, row, geo.batch,
                                       cudaMemcpyDeviceToDevice, stream));
    } else {
      for (int bi = 0; bi < geo.batch; ++bi) {
        C10_CUDA_CHECK(cudaMemcpyAsync(at + bi * world * row,
                                       static_cast<const uint8_t*>(src) + bi * row, row,
                                       cudaMemcpyDeviceToDevice, stream));
      }
    }
  }
}

std::tuple<at::Tensor, at::Tensor> ring_attention_cuda_whole(
    const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, comm::SymmetricGroup& g,
    const ring_attention::Geometry& geo, uint64_t sig, float scale, bool causal) {
  const int rank = g.rank(), world = g.world();
  // Across nodes (the default; MKERNEL_RING_FUSED_NODES=0 pins the all-gather path): the other
  // nodes' shards through the inter-node path (ring_kv_api.h send_whole_nodes; areas grown
  // collectively: every rank the same sizes).
  const bool nodes = !g.single_node();
  g.ensure(kOp, ring_attention::whole_data_bytes(geo, world));
  if (nodes) {
    g.ensure_net(kOp, ring_attention::nodes_send_bytes(geo),
                 ring_attention::nodes_recv_bytes(geo, world));
  }
  const comm::GroupDevice view = g.device_view();  // after ensure: the current mappings
  TORCH_CHECK(!nodes || (view.net.fifo != nullptr && view.net.stage_count != nullptr &&
                         view.net.arrival_slots >= ring_attention::kNetSlotBase +
                                                       comm::kMaxRanks * ring_attention::kNetPieces),
              kOp, ": the fused ring across nodes needs the inter-node path's FIFO, staging "
              "counters and ", ring_attention::kNetSlotBase + comm::kMaxRanks * ring_attention::kNetPieces,
              " arrival slots; this build's path has fifo ", view.net.fifo != nullptr ? "yes" : "no",
              ", ", view.net.arrival_slots, " slots (MKERNEL_RING_FUSED_NODES=0: the all-gather "
              "path)");
  at::Tensor out = at::empty_like(q);
  at::Tensor lse = at::empty({q.size(0), q.size(2), q.size(1)}, q.options().dtype(at::kFloat));
  const cudaStream_t stream = at::cuda::getCurrentCUDAStream();
  const at::cuda::CUDAStream side = at::cuda::getStreamFromPool(true, q.device().index());
  auto check = [&](cudaError_t err, const char* what) { check_launch(g, err, what); };
  RingPhases phases(stream);
  check(ring_attention::begin(view, sig, stream), "entry");
  phases.mark();
  at::cuda::CUDAEvent entered, sent;
  entered.record(at::cuda::getCurrentCUDAStream());
  entered.block(side);

  // The send kernel first (side stream): it forwards every step's shard to the next rank, step
  // 0 from the input k/v. It must be dispatched before the engine, which waits for the shards
  // the PEERS' send kernels deliver: a kernel enqueued after the engine could find every SM of
  // this MPS client taken by engine CTAs that wait for it (session 7 run 2: memcpys + flag
  // kernels issued after the engine deadlocked at the benchmark's shapes).
  // MKERNEL_RING_SEND=engine: no send kernel; the engine forwards (step 0 from position W - 1,
  // once mark_whole below released it).
  // Across nodes always the send kernel (the engine's forwarding reaches same-node ranks only).
  const WholeSend how = nodes ? WholeSend{false, nodes_send_ctas(q)} : whole_send(q, causal);
  const bool in_engine = how.in_engine;
  const int send_ctas = how.send_ctas;
  if (nodes) {
    check(ring_attention::send_whole_nodes(view, geo, k.data_ptr(), v.data_ptr(), send_ctas,
                                           side.stream()),
          "send (across nodes)");
  } else if (!in_engine) {
    check(ring_attention::send_whole(view, geo, k.data_ptr(), v.data_ptr(), causal, send_ctas,
                                     side.stream()),
          "send");
  }
  sent.record(side);
  // The own shard into position W - 1 of the virtual K/V (strided per batch: 2D memcpys on the
  // caller's stream, before the engine) unless the engine reads it in place (ring_own_direct),
  // then its flags.
  uint8_t* kv = view.data[rank];
  const uint64_t v_off = static_cast<uint64_t>(world) * geo.shard_bytes();
  attention::Problem p =
      whole_problem(q, k, world, rank, causal, scale, in_engine, kv, kv + v_off, out, lse);
  const bool own_direct = ring_own_direct(p, geo, world, k, v);
  if (own_direct) {
    p.k_own = k.data_ptr();
    p.v_own = v.data_ptr();
    p.own_key_start = (world - 1) * geo.seq;
  }
  if (!own_direct) copy_own_shard(k, v, kv, geo, world, stream);
  check(ring_attention::mark_whole(view, geo, rank, world - 1, 0, geo.batch, stream), "mark");
  // MKERNEL_RING_SEND_FIRST=1 (a pin; measured slower, session 8 run 1: GQA 12.2 ms symmetric vs
  // 8.6 with 4 send CTAs): the engine starts only once every send CTA runs (ring_kv_api.h
  // wait_send_started: the SMs it needs cannot go to engine CTAs).
  const char* first = env::get("MKERNEL_RING_SEND_FIRST");
  if (!in_engine && !nodes && first != nullptr && std::strcmp(first, "1") == 0) {
    check(ring_attention::wait_send_started(view, ring_attention::send_whole_grid(view, geo,
                                                                                  send_ctas),
                                            stream),
          "send-start wait");
  }
  attention::HookArgs hooks;
  hooks.kv_ready = view.flags[rank] + ring_attention::whole_slot(world, geo.chunks, 0, 0, 0);
  set_whole_flags(hooks, geo, world, q);
  hooks.kv_ready_value = 1;  // e = *epoch + 1
  hooks.kv_ready_epoch = view.epoch;
  hooks.kv_ready_epoch_scale = 1;
  hooks.timeout_s = static_cast<double>(view.timeout_ns) * 1e-9;
  hooks.diag = view.diag;
  hooks.rank = rank;
  hooks.group = view.group_id;
  hooks.peer = (rank + world - 1) % world;  // every shard arrives from rank r - 1
  if (nodes) {
    // Every rank's shard comes straight from it: the engine's waits name a node-mate (the
    // only direct ones; the other nodes' shards pass through the send kernel's receive
    // copies, whose bounded waits name the source) and are bounded longer, so that the
    // direct waits report a lost rank first.
    hooks.peer = rank;
    for (int r = 0; r < world; ++r) {
      if (r != rank && view.data[r] != nullptr) hooks.peer = r;
    }
    if (hooks.peer == rank) hooks.peer = (rank + world - 1) % world;
    hooks.timeout_s = 2.0 * hooks.timeout_s + 2.0;
  }
  set_ring_wait_options(hooks);
  const int next = (rank + 1) % world;
  // The claim counters, [0] forwarding items, [1] work tiles (zeroed on the caller's stream,
  // before the engine; the caching allocator keeps them until the engine is done with them, in
  // stream order; a CUDA graph captures the memset).
  const bool claims = whole_claims_tiles();
  at::Tensor counters;
  if (in_engine || claims) counters = at::zeros({2}, q.options().dtype(at::kInt));
  if (claims) hooks.tile_counter = counters.data_ptr<int>() + 1;
  if (in_engine) {  // attention_api.h HookArgs::fwd_*
    hooks.fwd_counter = counters.data_ptr<int>();
    hooks.fwd_src = kv;
    if (own_direct) {
      hooks.fwd_own_k = k.data_ptr();
      hooks.fwd_own_v = v.data_ptr();
    }
    hooks.fwd_dst = view.data[next];
    hooks.fwd_flags = view.flags[next] + ring_attention::whole_slot(world, geo.chunks, 0, 0, 0);
    hooks.fwd_v_off = v_off;
    hooks.fwd_row_bytes = geo.row_bytes;
    hooks.fwd_world = world;
    hooks.fwd_rank = rank;
    hooks.fwd_batch = geo.batch;
    hooks.fwd_seq = geo.seq;
    hooks.fwd_chunk_rows = geo.chunk_rows;
    hooks.fwd_chunks = geo.chunks;
    hooks.fwd_causal = causal;
  }
  // The own-shard-first split's workspace (stream-ordered like the counters).
  at::Tensor phase_ws, phase_flags;
  if (claims && ring_own_first(nodes, p, q, causal, geo.seq)) {
    phase_ws = at::empty({attention::phase_ws_floats(p)}, q.options().dtype(at::kFloat));
    phase_flags = at::zeros({attention::phase_flag_words(p)}, q.options().dtype(at::kLong));
    hooks.phase_split_keys = (world - 1) * geo.seq;  // position W - 1: the own shard
    hooks.phase_ws = phase_ws.data_ptr<float>();
    hooks.phase_flags = reinterpret_cast<uint64_t*>(phase_flags.data_ptr<int64_t>());
  }
  attention::Launch l;
  l.stream = stream;
  l.sm_count = whole_grid(q, send_ctas, nodes && g.net_copies_on_this_gpu());
  // The refill (across nodes; claimed tiles): send_ctas more engine CTAs on the side stream
  // behind the send kernel, so they take its SMs once it ended and join the engine's claims.
  const bool refill = nodes && claims && ring_refill();
  at::cuda::CUDAEvent zeroed;
  if (refill) zeroed.record(at::cuda::getCurrentCUDAStream());  // counters and flags are zero
  phases.mark();
  const char* reason = nullptr;
  const cudaError_t err = attention::run_hooked(p, l, hooks, &reason);
  TORCH_CHECK_VALUE(reason == nullptr, kOp, ": ", reason, " (dtype ", q.scalar_type(), ", d ",
                    q.size(3), ")");
  check(err, "engine");
  if (refill) {
    zeroed.block(side);
    attention::Launch more;
    more.stream = side.stream();
    more.sm_count = send_ctas;
    check(attention::run_hooked(p, more, hooks, &reason), "engine (refill)");
    sent.record(side);
  }
  phases.mark();
  sent.block(at::cuda::getCurrentCUDAStream());
  check(ring_attention::end(view, stream), "exit");
  phases.mark();
  phases.finish("fused", rank, causal, q, {0, 1, 2, 3});
  return {out, lse};
}

// The compute-alone ceiling on CUDA (see kOpAlone above): the whole mode's engine launch as
// ring_attention_cuda_whole makes it (whole_problem, set_whole_flags, whole_send's kernel choice,
// claimed tiles, MKERNEL_RING_SPLIT_MASK / MKERNEL_RING_FLAG_SKIP / MKERNEL_RING_GRID alike), on
// k_ring / v_ring, with the grid of the whole SM share (no send kernel beside it) and every KV
// flag already released: flags 0 against an expected value 0, so each of the engine's flag
// checks is one acquire load that succeeds. Under the forwarding policy (the default kernel for
// bf16 128x128) the forwarding role gets no items (fwd_batch 0): the same kernel, idle.
std::tuple<at::Tensor, at::Tensor> compute_alone_cuda(const at::Tensor& q, const at::Tensor& k_ring,
                                                      const at::Tensor& v_ring, int64_t rank,
                                                      int64_t world_size, bool causal,
                                                      std::optional<double> softmax_scale) {
  validate_compute_alone(q, k_ring, v_ring, rank, world_size, causal, softmax_scale);
  validation::check_dtype_in(kOpAlone, "q", q, {at::kBFloat16, at::kHalf}, "activations");
  TORCH_CHECK_VALUE(q.size(3) == 64 || q.size(3) == 128, kOpAlone,
                    ": head dims 64 and 128 (the CUDA ring's), got q: ", q.sizes());
  const c10::cuda::CUDAGuard guard(q.device());
  const int world = static_cast<int>(world_size), r = static_cast<int>(rank);
  const int64_t s_kv = k_ring.size(1) / world;
  const at::Tensor shard = k_ring.narrow(1, 0, s_kv);  // one shard's sizes (the geometry)
  const bool aligned = !causal || (q.size(1) / 2) % 128 == 0;
  const std::optional<ring_attention::Geometry> geo =
      aligned ? whole_geometry(shard, world) : std::nullopt;
  TORCH_CHECK_VALUE(geo.has_value(), kOpAlone, ": the whole-sequence mode's shapes only (shards a "
                    "multiple of the key block, causal halves a multiple of 128; q: ", q.sizes(),
                    ", k_ring: ", k_ring.sizes(), ")");
  const float scale = static_cast<float>(softmax_scale.has_value()
                                             ? *softmax_scale
                                             : 1.0 / std::sqrt(static_cast<double>(q.size(3))));
  at::Tensor out = at::empty_like(q);
  at::Tensor lse = at::empty({q.size(0), q.size(2), q.size(1)}, q.options().dtype(at::kFloat));
  const WholeSend how = whole_send(q, causal);
  // int64 words: [0] the tile counter (an int), [1] the forwarding counter, then the flags.
  const int64_t flags = static_cast<int64_t>(geo->batch) * world * geo->chunks;
  at::Tensor scratch = at::zeros({2 + flags}, q.options().dtype(at::kLong));
  int64_t* words = scratch.data_ptr<int64_t>();
  attention::HookArgs hooks;
  hooks.kv_ready = reinterpret_cast<const uint64_t*>(words + 2);
  set_whole_flags(hooks, *geo, world, q);
  hooks.kv_ready_value = 0;  // released: every flag >= 0
  // Measurement (ring_hooked_gap.py): the same kernel with its KV waits skipped (safe here only:
  // every flag is released before the launch).
  const char* no_wait = env::get("MKERNEL_RING_MEASURE_NO_WAIT");
  hooks.measure_no_wait = no_wait != nullptr && std::strcmp(no_wait, "1") == 0;
  hooks.timeout_s = 10.0;
  hooks.rank = r;
  set_ring_wait_options(hooks);
  if (whole_claims_tiles()) hooks.tile_counter = reinterpret_cast<int*>(words);
  if (how.in_engine && world >= 2) {  // the forwarding policy's kernel with nothing to forward
    hooks.fwd_counter = reinterpret_cast<int*>(words + 1);
    hooks.fwd_src = k_ring.data_ptr();
    hooks.fwd_dst = words + 1;  // never written: no items
    hooks.fwd_flags = reinterpret_cast<uint64_t*>(words + 2);
    hooks.fwd_row_bytes = geo->row_bytes;
    hooks.fwd_world = world;
    hooks.fwd_rank = r;
    hooks.fwd_batch = 0;  // (W - 1) * 0 * chunks = 0 items
    hooks.fwd_seq = geo->seq;
    hooks.fwd_chunk_rows = geo->chunk_rows;
    hooks.fwd_chunks = geo->chunks;
    hooks.fwd_causal = causal;
  }
  const attention::Problem p = whole_problem(q, shard, world, r, causal, scale, how.in_engine,
                                             k_ring.data_ptr(), v_ring.data_ptr(), out, lse);
  attention::Launch l;
  l.stream = at::cuda::getCurrentCUDAStream();
  l.sm_count = whole_grid(q, 0, false);
  RingPhases phases(l.stream);
  const char* reason = nullptr;
  const cudaError_t err = attention::run_hooked(p, l, hooks, &reason);
  TORCH_CHECK_VALUE(reason == nullptr, kOpAlone, ": ", reason, " (dtype ", q.scalar_type(), ", d ",
                    q.size(3), ")");
  TORCH_CHECK(err == cudaSuccess, kOpAlone, ": engine launch failed: ", cudaGetErrorString(err));
  phases.mark();
  phases.finish("alone", r, causal, q, {2});
  return {out, lse};
}

// Ring step sc's attention through mkernel::attention — for the head dims the engine is not
// built for, torch's FlashAttention-2 kernel (attention.cpp, attention_fa2) — on the step's query
// rows and key rows of the source shard (kj / vj: [b, s_kv, h_kv, d]), written into the same
// rows of (part, lse_part) that the engine's step call writes, for merge_rows.
void fa2_step(const at::Tensor& q, const at::Tensor& kj, const at::Tensor& vj, const StepCall& sc,
              double scale, at::Tensor& part, at::Tensor& lse_part) {
  static const auto attention = c10::Dispatcher::singleton()
                                    .findSchemaOrThrow("mkernel::attention", "")
                                    .typed<std::tuple<at::Tensor, at::Tensor>(
                                        const at::Tensor&, const at::Tensor&, const at::Tensor&,
                                        bool, std::optional<double>, int64_t, int64_t)>();
  const bool all_rows = sc.row0 == 0 && sc.rows == q.size(1);
  const at::Tensor qs = all_rows ? q : q.narrow(1, sc.row0, sc.rows).contiguous();
  const bool all_keys = sc.c.seq_kv == kj.size(1);
  const at::Tensor ks = all_keys ? kj : kj.narrow(1, 0, sc.c.seq_kv).contiguous();
  const at::Tensor vs = all_keys ? vj : vj.narrow(1, 0, sc.c.seq_kv).contiguous();
  const auto [o, l] = attention.call(qs, ks, vs, sc.c.causal, scale, 0, 0);
  part.narrow(1, sc.row0, sc.rows).copy_(o);
  lse_part.narrow(2, sc.row0, sc.rows).copy_(l);
}

// Groups spanning several (emulated) nodes with ragged shards (or MKERNEL_RING_FUSED_NODES=0;
// whole-mode shapes run ring_attention_cuda_whole across nodes), and head dims the engine is
// not built for at any W (on_engine false; every step through fa2_step): the K/V shards are
// gathered through the substrate's all_gather (mkernel::all_gather: peer memory inside a node,
// and between nodes its inter-node half, kernel -> NetPath FIFO -> Go proxy -> transport) on a
// side stream, while step 0 (the local shard) runs on the caller's; then the per-step ring's
// attention calls and fp32 merges on the gathered shards in ring order (no hooks: the data is
// there).
std::tuple<at::Tensor, at::Tensor> ring_attention_cuda_nodes(
    const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, int64_t group,
    int64_t world_size, int rank, int world, bool causal, float scale, bool on_engine = true) {
  static const auto all_gather =
      c10::Dispatcher::singleton()
          .findSchemaOrThrow("mkernel::all_gather", "")
          .typed<at::Tensor(const at::Tensor&, int64_t, int64_t)>();
  const int64_t b = q.size(0), s = q.size(1), h = q.size(2), d = q.size(3);
  const at::AutoDispatchBelowADInplaceOrView below_autograd;  // an inner op of this kernel
  const at::cuda::CUDAStream main = at::cuda::getCurrentCUDAStream();
  const at::cuda::CUDAStream side = at::cuda::getStreamFromPool(false, q.device().index());
  at::cuda::CUDAEvent inputs, gathered;
  inputs.record(main);
  inputs.block(side);
  // [W * b, s_kv, h_kv, d]: rank r's shard in rows [r * b, (r + 1) * b), one contiguous block.
  at::Tensor k_all, v_all;
  {
    const c10::cuda::CUDAStreamGuard on_side(side);
    k_all = all_gather.call(k.contiguous(), group, world_size);
    v_all = all_gather.call(v.contiguous(), group, world_size);
  }
  gathered.record(side);
  const int64_t shard = k.numel() * k.element_size();
  at::Tensor out_acc = at::zeros({b, s, h, d}, q.options().dtype(at::kFloat));
  at::Tensor lse_acc =
      at::full({b, h, s}, -std::numeric_limits<float>::infinity(), q.options().dtype(at::kFloat));
  at::Tensor part = at::empty({b, s, h, d}, q.options());
  at::Tensor lse_part = at::empty({b, h, s}, q.options().dtype(at::kFloat));
  const cudaStream_t stream = main.stream();
  for (int j = 0; j < world; ++j) {
    const int src = (rank - j + world) % world;
    if (j == 1) {  // the remote shards from here on: after the gather (made on the side stream)
      gathered.block(main);
      k_all.record_stream(main);
      v_all.record_stream(main);
    }
    const void* kj = j == 0 ? k.data_ptr()
                            : static_cast<const uint8_t*>(k_all.data_ptr()) + src * shard;
    const void* vj = j == 0 ? v.data_ptr()
                            : static_cast<const uint8_t*>(v_all.data_ptr()) + src * shard;
    const StepCall sc = step_call(q, k, rank, world, j, causal, kj, vj, part, lse_part);
    if (on_engine) {
      launch_step_engine(q, k, sc.c, scale, nullptr, stream);
    } else {
      fa2_step(q, j == 0 ? k : k_all.narrow(0, src * b, b),
               j == 0 ? v : v_all.narrow(0, src * b, b), sc, scale, part, lse_part);
    }
    merge_rows(out_acc, lse_acc, part, lse_part, sc.row0, sc.rows, stream);
  }
  return {out_acc.to(q.scalar_type()), lse_acc};
}

std::tuple<at::Tensor, at::Tensor> ring_attention_cuda_ring(const at::Tensor& q,
                                                            const at::Tensor& k,
                                                            const at::Tensor& v, int64_t group,
                                                            int64_t world_size, bool causal,
                                                            double scale_d) {
  validation::check_dtype_in(kOp, "q", q, {at::kBFloat16, at::kHalf}, "activations");
  TORCH_CHECK_VALUE(q.size(1) >= 1 && k.size(1) >= 1, kOp, ": empty shards (q: ", q.sizes(),
                    ", k: ", k.sizes(), ")");
  const c10::cuda::CUDAGuard guard(q.device());
  comm::SymmetricGroup& g = comm::SymmetricGroup::get(kOp, group, world_size, q.device());
  const int rank = g.rank(), world = g.world();
  if (q.size(3) != 64 && q.size(3) != 128) {
    // The engine's head dims are 64 and 128 (validate_ring_attention: the others multiples of
    // 8 up to 256): the all-gather path, every step through torch's FA2 kernel, at any W.
    TORCH_WARN_ONCE(kOp, ": head dim ", q.size(3),
                    " gathers the K/V shards first and runs "
                    "torch's FlashAttention-2 kernel per ring step (the fused ring is built for "
                    "64 and 128)");
    return ring_attention_cuda_nodes(q, k, v, group, world_size, rank, world, causal,
                                     static_cast<float>(scale_d), /*on_engine=*/false);
  }
  const bool fused_nodes = !g.single_node() && ring_fused_nodes();
  if (!g.single_node() && !fused_nodes) {
    return ring_attention_cuda_nodes(q, k, v, group, world_size, rank, world, causal,
                                     static_cast<float>(scale_d));
  }
  const int64_t b = q.size(0), s = q.size(1), h = q.size(2), d = q.size(3);
  const int64_t s_kv = k.size(1), h_kv = k.size(2);
  const int64_t half = s / 2;  // causal: the zigzag chunk length (s == s_kv, s even)
  const float scale = static_cast<float>(scale_d);
  // Every rank must agree on the call (checked on the device by the entry barrier).
  uint64_t sig = comm::call_signature(
      comm::kOpRingAttention,
      {static_cast<int64_t>(q.scalar_type()), b, s, h, d, s_kv, h_kv, causal ? 1 : 0});
  int64_t scale_bits = 0;
  std::memcpy(&scale_bits, &scale_d, sizeof(scale_bits));
  // The whole-sequence mode (one engine launch): non-causal with block-aligned shards, or
  // causal zigzag with block-aligned halves (the engine's zigzag ring mode masks by chunk).
  // MKERNEL_RING_MODE=step pins the per-step ring (benchmarks and tests run both modes on the
  // same shapes); the mode is part of the call's signature, so ranks that disagree get the
  // entry barrier's clear error instead of a hang.
  const char* pin = env::get("MKERNEL_RING_MODE");
  const bool step_pinned = pin != nullptr && std::strcmp(pin, "step") == 0;
  std::optional<ring_attention::Geometry> whole;
  if (!step_pinned && (!causal || (s == s_kv && half % 128 == 0))) whole = whole_geometry(k, world);
  sig = comm::call_signature(comm::kOpRingAttention,
                             {static_cast<int64_t>(sig), scale_bits, whole ? 1 : 0});
  if (whole) return ring_attention_cuda_whole(q, k, v, g, *whole, sig, scale, causal);
  if (fused_nodes) {  // ragged shards across nodes: the all-gather path
    return ring_attention_cuda_nodes(q, k, v, group, world_size, rank, world, causal, scale);
  }
  TORCH_CHECK_VALUE(b <= ring_attention::kMaxItems, kOp, ": the CUDA ring takes at most ",
                    ring_attention::kMaxItems, " sequences per call (batch), got q: ", q.sizes());
  const ring_attention::Geometry geo = ring_geometry(k);
  g.ensure(kOp, ring_attention::data_bytes(geo));
  const comm::GroupDevice view = g.device_view();  // after ensure: the current mappings

  at::Tensor out_acc = at::zeros({b, s, h, d}, q.options().dtype(at::kFloat));
  at::Tensor lse_acc =
      at::full({b, h, s}, -std::numeric_limits<float>::infinity(), q.options().dtype(at::kFloat));
  at::Tensor part = at::empty({b, s, h, d}, q.options());
  at::Tensor lse_part = at::empty({b, h, s}, q.options().dtype(at::kFloat));

  const cudaStream_t stream = at::cuda::getCurrentCUDAStream();
  const at::cuda::CUDAStream side = at::cuda::getStreamFromPool(true, q.device().index());
  auto check = [&](cudaError_t err, const char* what) { check_launch(g, err, what); };

  check(ring_attention::begin(view, sig, stream), "entry");
  at::cuda::CUDAEvent entered;
  entered.record(at::cuda::getCurrentCUDAStream());
  entered.block(side);
  std::vector<at::cuda::CUDAEvent> sent(static_cast<size_t>(world - 1));

  uint8_t* own = view.data[rank];
  int sms = 0;
  C10_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, q.device().index()));
  for (int j = 0; j < world; ++j) {
    const uint8_t* kj = j == 0 ? static_cast<const uint8_t*>(k.data_ptr())
                               : ring_attention::buffer(own, geo, j % 2);
    const uint8_t* vj = j == 0 ? static_cast<const uint8_t*>(v.data_ptr()) : kj + geo.shard_bytes();
    if (j + 1 < world) {
      check(ring_attention::send(view, geo, kj, vj, j, kSendCtas, side.stream()), "send");
      sent[static_cast<size_t>(j)].record(side);
    }
    attention::HookArgs hooks;
    if (j > 0) {  // step j's shard arrives chunk by chunk: flag (j, batch, chunk) = e
      hooks.kv_ready = view.flags[rank] + ring_attention::arrive_slot(j, 0);
      hooks.blocks_per_flag = geo.chunk_rows / attention::block_n(static_cast<int>(d));
      hooks.flags_per_head = geo.chunks;
      hooks.flag_batch_stride = geo.chunks;
      hooks.flag_head_stride = 0;
      hooks.kv_ready_value = 1;  // e = *epoch + 1
      hooks.kv_ready_epoch = view.epoch;
      hooks.kv_ready_epoch_scale = 1;
      hooks.timeout_s = static_cast<double>(view.timeout_ns) * 1e-9;
      hooks.diag = view.diag;
      hooks.rank = rank;
      hooks.group = view.group_id;
      hooks.peer = (rank + world - 1) % world;  // the shard arrives from rank r - 1
      set_ring_wait_options(hooks);
    }
    const attention::HookArgs* hp = j > 0 ? &hooks : nullptr;
    const StepCall sc = step_call(q, k, rank, world, j, causal, kj, vj, part, lse_part);
    // Steps with a send beside them (all but the last) leave its SMs free.
    launch_step_engine(q, k, sc.c, scale, hp, stream,
                       j + 1 < world ? std::max(1, sms - kSendCtas) : 0);
    merge_rows(out_acc, lse_acc, part, lse_part, sc.row0, sc.rows, stream);
    if (j + 1 < world) {
      // Buffer j % 2 is free once this step's engine and send are done with it (credit for
      // rank r - 1's send j + 1, which refills it; the last send needs none, but the call
      // ends after it).
      sent[static_cast<size_t>(j)].block(at::cuda::getCurrentCUDAStream());
      if (j + 2 < world) check(ring_attention::release(view, j, stream), "release");
    }
  }
  check(ring_attention::end(view, stream), "exit");
  return {out_acc.to(q.scalar_type()), lse_acc};
}

std::tuple<at::Tensor, at::Tensor> ring_attention_cuda(const at::Tensor& q, const at::Tensor& k,
                                                       const at::Tensor& v, int64_t group,
                                                       int64_t world_size, bool causal,
                                                       std::optional<double> softmax_scale) {
  validate_ring_attention(q, k, v, group, world_size, softmax_scale);
  for (const auto& [name, t] :
       {std::pair<const char*, const at::Tensor&>{"q", q}, {"k", k}, {"v", v}})
    validation::check_aligned16(kOp, name, t);
  TORCH_CHECK_VALUE(q.size(3) % 8 == 0 && q.size(3) <= 256, kOp,
                    ": on CUDA the head dim must be a multiple of 8 up to 256 (the engine's 64 and "
                    "128; the others through torch's FlashAttention-2 kernel), got q: ",
                    q.sizes());
  if (world_size == 1) {  // the whole sequence is local: the attention engine
    static const auto engine =
        c10::Dispatcher::singleton()
            .findSchemaOrThrow("mkernel::attention", "")
            .typed<std::tuple<at::Tensor, at::Tensor>(const at::Tensor&, const at::Tensor&,
                                                      const at::Tensor&, bool,
                                                      std::optional<double>, int64_t, int64_t)>();
    return engine.call(q, k, v, causal, softmax_scale, 0, 0);
  }
  if (causal) {
    TORCH_CHECK_VALUE(q.size(1) == k.size(1) && q.size(1) % 2 == 0, kOp,
                      ": causal ring attention takes zigzag shards: q and k must have the same "
                      "even local length (q: ", q.sizes(), ", k: ", k.sizes(), ")");
  }
  if (q.size(0) == 0) {  // an empty batch (every rank's, as the call's shapes agree): no exchange
    validation::check_dtype_in(kOp, "q", q, {at::kBFloat16, at::kHalf}, "activations");
    return {at::empty_like(q), at::empty({0, q.size(2), q.size(1)}, q.options().dtype(at::kFloat))};
  }
  const double scale = softmax_scale.has_value() ? *softmax_scale
                                                 : 1.0 / std::sqrt(static_cast<double>(q.size(3)));
  return ring_attention_cuda_ring(q, k, v, group, world_size, causal, scale);
}

#endif  // MKERNEL_WITH_CUDA

// mkernel::ring_attention_backward (python/mkernel/_ring_backward.py, the native backward's ring
// mode): (dout, q, k, v, out, lse) of this rank's shard -> (dq, dk, dv) of it, in q's dtype.
// ONE launch of the backward's ring mode over every source's K/V, fp32 dK/dV partials by source:
//  - K/V: all-gathered first (the default), or (opt-in, MKERNEL_RING_BWD_ARRIVAL=1; one node,
//    the whole mode's geometry: block-aligned shards, causal zigzag halves a multiple of 128)
//    consumed as they arrive: the forward's send kernel (ring_kv_api.h send_whole, side stream)
//    forwards the shards around the ring into this rank's virtual K/V while the launch runs,
//    each CTA waiting for its key chunks' arrival flags, sources in arrival order
//    (BwdProblem::ring_kv_ready);
//  - dK/dV: on one node they travel to their owners inside the launch (the default;
//    MKERNEL_RING_BWD_TRAVEL=0 pins it off): each CTA stores its fp32 partial straight into the
//    source rank's receive area and releases a flag there (BwdProblem::ring_dk_dst), and the
//    owner sums the W slots per 64-row tile as their flags come up (ring_kv_api.h
//    sum_key_grads); else (across nodes, flags that don't fit, a receive area above
//    MKERNEL_RING_BWD_TRAVEL_MAX_MB) they are reduce-scattered after.
constexpr const char* kBwdOp = "mkernel.ring_attention_backward";

std::tuple<at::Tensor, at::Tensor, at::Tensor> ring_attention_backward_meta(
    const at::Tensor& dout, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
    const at::Tensor& out, const at::Tensor& lse, int64_t /*group*/, int64_t world_size,
    bool /*causal*/, double /*softmax_scale*/) {
  TORCH_CHECK_VALUE(k.dim() == 4 && world_size >= 1, kBwdOp, ": k must be [b, s, h_kv, d], got ",
                    k.sizes());
  return {at::empty_like(q), at::empty_like(k), at::empty_like(v)};
}

#ifdef MKERNEL_WITH_CUDA
// Opt-in (MKERNEL_RING_BWD_ARRIVAL=1): on one H100 under MPS (session 40, bench_ring_backward,
// ring_backward_nvidia_h100_80gb_hbm3_20261206-082825 / -082844 / -083228 / -083247.json) the
// launch on arrival ran 0.93-1.035x the launch after the all-gather (median 0.99): there the
// shards move through the same HBM the kernel reads and the gather costs ~1-3 % of the backward,
// while the send kernel holds SMs and the first CTAs wait. Over real links (NVLink, the FIFO) the
// gather is the part arrival hides — to be measured on a multi-GPU machine.
bool ring_backward_on_arrival() {
  const char* value = env::get("MKERNEL_RING_BWD_ARRIVAL");
  return value != nullptr && std::strcmp(value, "1") == 0;
}
// On arrival, dK/dV travel unless MKERNEL_RING_BWD_TRAVEL=0 (the reduce-scatter after instead).
bool ring_backward_travel() {
  const char* value = env::get("MKERNEL_RING_BWD_TRAVEL");
  return value == nullptr || std::strcmp(value, "0") != 0;
}

// The receive area dK/dV travel into stays in the group's symmetric memory after the call
// (2 x W x b s h_kv d fp32 a rank; the reduce-scatter's partials of that size are transient):
// above MKERNEL_RING_BWD_TRAVEL_MAX_MB a rank (default 2048; the measured rows of session 41 took
// up to 1024) the partials are reduce-scattered instead.
uint64_t ring_backward_travel_max_bytes() {
  const char* value = env::get("MKERNEL_RING_BWD_TRAVEL_MAX_MB");
  if (value == nullptr) return uint64_t{2048} << 20;
  char* end = nullptr;
  const long long mb = std::strtoll(value, &end, 10);
  TORCH_CHECK_VALUE(end != value && *end == '\0' && mb >= 0 && mb < (1LL << 40), kBwdOp,
                    ": MKERNEL_RING_BWD_TRAVEL_MAX_MB must be a whole number of MiB >= 0, got '",
                    value, "'");
  return static_cast<uint64_t>(mb) << 20;
}

// The fp32 partials by source [W * b, s, h_kv, d] summed at their owners, in k's dtype.
std::pair<at::Tensor, at::Tensor> scatter_key_grads(const at::Tensor& dk_all,
                                                    const at::Tensor& dv_all, int64_t group,
                                                    int64_t world_size, at::ScalarType dtype) {
  static const auto scatter = c10::Dispatcher::singleton()
                                  .findSchemaOrThrow("mkernel::reduce_scatter", "")
                                  .typed<at::Tensor(const at::Tensor&, int64_t, int64_t)>();
  return {scatter.call(dk_all, group, world_size).to(dtype),
          scatter.call(dv_all, group, world_size).to(dtype)};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> ring_attention_backward_cuda(
    const at::Tensor& dout, const at::Tensor& q, const at::Tensor& k_in, const at::Tensor& v_in,
    const at::Tensor& out, const at::Tensor& lse, int64_t group, int64_t world_size, bool causal,
    double softmax_scale) {
  TORCH_CHECK_VALUE(q.dim() == 4 && k_in.dim() == 4 && k_in.sizes() == v_in.sizes(), kBwdOp,
                    ": q, k and v must be 4-D, k and v alike, got q ", q.sizes(), ", k ",
                    k_in.sizes(), ", v ", v_in.sizes());
  TORCH_CHECK_VALUE(k_in.scalar_type() == q.scalar_type() && v_in.scalar_type() == q.scalar_type(),
                    kBwdOp, ": k and v must have q's dtype ", q.scalar_type());
  // The ring mode's shapes, checked before any of the call's kernels is queued.
  TORCH_CHECK_VALUE(
      k_in.size(0) == q.size(0) && k_in.size(1) == q.size(1) && k_in.size(3) == q.size(3), kBwdOp,
      ": the native ring mode takes k / v shards of q's batch, length and head dim, got q ",
      q.sizes(), ", k ", k_in.sizes());
  for (const auto& [name, t] :
       {std::pair<const char*, const at::Tensor&>{"k", k_in}, {"v", v_in}}) {
    TORCH_CHECK_VALUE(t.device() == q.device(), kBwdOp, ": ", name, " must be on q's device ",
                      q.device(), ", got ", t.device());
  }
  const c10::cuda::CUDAGuard guard(q.device());
  const at::Tensor k = k_in.contiguous(), v = v_in.contiguous();
  comm::SymmetricGroup& g = comm::SymmetricGroup::get(kBwdOp, group, world_size, q.device());
  const int rank = g.rank(), world = g.world();
  const int64_t b = q.size(0), s = q.size(1), h = q.size(2), d = q.size(3), h_kv = k.size(2);
  // Arrival and travel take the dQ-warp kernel (the default; MKERNEL_ATTN_BWD_KERNEL may pin
  // another for measurement) on one node, where the ranks' data regions are peer memory.
  const char* kernel = env::get("MKERNEL_ATTN_BWD_KERNEL");
  const bool fused = g.single_node() && world > 1 && (d == 64 || d == 128) &&
                     (q.scalar_type() == at::kBFloat16 || q.scalar_type() == at::kHalf) &&
                     (kernel == nullptr || std::strcmp(kernel, "wgmma_ws_dqwarp") == 0);
  std::optional<ring_attention::Geometry> geo;  // set: K/V consumed on arrival
  if (fused && ring_backward_on_arrival() && k.size(1) == s &&
      (!causal || (s % 2 == 0 && (s / 2) % 128 == 0)) &&
      reinterpret_cast<uintptr_t>(k.data_ptr()) % 16 == 0 &&
      reinterpret_cast<uintptr_t>(v.data_ptr()) % 16 == 0) {
    geo = whole_geometry(k, world);
  }
  const ring_attention::KeyGradShape grads_shape{static_cast<int>(b), static_cast<int>(s),
                                                 static_cast<int>(h_kv), static_cast<int>(d)};
  const bool travel =
      fused && ring_backward_travel() && ring_attention::key_grads_fit(grads_shape, world) &&
      ring_attention::key_grads_bytes(grads_shape, world) <= ring_backward_travel_max_bytes();
  BackwardRing ring{true, world, rank};
  at::Tensor k_all, v_all;
  if (!geo) {  // the shards all-gathered first (collectives.cpp), then one launch over them
    static const auto gather = c10::Dispatcher::singleton()
                                   .findSchemaOrThrow("mkernel::all_gather", "")
                                   .typed<at::Tensor(const at::Tensor&, int64_t, int64_t)>();
    k_all = gather.call(k, group, world_size);
    v_all = gather.call(v, group, world_size);
    if (!travel) {
      auto [dq, dk_all, dv_all] =
          run_native_backward(dout, q, k_all, v_all, out, lse, causal, softmax_scale, ring);
      auto [dk, dv] = scatter_key_grads(dk_all, dv_all, group, world_size, k.scalar_type());
      return {dq, dk, dv};
    }
  }
  int64_t scale_bits = 0;
  std::memcpy(&scale_bits, &softmax_scale, sizeof(scale_bits));
  // Every rank must agree on the call (the entry barrier checks it): 2, the backward, with
  // whether K/V arrive and dK/dV travel (a rank without travel would wait for flags nobody
  // releases).
  const uint64_t sig = comm::call_signature(
      comm::kOpRingAttention, {static_cast<int64_t>(q.scalar_type()), b, s, h, d, h_kv,
                               causal ? 1 : 0, scale_bits, 2, geo ? 1 : 0, travel ? 1 : 0});
  // The data region: the virtual K/V on arrival, then the dK/dV receive area when travelling.
  const uint64_t grads_offset = geo ? ring_attention::key_grads_offset(*geo, world) : 0;
  g.ensure(kBwdOp,
           grads_offset + (travel ? ring_attention::key_grads_bytes(grads_shape, world) : 0));
  const comm::GroupDevice view = g.device_view();  // after ensure: the current mappings
  const cudaStream_t stream = at::cuda::getCurrentCUDAStream();
  auto check = [&](cudaError_t err, const char* what) { check_launch(g, err, what); };
  check(ring_attention::begin(view, sig, stream), "entry (backward)");
  ring.arrival_epoch = view.epoch;  // the call's number, for the arrival and travel flags
  std::optional<at::cuda::CUDAEvent> sent;
  if (geo) {
    const at::cuda::CUDAStream side = at::cuda::getStreamFromPool(true, q.device().index());
    at::cuda::CUDAEvent entered;
    entered.record(at::cuda::getCurrentCUDAStream());
    entered.block(side);
    // The send kernel first, on the side stream, and the backward only once every send CTA
    // runs (wait_send_started): the backward's CTAs wait for the shards the peers' send
    // kernels forward, so none of them may hold the SMs a send kernel needs.
    check(ring_attention::send_whole(view, *geo, k.data_ptr(), v.data_ptr(), causal, kSendCtas,
                                     side.stream()),
          "send (backward)");
    sent.emplace();
    sent->record(side);
    uint8_t* kv = view.data[rank];
    copy_own_shard(k, v, kv, *geo, world, stream);
    check(ring_attention::mark_whole(view, *geo, rank, world - 1, 0, geo->batch, stream),
          "mark (backward)");
    check(ring_attention::wait_send_started(
              view, ring_attention::send_whole_grid(view, *geo, kSendCtas), stream),
          "send-start wait (backward)");
    const uint64_t v_off = static_cast<uint64_t>(world) * geo->shard_bytes();
    const std::array<int64_t, 4> virt{world * b, s, h_kv, d};
    k_all = at::from_blob(kv, virt, k.options());
    v_all = at::from_blob(kv + v_off, virt, k.options());
    ring.arrival_flags = view.flags[rank] + ring_attention::whole_slot(world, geo->chunks, 0, 0, 0);
    ring.arrival_chunk_rows = geo->chunk_rows;
    ring.arrival_chunks = geo->chunks;
    ring.arrival_timeout_ns = view.timeout_ns;
    ring.arrival_diag = view.diag;
    ring.arrival_group = view.group_id;
    ring.arrival_peer = (rank + world - 1) % world;  // every shard arrives from rank r - 1
  }
  if (travel) {  // this rank's slot and flags in every source's receive area
    for (int src = 0; src < world; ++src) {
      ring.travel_dk[static_cast<size_t>(src)] =
          reinterpret_cast<float*>(view.data[src] + grads_offset) +
          attention::ring_travel_offset(rank, grads_shape.batch, grads_shape.seq,
                                        grads_shape.heads_kv, grads_shape.head_dim);
      ring.travel_flags[static_cast<size_t>(src)] =
          view.flags[src] + ring_attention::key_grads_slot(grads_shape, rank);
    }
    ring.travel_dv_offset = attention::ring_travel_offset(
        world, grads_shape.batch, grads_shape.seq, grads_shape.heads_kv, grads_shape.head_dim);
  }
  auto [dq, dk_all, dv_all] =
      run_native_backward(dout, q, k_all, v_all, out, lse, causal, softmax_scale, ring);
  at::Tensor dk, dv;
  if (travel) {
    dk = at::empty_like(k);
    dv = at::empty_like(v);
    check(ring_attention::sum_key_grads(view, grads_shape, grads_offset,
                                        q.scalar_type() == at::kBFloat16, dk.data_ptr(),
                                        dv.data_ptr(), stream),
          "dK/dV sum (backward)");
  }
  if (sent) sent->block(at::cuda::getCurrentCUDAStream());
  check(ring_attention::end(view, stream), "exit (backward)");
  if (!travel)
    std::tie(dk, dv) = scatter_key_grads(dk_all, dv_all, group, world_size, k.scalar_type());
  return {dq, dk, dv};
}
#endif  // MKERNEL_WITH_CUDA

}  // namespace

TORCH_LIBRARY_IMPL(mkernel, Meta, m) {
  m.impl("ring_attention", &ring_attention_meta);
  m.impl("ring_attention_compute_alone", &compute_alone_meta);
  m.impl("ring_attention_backward", &ring_attention_backward_meta);
}
TORCH_LIBRARY_IMPL(mkernel, CPU, m) {
  m.impl("ring_attention", &ring_attention_cpu);
  m.impl("ring_attention_compute_alone", &compute_alone_cpu);
}
#ifdef MKERNEL_WITH_CUDA
TORCH_LIBRARY_IMPL(mkernel, CUDA, m) {
  m.impl("ring_attention", &ring_attention_cuda);
  m.impl("ring_attention_compute_alone", &compute_alone_cuda);
  m.impl("ring_attention_backward", &ring_attention_backward_cuda);
}
#endif  // MKERNEL_WITH_CUDA

}  // namespace mkernel
