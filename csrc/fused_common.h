// Torch glue shared by the fused GEMM + communication ops (ag_gemm, gemm_rs, gemm_ar) on CUDA:
// the group's symmetric state, the launch of the fused kernel (kernels/fused/fused_api.h), the
// M-unit order, and the once-per-process notes of a fallback.
#pragma once

#ifdef MKERNEL_WITH_CUDA

#include <ATen/ATen.h>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "comm/symmetric_group.h"
#include "kernels/fused/fused_api.h"

namespace mkernel::fused_glue {

// The engine Problem of a [rows, k] · w[n, k]ᵀ -> d GEMM whose A lives at `a` (device memory
// of w's dtype).
gemm::Problem problem(const char* op, const void* a, const at::Tensor& w, void* d, int64_t rows,
                      int64_t n, int64_t k);

// A fused launch's tile config and persistent tile order (gemm::Launch swizzle / raster; 0, 0:
// the scheduler's default, bands of 8 M units walked along N).
struct FusedPlan {
  gemm::ConfigId config;
  int swizzle = 0;
  int raster = 0;  // 1: along M, 2: along N
  // Persistent grid (CTAs): 0 = fused_grid; else at most this many (the co-resident grid under
  // an MPS limit, candidate_plans).
  int grid = 0;
  // ag_gemm only: this plan on the peer-TMA kernel (fused_ag_route.h; the op passes `launch`
  // its peer_a sources) rather than the copy-role kernel. candidate_plans never sets it; it
  // names the route in choose_path's verbose lines.
  bool peer_tma = false;
  // ag_gemm: this plan on the copy kernel with the copy engines moving the rows
  // (fused_copy_engine.h; the op passes `launch` the call's copies). gemm_rs: the copy-engine
  // route (fused_copy_engine.h RsCopyEngine) in place of the fused kernel, which runs this plan
  // inside graph capture. Names the route too.
  bool copy_engine = false;
};

struct AgCopyEngineCall;  // fused_copy_engine.h

// Launches the fused kernel on the current stream with `hooks`; errors name `op`. `order` is
// the priority of each source rank (lower = earlier) for ordering the M units by the rows' owners
// (rank_rows rows per rank), or empty for the natural order; interleave: the owners' units
// alternate (the same order on every rank; order is then ignored).
void launch(const char* op, int64_t group, const gemm::Problem& p, const FusedPlan& plan,
            const at::Tensor& like, const fused::FusedParams& hooks, const std::vector<int>& order,
            int64_t rank_rows, bool interleave = false,
            const std::vector<const void*>* peer_a = nullptr,
            const AgCopyEngineCall* copy_engine = nullptr);
// (peer_a: ag_gemm's MKERNEL_FUSED_AG_PEER_TMA kernel, fused_peer_tma.cuh: source s's rows,
// rank_rows of them, are loaded by TMA from peer_a[s]; null: the kernel's own A.
// copy_engine: ag_gemm's copy-engine route: the launch gate in barrier mode resetting the route's
// flags, the side streams' copies forked after it, the kernel, then the join.)

// The fused kernel's persistent grid (CTAs) for a rank of `group`: this process's SMs, except
// where several ranks of the group share this GPU with no MPS SM limit (an MPS client without
// CUDA_MPS_ACTIVE_THREAD_PERCENTAGE sees every SM): then SMs / sharers, so the ranks' grids fit
// on the GPU together — a grid of every SM per rank would let one rank's CTAs hold every SM
// while they wait for tiles of a rank whose CTAs cannot be placed. Why ranks run with no limit:
// under an MPS limit of 100/W % the second rank's kernel gets ~30 of its 66 SMs while the first
// holds 66 (benchmarks/NOTES.md, session 8). The sharers are counted once per group (host name
// + GPU UUID all-gathered over the session: collective, at the group's first fused launch).
// MKERNEL_FUSED_SMS=<n> (measurement) pins a smaller grid.
int fused_grid(const char* op, int64_t group);

// Ranks of `group` on this process's GPU, this one included: host name + GPU UUID all-gathered
// over the session (collective at the group's first call, cached per group after it).
int gpu_sharers(const char* op, int64_t group);

// Under an MPS SM limit (CUDA_MPS_ACTIVE_THREAD_PERCENTAGE < 100): the grid at which the ranks'
// fused kernels all run at once, 3/4 of `grid` in whole 2-CTA clusters; 0 without a limit.
// Measured (s8run2, W = 2, 66 SMs per rank, one CTA per SM): MPS places at most 48 2-CTA
// clusters of the two clients at once (96 of 132 SMs: with grids of 66 one rank holds 66 and the
// other 30, the rest waiting a whole GEMM; with 64 / 60 it holds 32 / 36), but grids of 48 both
// run whole; without clusters 126. At the share's grid a gemm_rs runs the two ranks' GEMMs one
// after the other (Llama fc2 W=2: 9.09 ms), at 48 together (6.33 ms, unfused 9.16).
// MKERNEL_FUSED_CO_GRID=<even n <= grid> (opt-in, every rank the same) replaces the 3/4 rule:
// it was measured at W = 2 only; how many clusters four clients get placed is what
// benchmarks/mps_place.py measures (NOTES "Fused ops, fused12").
int co_resident_grid(int grid);

// MKERNEL_FUSED_C1X1=1 (opt-in, fused18): candidate_configs offers the cluster-free
// coop_128x256_c1x1 in place of coop_128x256_c2x1, and its co-resident grid is
// co_resident_grid_c1 (126/132 of the share: 63 at W = 2, 30 at W = 4; MKERNEL_FUSED_C1X1_GRID=<n>
// replaces the rule), where MPS places 1-CTA grids on 126 SMs for two clients, 2-CTA clusters
// on 96 (benchmarks/NOTES.md "fused18").
bool c1x1_requested();
int co_resident_grid_c1(int grid);

// The launch gate (kernels/fused/fused_gate_api.h): before each fused launch, one warp on the
// stream waits until every same-node peer's previous fused kernel has exited, so that the
// ranks' grids are placed together from a GPU their previous grids have left. Why: under MPS
// the co-resident grids (W = 2: 48 + 48 CTAs in 2-CTA clusters, the 96 SMs MPS places for two
// clients) fit together only when placed that way; back to back, a rank that ends first
// launches its next grid while a peer's previous one still holds SMs, the peer's next grid is
// then placed in part (s10run1 ag_gemm Llama fc1: 32 of 48 CTAs) and the ranks stay out of step
// (~1.8x per call; benchmarks/NOTES.md "Fused ops, fused11"). MKERNEL_FUSED_GATE=1 gates every
// fused launch, =0 none; unset: the plans on the co-resident grid (plan.grid > 0) when
// kGateCoResidentByDefault. s10run2 (ag_gemm Llama fc1 W=2): grid 48 gated 6.24 ms per call vs
// 9.84 ungated (engine GEMM alone 6.58); the share's grid gated 8.82 vs 8.32 ungated, hence the
// co-resident grid only. Every rank should see the same value (a rank without the gate is
// correct, only not gated). It joins choose_path's verdict key (it changes what a call costs).
constexpr bool kGateCoResidentByDefault = true;  // s10run2: correct (W=2/4, all ops, graph)
bool gate_requested(const FusedPlan& plan);
// MKERNEL_FUSED_GATE_MODE=barrier (opt-in, every rank the same; not yet run on a GPU): the gate
// also waits until every same-node peer's gate of the same call has started (fused_gate.cu), so
// every rank's stream has drained what precedes its fused call before any grid is placed (the
// exit gate keeps the peers' previous fused grids off the GPU, not their other kernels).
bool gate_barrier_requested();

// gemm_rs / gemm_ar on one node (kModeReduce): the GEMM x · wᵀ [M, N] into this rank's
// symmetric data region, its tiles (by owner priority `order`, rank_rows rows per owner) flagged
// as stored; the REDUCE role sums rows [row0, row0 + rows) over the ranks into `out` (fresh,
// its first row is row out_row0 of the product). two_shot (gemm_ar): rows_per_rank rows per
// owner, each rank reduces its block and copies the others' reduced blocks into out. Returns
// false (nothing launched, the same on every rank: it reads shapes only) when the fused kernel
// cannot take the shape; `why` says why.
struct ReduceLayout {
  int64_t row0 = 0, rows = 0, out_row0 = 0;
  bool two_shot = false;
  int64_t rows_per_rank = 0;
  bool interleave = false;  // the owners' (rows_per_rank) M units alternate (gemm_rs)
  // gemm_rs on a group spanning several nodes (MKERNEL_FUSED_NODES=1, opt-in): partial tiles
  // of the other nodes' rows go through the inter-node path (fused_hooks.cuh "kModeReduce
  // across nodes"); reduce_fits also checks the arrival slots this takes.
  bool nodes = false;
  // Across nodes: the group's world size (0: M / rows_per_rank, gemm_rs's exact blocks). gemm_ar
  // across nodes passes it: with ragged M (rows_per_rank = ceil(M / W)) the last owners hold
  // fewer rows or none, but every rank still has a block in the inter-node areas.
  int64_t world = 0;
};
// Whether reduce_call takes the shape (shapes only: the same answer on every rank); `why` says
// why not.
bool reduce_fits(const char* op, int64_t group, const at::Tensor& x, const at::Tensor& w,
                 const ReduceLayout& layout, const char** why);
bool reduce_call(const char* op, int64_t group, int32_t wait_op, comm::SymmetricGroup& sg,
                 const at::Tensor& x,
                 const at::Tensor& w, const ReduceLayout& layout, const at::Tensor& out,
                 const std::vector<int>& order, const FusedPlan& plan, const char** why);

// The substrate's collective `name` (mkernel::all_gather / reduce_scatter / all_reduce:
// Tensor(Tensor x, int group, int world_size)); raises naming `op` when it is not registered.
at::Tensor substrate_collective(const char* op, const char* name, const at::Tensor& x,
                                int64_t group, int64_t world_size);

// Logs (once per process and `what`) that `op` runs unfused and why.
void note_fallback(const char* op, const char* why);

// Whether the current stream is capturing a CUDA graph.
bool capturing();

// Which of `paths` runs a call: paths[0 .. size-2] are the fused kernel in each candidate
// config (candidate_configs order), paths.back() the unfused path (substrate collective +
// engine GEMM); the same answer on every rank of the group. The first eager call of a shape
// (`key`: op, dims, dtype) runs each on every rank (fused17, fused_verdict.h): a warm-up call
// each, then rounds that time every active path once in a rotating order, reversed in odd
// rounds (each sample an untimed lead-in call then `flops`-set calls: ~40 GFLOP, 2-16; half in
// the 2 screen rounds), the round's samples exchanged over the group's session after each
// round, a path's figure in a round its slowest rank's sample. Round 0 drops a fused candidate
// > 8x the fastest path or > 1.3x the best fused one; after round 1 the screen keeps at most two
// fused finalists and plans 4-15 test rounds from a ~0.8 s budget (after the warm-up); a
// finalist is kept only if it beats the unfused path by 1 % in enough paired test rounds for a
// one-sided sign test at 1/16 (shared by the finalists); between two finalists the lower paired
// median; the rounds stop once the tests are settled. Not confident: the unfused path
// (within the noise the unfused path is the safe side). The verdict is cached per process and
// an unfused verdict is logged once (note_fallback). Inside CUDA-graph capture a cached verdict
// runs as outside (a graph captures the path the group measured, never a per-rank guess) and an
// unmeasured shape runs paths[0] (no timing can happen there); with MKERNEL_FUSED_VERBOSE=1 each
// capture says which ("<op>: graph capture at <key>: ..."). MKERNEL_FUSED=off pins the unfused
// path, MKERNEL_FUSED=force the fastest fused config (from the same measurement), for measuring
// both sides (benchmarks/bench_fused.py) and testing the kernels. The paths enqueue one call each
// on the current stream.
// With MKERNEL_FUSED_VERBOSE=1 (measurement; read when a shape is measured), a fused verdict
// is printed to stderr with its plan from `plans` (paths[i] runs plans[i]), as a fallback is.
// With MKERNEL_FUSED_ALIGN=1 (opt-in, not yet run on a GPU; every rank of the group must see the
// same value — a rank without it would meet the others' barrier with another call, which the
// entry barrier reports as a signature mismatch naming the peer) and world_size > 1, the ranks
// are aligned before every timed sample (after its lead-in call, a device-side barrier: the
// substrate's all_gather of 8 floats, no host synchronization). Why: s9run3's ag_gemm fell back
// at Llama fc1 M=16384 and 2048x8192x7168 by a 2-2.5% edge while the forced fused kernel ran 11% /
// 28% faster
// in the bench's barrier-aligned samples — an ag_gemm rank waits for its peers' rows, so where
// the ranks enter a sample decides its time.
int choose_path(const char* op, int64_t group, const std::string& key,
                const std::vector<std::function<void()>>& paths, double flops = 0,
                const std::vector<FusedPlan>* plans = nullptr, int64_t world_size = 0);

// choose_path over fused(plans[i]) for each plan, then unfused(); runs the path the group keeps
// and returns its output. For the ops whose paths differ only by plan (gemm_rs, gemm_ar).
at::Tensor run_kept_path(const char* op, int64_t group, const std::string& key,
                         const std::vector<FusedPlan>& plans,
                         const std::function<at::Tensor(const FusedPlan&)>& fused,
                         const std::function<at::Tensor()>& unfused, double flops,
                         int64_t world_size);

// The fused kernel's candidate tile configs for [m, k] x [n, k]^T on the grid of a rank of
// `group` (fused_grid; fused_api.h fused_configs).
std::vector<gemm::ConfigId> candidate_configs(const char* op, int64_t group, int64_t m, int64_t n,
                                              int64_t k);

// The candidate plans choose_path measures: each candidate config in the default order (what
// an unmeasured shape runs inside graph capture); under an MPS SM limit each also on the
// co-resident grid (co_resident_grid: every rank's 2-CTA clusters placed at once, s8run2;
// outputs checked at W = 2 / 4 in s9run1; MKERNEL_FUSED_GRIDS=share leaves it out); with
// MKERNEL_FUSED_ORDERS=1 (measurement:
// not yet timed on a device) also, where K is long enough that a band of 8 M units of A
// (4096 K bytes) outgrows a quarter of the L2, narrower orders: 2 M units along N, and (unless
// `along_n_only`: ag_gemm, whose rows arrive by M unit) 1 along M. Shapes and the environment
// only: the same list on every rank. MKERNEL_FUSED_ORDER pins one order.
// across_nodes (the op runs its fused kernel on a group spanning several nodes): under an MPS
// SM limit (the one-GPU emulation of nodes) the co-resident grid only, never the share's grid
// (fused_common.cpp: a grid of every SM of the rank's limit can wait for GPU-direct copies or
// another node's unplaced grid that need an SM it holds; s14run1's two launch failures);
// MKERNEL_FUSED_GRIDS=both keeps both (measurement). Without an MPS limit (real nodes) nothing
// changes.
std::vector<FusedPlan> candidate_plans(const char* op, int64_t group, int64_t m, int64_t n,
                                       int64_t k, bool along_n_only, bool across_nodes = false);

// The side warps' mode of a launch (fused_params.h SideMode): `fallback` (the op's default,
// chosen by measurement) unless MKERNEL_FUSED_SIDE=regs|staged|idle pins one (read per call;
// every rank must see the same value, as for MKERNEL_FUSED).
int32_t side_mode(int32_t fallback);

// The consumers' tail mode of a reduce launch (fused_params.h TailMode): `fallback` unless
// MKERNEL_FUSED_TAIL=regs|staged pins one (read per call; the same on every rank).
int32_t tail_mode(int32_t fallback);

// Whether a call of `key` (choose_path's) runs the unfused path for sure, before any fused
// set-up: MKERNEL_FUSED=off, or choose_path measured this shape unfused in this process (under
// the same measurement knobs). The ops check it first, so that a fallen-back shape costs its
// unfused path plus this lookup (s9run1: a fallen-back ag_gemm of ~130 us measured 5% slower
// than the same collective + GEMM called directly). Every rank of the group answers the same
// (the verdict is the group's; the variables must be the same on every rank, as for
// MKERNEL_FUSED).
bool known_unfused(int64_t group, const std::string& key);

// "M=.. N=.. K=.. <dtype> W=.." of x [M, K] · w [N, K]ᵀ at world size W (choose_path's key).
std::string shape_key(const at::Tensor& x, const at::Tensor& w, int64_t world);

// Whether fused op `op` (kOp: "mkernel.ag_gemm", ...) runs its fused kernel on a group spanning
// several nodes (MKERNEL_FUSED_NODES: "1" on, "0" off for every op; unset: the op's default
// below). On, ag_gemm and gemm_rs drive the inter-node FIFO from the kernel and gemm_ar runs the
// fused gemm_rs across nodes then the substrate's all_gather (RS + AG); choose_path still
// measures each shape against the unfused path and falls back (logged once) where fusion is not
// faster. Every rank must see the same value (the ops' calls are collective).
// Defaults: opt-in until a GPU run shows the final code correct and the op as users get it
// (choose_path's pick) no slower than the unfused path (benchmarks/NOTES.md "xnode2").
constexpr bool kAgGemmNodesByDefault = false;
constexpr bool kGemmRsNodesByDefault = false;
constexpr bool kGemmArNodesByDefault = false;
bool fused_nodes_enabled(const char* op);

}  // namespace mkernel::fused_glue

#endif  // MKERNEL_WITH_CUDA
