// The registry of the MKERNEL_* environment variables the C++ side reads (env_knobs.h). Plain
// C++17, no torch: linked into the extension and into the copier helper.
//
// Adding a variable: one entry below (sorted by name; a static_assert says where the order
// breaks), then read it with env::get("MKERNEL_..."). The read site keeps its own parsing and
// error message; the doc here is one line, the read site's comment says the rest.
// tests/core/test_env_knobs.py parses this table: keep each entry a brace-enclosed
// {"NAME", kind, "values", "default", "doc"} (adjacent string literals may continue a doc).
#include "env_knobs.h"

#include <cstdlib>
#include <stdexcept>
#include <string>

namespace mkernel::env {
namespace {

constexpr Kind kDebug = Kind::kDebug;
constexpr Kind kConfig = Kind::kConfig;

constexpr Knob kKnobs[] = {
    // attention_backward.cpp
    {"MKERNEL_ATTN_BWD_KERNEL", kDebug,
     "wgmma | wgmma_bulk_dq | wgmma_ws | wgmma_ws_dqwarp | mma_sync", "wgmma_ws_dqwarp",
     "measurement: the native attention backward's main kernel (dQ by bulk reduce-add; warp-"
     "specialized TMA loads; that with FA3's step order and a dQ warp; the mma.sync first "
     "version)"},
    {"MKERNEL_ATTN_BWD_L2_SECTION_MB", kDebug, "integer MiB", "40",
     "measurement: the native causal backward's L2 section budget (the Q, dO and dq_accum bytes "
     "of the (kv head, batch) pairs whose CTAs run together)"},
    {"MKERNEL_ATTN_BWD_TILE_ORDER", kDebug, "lpt | grid", "lpt",
     "measurement: the wgmma_ws_dqwarp backward's causal CTA order (longest first in L2-sized "
     "sections of heads; the plain grid order)"},
    // attention.cpp
    {"MKERNEL_ATTN_L2_SECTION_MB", kDebug, "integer MiB", "4 non-causal, 24 causal",
     "measurement: the forward's L2 section budget (the K/V bytes of the (batch, head) pairs "
     "whose tiles run together)"},
    {"MKERNEL_ATTN_VARIANT", kDebug, "integer N", "the default mainloop",
     "measurement: mainloop variant N for plain bf16 d=128 128x128 attention calls"},
    // cache_file.cpp
    {"MKERNEL_CACHE_DIR", kConfig, "directory", "$XDG_CACHE_HOME/mkernel, else ~/.cache/mkernel",
     "where mkernel's cache files live (the GEMM plans, the fused ops' verdicts)"},
    // session_layout.cpp, moe_net.cpp (set per rank by `mkernel launch`)
    {"MKERNEL_EMULATED_NODE", kConfig, "node id", "unset: one node per host",
     "this rank's emulated node: ranks of one host with other values are other nodes"},
    // fused_common.cpp, ag_gemm.cpp (the fused ops; every rank must see the same values)
    {"MKERNEL_FUSED", kDebug, "off|force", "unset: choose_path's measured pick",
     "off pins the unfused path, force the fastest fused config"},
    {"MKERNEL_FUSED_AG_CHUNK_ROWS", kDebug, "power of two in [1, 128]", "~128 KiB chunks",
     "ag_gemm: rows per arrival flag of the fused all-gather"},
    {"MKERNEL_FUSED_AG_COPY_ENGINE", kDebug, "0|1|auto", "0",
     "ag_gemm: the rows moved by the copy engines (1: that route only where it fits, auto: "
     "measured)"},
    {"MKERNEL_FUSED_AG_ORDER", kDebug, "natural", "unset: the default unit order",
     "ag_gemm: the M units in their natural order"},
    {"MKERNEL_FUSED_AG_PEER_TMA", kDebug, "0|1|auto", "auto",
     "ag_gemm: 1 the peer-TMA kernel wherever it fits, 0 the copy kernel only"},
    {"MKERNEL_FUSED_ALIGN", kDebug, "1", "off",
     "choose_path aligns the ranks before each timed sample"},
    {"MKERNEL_FUSED_BUCKET", kDebug, "0", "on",
     "0: choose_path measures every M; by default a shape reuses its M bucket's verdict"},
    {"MKERNEL_FUSED_BUDGET_S", kDebug, "number in [0.1, 30]", "0.8",
     "measurement: seconds of choose_path's paired rounds after the warm-up"},
    {"MKERNEL_FUSED_C1X1", kDebug, "1", "off",
     "the cluster-free 128x256 fused kernel where the model picks the 2x1-cluster one"},
    {"MKERNEL_FUSED_C1X1_GRID", kDebug, "integer in [1, grid]", "126/132 of the MPS share",
     "the co-resident grid of cluster-free configs"},
    {"MKERNEL_FUSED_CONFIG", kDebug, "config name", "unset: the model's candidates",
     "that fused config only, whatever the shape"},
    {"MKERNEL_FUSED_CO_GRID", kDebug, "even integer in [2, grid]", "3/4 of the MPS share",
     "the co-resident grid instead of the 3/4 rule"},
    {"MKERNEL_FUSED_GATE", kDebug, "0|1", "the co-resident plans gated",
     "1 gates every fused launch on the peers' previous grids, 0 none"},
    {"MKERNEL_FUSED_GATE_GPU", kDebug, "0|1", "off",
     "across emulated nodes sharing a GPU, also wait for the other nodes' fused grids"},
    {"MKERNEL_FUSED_GATE_MODE", kDebug, "barrier", "unset: the exit gate",
     "the gate also waits for every same-node peer's gate of the same call"},
    {"MKERNEL_FUSED_GRIDS", kDebug, "share|both", "both grids, co-resident only across nodes",
     "which grids choose_path measures (share: the share's grid only)"},
    {"MKERNEL_FUSED_NODES", kDebug, "0|1", "the op's default (off)",
     "fused kernels on groups spanning several nodes"},
    {"MKERNEL_FUSED_ORDER", kDebug, "<1|2|4|8><m|n>", "unset: choose_path's orders",
     "pins the tile order: swizzle and raster axis"},
    {"MKERNEL_FUSED_ORDERS", kDebug, "1", "off", "also measure narrower tile orders at long K"},
    {"MKERNEL_FUSED_RS_COPY_ENGINE", kDebug, "0|1|auto", "0",
     "gemm_rs: per-owner GEMMs whose partials the copy engines move, then a local reduce (1: "
     "that route only where it fits, auto: measured)"},
    {"MKERNEL_FUSED_RS_NODES_COALESCE", kDebug, "integer in [0, 64]", "0",
     "gemm_rs across nodes: up to n tiles per FIFO command to one owner"},
    {"MKERNEL_FUSED_SAMPLE_CALLS", kDebug, "integer in [1, 64]",
     "~40 GFLOP's worth, 2 to 16; a test round's: ~50 ms of the fastest path",
     "measurement: choose_path's calls per timed sample (a screen round's: half)"},
    {"MKERNEL_FUSED_SAMPLE_MS", kDebug, "number in [1, 1000]", "50",
     "measurement: ms of the fastest path a choose_path test sample spans"},
    {"MKERNEL_FUSED_SIDE", kDebug, "regs|staged|idle|bulk|pipe", "the op's measured mode",
     "pins the side warps' mode"},
    {"MKERNEL_FUSED_SMS", kDebug, "integer n >= 2", "the share's grid",
     "a smaller persistent fused grid"},
    {"MKERNEL_FUSED_TAIL", kDebug, "regs|staged", "the op's mode",
     "pins the reduce consumers' tail mode"},
    {"MKERNEL_FUSED_TIMELINE", kDebug, "path", "off",
     "per-CTA timeline of each fused launch appended to <path>.rank<r> (synchronizes)"},
    {"MKERNEL_FUSED_TIMELINE_CALLS", kDebug, "integer in [2, 16]", "1",
     "launches the timeline buffer holds before it synchronizes and appends"},
    {"MKERNEL_FUSED_TRIGGER", kDebug, "early|late", "late",
     "where the fused kernel triggers its dependents' launch"},
    {"MKERNEL_FUSED_VERBOSE", kDebug, "1", "off", "choose_path's verdicts and captures on stderr"},
    // fused_verdict_store.cpp
    {"MKERNEL_FUSED_VERDICT_CACHE", kConfig, "0", "on",
     "0 keeps the fused ops' first-call verdicts in memory: every process measures again"},
    // gemm_ar.cpp
    {"MKERNEL_GEMM_AR_ALGO", kDebug, "oneshot|twoshot", "by shape",
     "forces gemm_ar's fused algorithm (also at decode sizes)"},
    // gemm_autotune.cpp, gemm.cpp, gemv.cpp, kernels/gemm/gemm_dispatch.cu
    {"MKERNEL_GEMM_AUTOTUNE", kDebug, "0", "on", "0 turns the GEMM autotuner off"},
    {"MKERNEL_GEMM_AUTOTUNE_LOG", kDebug, "1", "off", "one stderr line per tuned shape and stage"},
    {"MKERNEL_GEMM_AUTOTUNE_WARM_MS", kDebug, "integer ms", "until the call time settles (<= 1500)",
     "measurement: the tuner's warm-up before its timed rounds, fixed at N ms (100: before session "
     "52)"},
    {"MKERNEL_GEMM_GEMV", kDebug, "0", "on", "0 keeps GEMMs of M <= 8 off the GEMV kernels"},
    {"MKERNEL_GEMM_GROUPED_C1X2", kDebug, "1", "off",
     "the grouped GEMM also times the 1x2-cluster configs"},
    {"MKERNEL_GEMM_PLAN_CACHE", kConfig, "0", "on", "0 turns the GEMM plan cache file off"},
    {"MKERNEL_GEMM_SMALLM_FASTPATH", kDebug, "0", "on",
     "0 takes the full small-M path instead of the cached plan lookup"},
    {"MKERNEL_GEMM_SMALLM_GEMV16", kDebug, "1", "off",
     "the tuner times the GEMV again at 9-16 rows on wide weights"},
    {"MKERNEL_GEMM_SMALLM_S10", kDebug, "1", "off",
     "session 10's swapped variants 11-14 as small-M candidates"},
    {"MKERNEL_GEMM_SMALLM_S11", kDebug, "1", "off", "session 11's split-K small-M candidates"},
    {"MKERNEL_GEMM_SMALLM_S12", kDebug, "1", "off",
     "session 12's ticketed swapped variants 17-20 as candidates"},
    {"MKERNEL_GEMM_SMALLM_S13", kDebug, "1", "off",
     "session 13's swap_128x336_wide as a candidate"},
    {"MKERNEL_GEMM_SMALLM_S14", kDebug, "1", "off",
     "gemm14's clustered 176-wide swapped variants as candidates"},
    {"MKERNEL_GEMM_SMALLM_S15", kDebug, "1", "off",
     "gemm15's 168-wide swapped variants as candidates"},
    {"MKERNEL_GEMM_SMALLM_S9", kDebug, "1", "off",
     "session 9's row-split and K-chunked GEMV variants as candidates"},
    // moe_nodes.cpp, moe_net.cpp (the MoE across nodes; every rank must see the same values)
    {"MKERNEL_MOE_COMBINE_EARLY", kDebug, "0|1", "1",
     "the combine computes the other ranks' partials first and sends them early"},
    {"MKERNEL_MOE_COMBINE_PIECES", kDebug, "integer in [1, 16]", "16",
     "at most this many pieces per block in the pipelined combine"},
    {"MKERNEL_MOE_COMBINE_PIPELINE", kDebug, "0|1", "1",
     "the combine's partials pushed and summed piece by piece"},
    {"MKERNEL_MOE_DISPATCH_GATHER", kDebug, "bound|counted", "bound",
     "the sequential dispatch's row gather over the static bound or the counted rows"},
    {"MKERNEL_MOE_DISPATCH_ONLY", kDebug, "1", "off",
     "measurement: the dispatch returns the received rows, before the grouped GEMM"},
    {"MKERNEL_MOE_DISPATCH_PIPELINE", kDebug, "0|1|3", "1", "the several-node dispatch's mode"},
    {"MKERNEL_MOE_FINISH_AT_JOIN", kDebug, "0|1", "1",
     "the headed dispatch's finish (its spin until every peer's DONE) on the caller's stream at "
     "the join"},
    {"MKERNEL_MOE_FUSED", kDebug, "0|1|auto", "0",
     "1: the one-node dispatch's sends and the grouped GEMM in one persistent kernel after the "
     "layout launch (capacity 0); auto: the group's first eager call of a shape times it against "
     "the default path and keeps the faster (choose_path)"},
    {"MKERNEL_MOE_GATHER_A", kDebug, "0|1|auto", "auto: on where a rank has its GPU to itself",
     "1: the one-node grouped GEMM gathers the received rows where they landed (no expansion)"},
    {"MKERNEL_MOE_GATHER_SMS", kDebug, "integer >= 0", "0: every SM",
     "the headed dispatch's row gathers launch at most 8 CTAs per this many SMs"},
    {"MKERNEL_MOE_HEADED_SYNC", kDebug, "1", "off",
     "tests: the host syncs the device between the headed gather's halves"},
    {"MKERNEL_MOE_HOOKS_ON_CALLER", kDebug, "0|1", "1",
     "mode 1's per-piece row gathers on the caller's stream instead of a pool stream"},
    {"MKERNEL_MOE_LAYOUT", kDebug, "aten|kernel", "kernel",
     "the packed dispatch layout by ATen ops or by the routing and layout kernels"},
    {"MKERNEL_MOE_NET_PIECES", kDebug, "integer in [1, 15]", "15",
     "at most this many pieces per block in the headed gather"},
    {"MKERNEL_MOE_NODES_COMBINE", kDebug, "reduce|reduce16|allgather", "reduce",
     "the combine across nodes"},
    {"MKERNEL_MOE_NODES_PARTIAL", kDebug, "aten", "the partial-sum kernel",
     "aten: the combine's partial sums by ATen ops"},
    {"MKERNEL_MOE_NODES_PATH", kDebug, "substrate|ce", "ce on emulated nodes",
     "the MoE exchange by the copy engines or by the substrate's collectives"},
    {"MKERNEL_MOE_OP_STREAM", kDebug, "0|1", "1",
     "the dispatch and combine across nodes on mkernel's own stream"},
    {"MKERNEL_MOE_OVERLAP", kDebug, "0|1", "0",
     "1: the gathered dispatch + grouped GEMM in two launches each, the own rows' GEMM beside the "
     "sends"},
    {"MKERNEL_MOE_OVERLAP_SEND_CTAS", kDebug, "integer >= 1", "16",
     "MKERNEL_MOE_OVERLAP=1: CTAs of the send launch (two per SM); the own rows' GEMM takes the "
     "other SMs"},
    {"MKERNEL_MOE_PHASES", kDebug, "1", "off",
     "measurement: the MoE op's phases timed by CUDA events"},
    // moe_ep.cpp
    {"MKERNEL_MOE_ROUTING", kDebug, "aten", "the routing kernels",
     "aten: the MoE routing by ATen ops"},
    // comm/net_path.cpp (the transport's choice is the Go core's; these say what it will open)
    {"MKERNEL_NET", kConfig, "tcp|loopback|ibverbs|efa", "automatic",
     "forces one transport backend"},
    {"MKERNEL_NET_GDR", kConfig, "0|1", "1", "the loopback transport's GPU-direct emulation"},
    {"MKERNEL_NET_GDR_COPIER", kConfig, "thread|process", "process",
     "where the GPU-direct emulation's copies are submitted"},
    // comm/gdr_copier_serve.cpp (the copier helper)
    {"MKERNEL_NET_GDR_COPIER_BATCH", kDebug, "integer in [1, 512]", "256",
     "at most this many copies per copy-engine submission"},
    // comm/gdr_copier_launch.cpp
    {"MKERNEL_NET_GDR_COPIER_EXE", kConfig, "path", "mkernel-gdr-copier beside the extension",
     "the GPU-direct copier helper executable"},
    // comm/net_path.cpp
    {"MKERNEL_NET_GDR_COPIER_START_S", kConfig, "seconds > 0", "max(30 s, the op timeout)",
     "how long a path's opening waits for its copier process"},
    // comm/gdr_copier_launch.cpp
    {"MKERNEL_NET_GDR_COPIER_SUBMIT", kDebug, "ce|plain", "plain",
     "the copier's submission: the copy engines (batched) or cudaMemcpyAsync"},
    // comm/net_path.cpp
    {"MKERNEL_NET_GPU_MEMORY", kDebug, "0|1", "by transport",
     "0: host staging everywhere, 1: offer GPU memory for the inter-node buffers"},
    // kernels/collectives/collectives.cu (read once)
    {"MKERNEL_NET_MIRROR", kDebug, "1", "on under GPU-direct, else off",
     "inter-node arrival flags polled by one CTA, mirrored in device memory"},
    {"MKERNEL_NET_OVERLAP", kDebug, "0|1", "0",
     "collectives across nodes: deferred push waits, grid split into stagers and readers"},
    // comm/net_path.cpp
    {"MKERNEL_NET_PLUGIN", kConfig, "path", "unset: no plugin",
     "a transport backend plugin binary (takes precedence over MKERNEL_NET)"},
    // kernels/collectives/collectives.cu (read once)
    {"MKERNEL_NET_STAGE", kDebug, "parallel|whole", "parallel",
     "how a block bound for another node is staged"},
    {"MKERNEL_NET_STAGERS", kDebug, "0..7", "4",
     "the stagers' share of the grid in eighths under MKERNEL_NET_OVERLAP"},
    // session_layout.cpp, comm/net_pingpong.cpp
    {"MKERNEL_OP_TIMEOUT", kConfig, "seconds > 0", "60",
     "how long an op waits for its peers before it fails"},
    // comm/gdr_copier_launch.cpp (set by `import mkernel` under MKERNEL_NET_GDR=1)
    {"MKERNEL_PYTHON", kConfig, "path", "unset",
     "the interpreter of the Python fallback copier helper"},
    // ring_attention.cpp, attention.cpp (pins for tests and benchmarks)
    {"MKERNEL_RING_BLOCK_N", kDebug, "144", "the 128x128 tile",
     "144: the whole mode's non-causal bf16 d=128 engine on the 128x144 tile; every rank the same"},
    {"MKERNEL_RING_BWD_ARRIVAL", kDebug, "0|1", "0",
     "1: the native ring backward consumes the K/V shards as they arrive (one node, "
     "block-aligned shards) instead of all-gathering them first (ring_attention.cpp); every rank "
     "the same value"},
    {"MKERNEL_RING_BWD_TRAVEL", kDebug, "0|1", "1",
     "0: the native ring backward's fp32 dK/dV partials are reduce-scattered after its launch "
     "instead of travelling to their owners inside it (one node; ring_attention.cpp); every rank "
     "the same value"},
    {"MKERNEL_RING_BWD_TRAVEL_MAX_MB", kConfig, "integer >= 0", "2048",
     "the most MiB a rank's dK/dV receive area may take for the ring backward's partials to travel "
     "(it stays in the group's symmetric memory: 2 x W x b x s x h_kv x d fp32); above it they are "
     "reduce-scattered; every rank the same value"},
    {"MKERNEL_RING_CHUNKS", kDebug, "integer in [1, 16]", "4",
     "the whole mode's most key chunks (KV flags) per shard; every rank the same"},
    {"MKERNEL_RING_FLAG_CACHE", kDebug, "0|1", "1",
     "the hooked engine acquires a KV flag once per launch, not once per tile"},
    {"MKERNEL_RING_FLAG_SKIP", kDebug, "0|1", "1",
     "the hooked engine acquires a KV flag only for its first block"},
    {"MKERNEL_RING_FUSED_NODES", kDebug, "0|1", "1",
     "0 pins the all-gather path for groups spanning several nodes"},
    {"MKERNEL_RING_GRID", kDebug, "integer in [1, 1024]", "SMs less the send CTAs",
     "the whole mode's engine grid"},
    {"MKERNEL_RING_LATE_CLAIM", kDebug, "0|1", "1",
     "claimed tiles: a CTA claims its next tile after its last load of the current one"},
    {"MKERNEL_RING_MEASURE_NO_WAIT", kDebug, "1", "off",
     "the compute-alone ceiling's hooked launch skips its KV waits (measurement)"},
    {"MKERNEL_RING_MODE", kDebug, "step", "the whole-sequence mode where it fits",
     "step pins the per-step ring"},
    {"MKERNEL_RING_NODES_ORDER", kDebug, "last", "batch 0 first",
     "last pins the across-nodes send order of session 31 (the last batch's chunks first)"},
    {"MKERNEL_RING_OWN_COPY", kDebug, "1", "off (the engine reads the own shard in place)",
     "the whole mode copies the own shard into its virtual K/V before the engine"},
    {"MKERNEL_RING_OWN_FIRST", kDebug, "0|1", "on across nodes (workspace <= 2 GiB)",
     "the whole mode's engine computes every tile's own-shard keys before any peer's"},
    {"MKERNEL_RING_PHASES", kDebug, "path", "off",
     "the whole mode timed phase by phase, appended to <path>.rank<r> (synchronizes)"},
    {"MKERNEL_RING_REFILL", kDebug, "0|1", "1",
     "across nodes: engine CTAs on the send kernel's SMs once it ended"},
    {"MKERNEL_RING_SEND", kDebug, "engine|kernel", "by dtype and tile",
     "pins who forwards the KV shards: the engine or the send kernel"},
    {"MKERNEL_RING_SEND_CTAS", kDebug, "integer in [1, 16]", "by mode",
     "the send kernel with this many CTAs"},
    {"MKERNEL_RING_SEND_FIRST", kDebug, "1", "off",
     "the send kernel, and the engine starts once its CTAs run"},
    {"MKERNEL_RING_SPLIT_MASK", kDebug, "0|1", "0",
     "causal engine kernels run masked and visible KV blocks in two loops"},
    {"MKERNEL_RING_TILES", kDebug, "static", "claimed tiles",
     "static pins the whole mode's static tile order"},
};

constexpr std::size_t kCount = sizeof(kKnobs) / sizeof(kKnobs[0]);

constexpr int compare(const char* a, const char* b) {
  while (*a != '\0' && *a == *b) {
    ++a;
    ++b;
  }
  return static_cast<int>(static_cast<unsigned char>(*a)) -
         static_cast<int>(static_cast<unsigned char>(*b));
}

constexpr bool starts_with(const char* s, const char* prefix) {
  while (*prefix != '\0') {
    if (*s++ != *prefix++) return false;
  }
  return true;
}

// 0 where the table is in order, else the index of the first entry out of order (or doubled).
constexpr std::size_t first_unsorted() {
  for (std::size_t i = 1; i < kCount; ++i) {
    if (compare(kKnobs[i - 1].name, kKnobs[i].name) >= 0) return i;
  }
  return 0;
}
static_assert(first_unsorted() == 0,
              "env_knobs.cpp: kKnobs must be sorted by name, each name once (the lookup is a "
              "binary search)");

constexpr bool well_formed() {
  for (std::size_t i = 0; i < kCount; ++i) {
    const Knob& k = kKnobs[i];
    if (!starts_with(k.name, "MKERNEL_") || *k.values == '\0' || *k.dflt == '\0' ||
        *k.doc == '\0') {
      return false;
    }
  }
  return true;
}
static_assert(well_formed(),
              "env_knobs.cpp: every entry needs an MKERNEL_ name, values, a default and a doc");

}  // namespace

Table knobs() { return Table{kKnobs, kCount}; }

const Knob* find(const char* name) {
  if (name == nullptr) return nullptr;
  std::size_t lo = 0, hi = kCount;
  while (lo < hi) {
    const std::size_t mid = lo + (hi - lo) / 2;
    const int c = compare(kKnobs[mid].name, name);
    if (c == 0) return &kKnobs[mid];
    if (c < 0) {
      lo = mid + 1;
    } else {
      hi = mid;
    }
  }
  return nullptr;
}

const char* get(const char* name) {
  if (find(name) == nullptr) {
    throw std::invalid_argument(std::string("mkernel: env variable ") +
                                (name != nullptr ? name : "(null)") +
                                " is read but not registered in csrc/env_knobs.cpp");
  }
  return std::getenv(name);
}

}  // namespace mkernel::env
