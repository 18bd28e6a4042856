// The schemas of every mkernel op: the one TORCH_LIBRARY(mkernel, ...) block of the extension.
//
// Only `m.def` lives here. Each op's kernels (Meta, CPU reference, CUDA) are registered with
// TORCH_LIBRARY_IMPL in the op's own file, csrc/<op>.cpp, next to its validator.
//
// Conventions shared by the ops:
//  - Weights follow torch.nn.functional.linear: y = x @ w.T with w [N, K].
//  - `group` is the opaque mkernel group handle from mkernel.init() and `world_size` its number
//    of ranks. Both are explicit so that the fake kernels know the output shapes without
//    consulting any process state.
//  - Outputs are fresh tensors; no op mutates or aliases its inputs.
#include <torch/library.h>

TORCH_LIBRARY(mkernel, m) {
  // x [m, K] row shard, w [N, K] -> (out [world_size*m, N],
  //                                   gathered x [world_size*m, K] or a 0-element tensor).
  m.def(
      "ag_gemm(Tensor x, Tensor w, int group, int world_size, bool return_gathered=False) "
      "-> (Tensor, Tensor)");
  // x [M, k], w [N, k] (K sharded) -> reduce_scatter(x @ w.T) [M/world_size, N].
  m.def("gemm_rs(Tensor x, Tensor w, int group, int world_size) -> Tensor");
  // x [M, k], w [N, k] (K sharded) -> allreduce(x @ w.T) [M, N].
  m.def("gemm_ar(Tensor x, Tensor w, int group, int world_size) -> Tensor");
  // x [T, H], topk_idx [T, k] expert ids, w1 [E_local, F, H]; capacity 0: capacity-free
  //   -> (out [R, F] packed or [E_local, capacity, F], counts [E_local] int32,
  //       route [T, k] int64, recv_counts [world_size, E_local] int32,
  //       recv_x (out's layout with H columns) or a 0-element tensor,
  //       peer_routes [W*max_T, 3k] int32 across nodes given topk_weights [T, k] fp32, else a
  //       0-element tensor: moe_combine's optional last argument). See moe_host.h.
  m.def(
      "moe_dispatch_gemm(Tensor x, Tensor topk_idx, Tensor w1, int group, int world_size, "
      "int num_experts, int capacity=0, bool return_recv=False, Tensor? topk_weights=None) "
      "-> (Tensor, Tensor, Tensor, Tensor, Tensor, Tensor)");
  // moe_dispatch_gemm's validator alone (its Python fake kernel calls it) -> 0-element tensor.
  m.def(
      "_moe_dispatch_check(Tensor x, Tensor topk_idx, Tensor w1, int group, int world_size, "
      "int num_experts, int capacity, Tensor? topk_weights=None) -> Tensor");
  // y [R, H] or [E_local, capacity, H], route [T, k] int64, recv_counts [world_size, E_local]
  // int32, topk_weights [T, k] fp32 -> out [T, H]. num_tokens is a SymInt so that a dynamic
  // token count stays symbolic under torch.compile. peer_routes: the dispatch's, when these
  // topk_weights are the ones it was given (the pipelined combine across nodes then skips its
  // all_gather of route and weights; ignored elsewhere).
  m.def(
      "moe_combine(Tensor y, Tensor route, Tensor recv_counts, Tensor topk_weights, int group, "
      "int world_size, SymInt num_tokens, Tensor? peer_routes=None) -> Tensor");
  // The moves of the MoE backward passes: every choice's row -> [T, k, H], and back.
  m.def(
      "_moe_gather(Tensor y, Tensor route, Tensor recv_counts, int group, int world_size) "
      "-> Tensor");
  m.def(
      "_moe_scatter(Tensor rows, Tensor route, Tensor recv_counts, int group, int world_size, "
      "int capacity, SymInt out_rows) -> Tensor");
  // Tests only (CUDA): moe_dispatch_gemm's routing arrays of topk_idx [T, k] -> expert [T*k],
  // pos [T*k], cnt [num_experts], slot [T, world_size] (int32), by the ATen ops or the kernels.
  m.def(
      "_moe_route(Tensor topk_idx, int num_experts, int world_size, bool kernel) "
      "-> (Tensor, Tensor, Tensor, Tensor)");
  // q [b, s, h, d], k/v [b, s_kv, h_kv, d] local sequence shards
  //   -> (out [b, s, h, d], lse [b, h, s] fp32).
  m.def(
      "ring_attention(Tensor q, Tensor k, Tensor v, int group, int world_size, "
      "bool causal=False, float? softmax_scale=None) -> (Tensor, Tensor)");
  // The ring's compute-alone ceiling (csrc/ring_attention.cpp): rank's shard q against the W K/V
  // shards held locally in ring order, k_ring/v_ring [b, W*s_kv, h_kv, d] (rows p*s_kv.. = rank
  // (rank+1+p) mod W's) -> ring_attention's (out, lse) on that rank, without communication.
  m.def(
      "ring_attention_compute_alone(Tensor q, Tensor k_ring, Tensor v_ring, int rank, "
      "int world_size, bool causal=False, float? softmax_scale=None) -> (Tensor, Tensor)");

  // The GEMM engine on its own (world size 1): a [M, K], b [N, K] -> a @ b.T [M, N].
  // config: a tile configuration id (-1 = by shape); sm_count: persistent grid size (0 = all);
  // swizzle (1/2/4/8) and raster (1 = along M, 2 = along N) order the tiles (0 = by shape);
  // splits: split-K slices per tile on the hooked kernel (0 = by shape, 1 = none);
  // pdl: programmatic dependent launch (set-up overlaps the previous kernel's tail).
  // config -1 with the rest left open: the autotuned plan (gemm_autotune.cpp).
  m.def(
      "gemm(Tensor a, Tensor b, int config=-1, int sm_count=0, int swizzle=0, int raster=0, "
      "int splits=0, bool pdl=False) -> Tensor");
  // What gemm(a, b) with config -1 runs for this shape: "<config>/s<swizzle>/<m|n>", plus
  // " (tuned)" when the autotuner measured it (the first query of a shape tunes it).
  m.def("gemm_plan(Tensor a, Tensor b, int sm_count=0) -> str");
  // The small-M kernel on its own: a [M, K] (M <= 16), b [N, K] -> a @ b.T [M, N]; variant:
  // how blocks stream B (0..10, -1 = by shape; gemm(a, b) runs the by-shape one at M <= 8);
  // splits: blocks per 16-row tile along K (cp.async variants; 0 = by shape, 1 = none).
  m.def("gemv(Tensor a, Tensor b, int variant=-1, int splits=0) -> Tensor");
  // The swapped-operand GEMM on its own (gemm_swap.cpp): a [M, K], b [N, K] -> a @ b.T, computed
  // as (b @ a.T).T with A's rows on the MMA's N; variant 0..6 (gemm(a, b) runs the one the
  // small-M tuner measured fastest at 17 <= M <= 512, if faster than the engine).
  m.def("gemm_swap(Tensor a, Tensor b, int variant) -> Tensor");

  // The hooked engine kernel driven by flag tensors (see gemm_hooked.cpp): waits on a_ready
  // before loading A rows, releases tile_done per output tile, visits M units in m_order.
  m.def(
      "gemm_hooked(Tensor a, Tensor b, Tensor? a_ready, int rows_per_flag, int a_ready_value, "
      "Tensor(a!)? tile_done, int tile_done_value, Tensor? m_order, int config=-1, "
      "int sm_count=0, int swizzle=0, int raster=0, float timeout_s=10.0, int splits=0) -> Tensor");
  // The grouped (MoE) engine GEMM: a [E, C, K], b [E, N, K], counts [E] int32 (device)
  //   -> [E, C, N]; rows >= counts[e] are not computed.
  m.def("gemm_grouped(Tensor a, Tensor b, Tensor counts) -> Tensor");
  // The same on packed rows (torch._grouped_mm's layout): a [T, K], b [E, N, K],
  //   offs [E] int32 cumulative row ends (device) -> [T, N].
  m.def(
      "gemm_grouped_packed(Tensor a, Tensor b, Tensor offs, int config=-1, int swizzle=0, "
      "int raster=0) -> Tensor");
  // What gemm_grouped_packed runs for these operands: "<config>/s<swizzle>/<m|n>", plus
  // " (tuned)" when the autotuner measured it (keyed by E, T, N, K; the first query tunes).
  m.def("gemm_grouped_plan(Tensor a, Tensor b, Tensor offs) -> str");
  // The autotuner's plans (gemm_plan_store.cpp) as JSON, to share them between ranks
  // (mkernel.share_gemm_plans) or processes: export this process's table; import one (merged,
  // imported plans win; persist: also into the plan file), returning how many it held; the
  // plan file's path ("" when the file cache is off).
  m.def("gemm_plans_export() -> str");
  m.def("gemm_plans_import(str plans, bool persist=False) -> int");
  m.def("gemm_plans_file() -> str");
  // The fused ops' verdict cache file (fused_verdict_store.h; "" when it is off).
  m.def("fused_verdicts_file() -> str");
  // The record of the last timed-out device wait of this process ("" if none).
  m.def("wait_diagnostic() -> str");
  // (tiles_m, tiles_n, units_m, block_m, block_n) of a config for an [m, n] output.
  m.def("gemm_tile_counts(int config, int m, int n) -> int[]");

  // The plain collectives on the GPU substrate (csrc/collectives.cpp; CPU reference:
  // csrc/collectives_host.cpp). Every rank passes the same shape and dtype.
  // x [m, ...] -> [world_size*m, ...], rank order.
  m.def("all_gather(Tensor x, int group, int world_size) -> Tensor");
  // x [M, ...] (M % world_size == 0) -> [M/world_size, ...]: fp32 sums in rank order 0..W-1.
  m.def("reduce_scatter(Tensor x, int group, int world_size) -> Tensor");
  // x [...] -> [...]: the sum over the ranks, identical bits on every rank.
  m.def("all_reduce(Tensor x, int group, int world_size) -> Tensor");
  // Pre-sizes the group's symmetric device memory to >= nbytes per rank on the current device
  // (collective; Context.reserve): growth is impossible inside CUDA-graph capture.
  m.def("_reserve(int group, int world_size, int nbytes) -> ()");
  // The MoE dispatch's token bound for a group (every rank passes the same max_tokens >= its T
  // in every later call; 0: all-gather the ranks' T on the host at each call).
  m.def("_moe_reserve(int group, int world_size, int max_tokens) -> ()");
  // The attention engine at world size 1: q [b, s, h, d], k/v [b, s_kv, h_kv, d] (GQA)
  //   -> (out [b, s, h, d], lse [b, h, s] fp32). Causal masking is bottom-right aligned.
  // block_m x block_n: the CUDA kernel's tile (query rows x keys per KV block; 0 = by shape;
  // built: 128x128, 192x128 bf16 d=64 non-causal); the CPU
  // reference ignores them.
  m.def(
      "attention(Tensor q, Tensor k, Tensor v, bool causal=False, float? softmax_scale=None, "
      "int block_m=0, int block_n=0) -> (Tensor, Tensor)");
  // The engine with its KV-wait hook (tests, ring attention's building block): before loading KV
  // block n of (batch, kv head) the kernel waits until
  //   kv_ready[(batch * h_kv + kv_head) * F + n / blocks_per_flag] >= kv_ready_value
  // (kv_ready int64 [b * h_kv * F] on q's device), bounded by timeout_s (then it traps).
  m.def(
      "attention_hooked(Tensor q, Tensor k, Tensor v, Tensor kv_ready, int kv_ready_value, "
      "int blocks_per_flag, bool causal=False, float? softmax_scale=None, float timeout_s=10.0) "
      "-> (Tensor, Tensor)");
  // Ring attention's merge step, in place and in fp32: folds a partial (out_part [b, s, h, d],
  // lse_part [b, h, s]) into the running out [b, s, h, d] fp32 and lse [b, h, s] fp32.
  m.def("attention_merge_(Tensor(a!) out, Tensor(b!) lse, Tensor out_part, Tensor lse_part) -> ()");
  // The engine's native backward (CUDA; opt-in from Python, MKERNEL_ATTN_BWD=native): from the
  // forward's q, k, v, out, lse [b, h, s] and dout -> (dq, dk, dv). csrc/attention_backward.cpp.
  m.def(
      "attention_backward(Tensor dout, Tensor q, Tensor k, Tensor v, Tensor out, Tensor lse, "
      "bool causal, float softmax_scale) -> (Tensor, Tensor, Tensor)");
  // The same over K/V all-gathered from a ring of ring_world ranks (k [ring_world * b, s, h_kv,
  // d]), ring attention's zigzag visibility, one launch; dk / dv fp32 partials
  // (python/mkernel/_ring_backward.py).
  m.def(
      "attention_backward_ring(Tensor dout, Tensor q, Tensor k, Tensor v, Tensor out, Tensor lse, "
      "bool causal, float softmax_scale, int ring_world, int ring_rank) -> (Tensor, Tensor, "
      "Tensor)");
  // Ring attention's backward on CUDA with the native kernel (csrc/ring_attention.cpp): this
  // rank's shard (q, out, dout [b, s, h, d], k, v [b, s, h_kv, d], lse [b, h, s]) -> (dq, dk,
  // dv) of it in q's dtype: one launch over every source's K/V (all-gathered, or opted in on one
  // node: consumed as it arrives, dK/dV travelling back to their owners in the kernel), the
  // fp32 dK/dV partials summed over the ranks.
  m.def(
      "ring_attention_backward(Tensor dout, Tensor q, Tensor k, Tensor v, Tensor out, Tensor lse, "
      "int group, int world_size, bool causal, float softmax_scale) -> (Tensor, Tensor, Tensor)");

  // The Go control plane's C API table (csrc/include/mkernel/core_api.h), handed over by
  // address at import; returns the table's ABI version. See core_binding.cpp.
  m.def("_bind_core(int api_table_address) -> int");
  // The Go library's version string, read through the bound table.
  m.def("core_version() -> str");

  // The host reference backend's per-group state (csrc/host_reference.cpp): release a group's
  // data paths (Context.close, mkernel.shutdown) and describe them as JSON (tests, diagnostics).
  m.def("_release_group(int group) -> ()");
  m.def("_group_info(int group) -> str");
  // The SM-placement probe (csrc/sm_probe.cpp; benchmarks/fused_diag.py section `mps`): ctas
  // CTAs in clusters of `cluster`, each holding its SM from GPU time start_ns for hold_ns
  // -> int64 [ctas, 4] (arrival, leaving, smid | nsmid << 32, clusterid | ctarank << 32);
  // the occupancy API's resident clusters of that shape; the GPU's %globaltimer (ns).
  m.def("_sm_probe(int ctas, int cluster, int smem_bytes, int start_ns, int hold_ns) -> Tensor");
  m.def("_sm_probe_fit(int cluster, int smem_bytes) -> int");
  m.def("_gpu_globaltimer() -> int");
  // Every MKERNEL_* variable the C++ side reads (csrc/env_knobs.cpp) as a JSON list of
  // {name, kind, values, default, doc}: `python -m mkernel knobs` prints it.
  m.def("_env_knobs() -> str");
}
