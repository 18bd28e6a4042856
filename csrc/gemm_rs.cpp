// mkernel.gemm_rs: a GEMM fused with a reduce-scatter of its output (row-parallel linear under
// sequence parallelism).
//
//   x [M, k], w [N, k] (the reduction dimension K is sharded over the ranks)
//     ->  out = reduce_scatter(x @ w.T)  [M / world_size, N]   (M % world_size == 0)
//
// Holds the op's validator and its Meta, CPU-reference and CUDA kernels.
#include <ATen/ATen.h>
#include <torch/library.h>

#include "gemm_engine.h"
#include "host_reference.h"
#include "ops_validation.h"

#ifdef MKERNEL_WITH_CUDA
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <mutex>
#include <string>
#include <vector>

#include "env_knobs.h"
#include "fused_ag_route.h"
#include "fused_common.h"
#include "fused_copy_engine.h"
#include "kernels/fused/fused_gate_api.h"
#include "kernels/fused/rs_copy_engine_api.h"
#endif

namespace mkernel {
namespace {
constexpr const char* kOp = "mkernel.gemm_rs";
}  // namespace

GemmSizes validate_gemm_rs(const at::Tensor& x, const at::Tensor& w, int64_t group,
                           int64_t world_size) {
  validation::check_group(kOp, group, world_size);
  validation::check_linear_operands(kOp, x, "[M, k]", w, "[N, k]", "k");
  TORCH_SYM_CHECK((x.sym_size(0) % world_size).sym_eq(0), kOp,
                  ": x's row count M must be divisible by world_size to be reduce-scattered (x: ",
                  x.sym_sizes(), ", world_size: ", world_size, ")");
  return {x.sym_size(0) / world_size, w.sym_size(0), x.sym_size(1)};
}

namespace {

at::Tensor gemm_rs_meta(const at::Tensor& x, const at::Tensor& w, int64_t group,
                        int64_t world_size) {
  const GemmSizes sizes = validate_gemm_rs(x, w, group, world_size);
  return x.new_empty_symint({sizes.rows, sizes.n});
}

// The host reference at world_size > 1 (protocol: host_reference.h). Rank r computes the fp32
// partial product of each destination's row block straight into the send area and writes it to
// its owner (phase A); the owner sums the W partials in fp32 in rank order — deterministic,
// whatever the arrival order — and rounds once to x's dtype.
at::Tensor gemm_rs_host(const at::Tensor& x, const at::Tensor& w, int64_t group,
                        int64_t world_size) {
  const int64_t rows = x.size(0), k = x.size(1), n = w.size(0);
  host::Call call(kOp, group, world_size);
  const int rank = call.rank(), world = call.world();
  const int64_t b = rows / world;
  const uint64_t block = static_cast<uint64_t>(b * n) * sizeof(float);
  host::CallInfo info{host::OpKind::kGemmRs,
                      x.scalar_type(),
                      {rows, k, n, w.size(1)},
                      0b0101u,
                      {"M (x's row count)", "k", "N (w's row count)", "k"},
                      world * block,
                      world * block};
  call.begin(info);
  const auto f32 = x.options().dtype(at::kFloat);
  const at::Tensor xf = x.to(at::kFloat);
  const at::Tensor wt = w.to(at::kFloat).t();
  for (int j = 1; j < world; ++j) {  // rank + 1 first: the ranks' first sends go to distinct peers
    const int dst = (rank + j) % world;
    at::Tensor part = at::from_blob(call.send_area(dst) + dst * block, {b, n}, f32);
    at::mm_out(part, xf.narrow(0, dst * b, b), wt);
    call.send(dst, dst * block, rank * block, block, host::Arrival::kPhaseA);
  }
  const at::Tensor own = at::mm(xf.narrow(0, rank * b, b), wt);
  at::Tensor sum;
  for (int r = 0; r < world; ++r) {
    at::Tensor part = own;
    if (r != rank) {
      call.wait(r, host::Arrival::kPhaseA, "the partial block");
      part = at::from_blob(call.recv_area(r) + r * block, {b, n}, f32);
    }
    if (r == 0) {
      sum = part.clone();
    } else {
      sum.add_(part);
    }
  }
  call.end();
  return sum.to(x.scalar_type());
}

at::Tensor gemm_rs_cpu(const at::Tensor& x, const at::Tensor& w, int64_t group,
                       int64_t world_size) {
  validate_gemm_rs(x, w, group, world_size);
  if (world_size == 1) return reference_gemm(x, w);  // nothing to reduce
  return gemm_rs_host(x, w, group, world_size);
}

#ifdef MKERNEL_WITH_CUDA
// The substrate's reduce_scatter of the engine GEMM (the fallback).
at::Tensor unfused(const at::Tensor& x, const at::Tensor& w, int64_t group, int64_t world_size) {
  return fused_glue::substrate_collective(kOp, "reduce_scatter", engine_gemm(kOp, x, w), group,
                                          world_size);
}

// MKERNEL_FUSED_RS_COPY_ENGINE: the copy-engine route (fused_copy_engine.h RsCopyEngine), with
// ag_gemm's route's spellings and meaning (fused_ag_route.h CopyEngine): "0" never (the default
// until a GPU run has timed it on whole GPUs), "1" the route in place of the fused kernel's
// plans wherever it fits, "auto" one more candidate of the first-call measurement. Every rank
// must see the same value (it shapes the candidate list and joins the verdict key; the route's
// call signature differs from the fused kernel's, so a rank with another value fails the entry
// barrier naming the peer).
ag_route::CopyEngine rs_copy_engine_mode() {
  const char* v = env::get("MKERNEL_FUSED_RS_COPY_ENGINE");
  ag_route::CopyEngine mode{};
  TORCH_CHECK_VALUE(ag_route::parse_copy_engine(v, &mode), kOp,
                    ": MKERNEL_FUSED_RS_COPY_ENGINE must be 0, 1 or auto (or unset: 0), got '",
                    v == nullptr ? "" : v, "'");
  return mode;
}

// One call on the copy-engine route (fused_copy_engine.h RsCopyEngine has the protocol): the
// peers' blocks first (rank + 1 first: the ranks' first copies go to distinct peers), each
// engine GEMM's partial copied into its owner's slot while the next GEMM runs, the own block
// last, then the reduce of the W partials in rank order into `out` ([M / W, N]).
void rs_copy_engine_call(comm::SymmetricGroup& sg, const at::Tensor& x, const at::Tensor& w,
                         const at::Tensor& out) {
  const int64_t world = sg.world(), b = x.size(0) / world, n = w.size(0), k = x.size(1);
  const uint64_t block_bytes = static_cast<uint64_t>(b * n) * x.element_size();
  const uint64_t slot_bytes = (block_bytes + 255) / 256 * 256;
  sg.ensure(kOp, world * slot_bytes);  // (collective where it grows: every rank runs this path)
  const comm::GroupDevice& g = sg.device_view();
  const int rank = g.rank;
  const cudaStream_t stream = at::cuda::getCurrentCUDAStream();
  const uint32_t flag_base = comm::FlagSlot::kOpSlotBase;
  cudaError_t err =
      fused::launch_gate(g, comm::kOpGemmRs, stream, true, flag_base, static_cast<uint32_t>(world));
  TORCH_CHECK(err == cudaSuccess, kOp,
              ": the launch gate failed to launch: ", cudaGetErrorString(err));
  const uint64_t signature = comm::call_signature(
      comm::kOpGemmRs, {x.size(0), k, n, static_cast<int64_t>(x.scalar_type()), 0xce});
  err = fused::launch_route_entry(g, comm::kOpGemmRs, signature, stream);
  TORCH_CHECK(err == cudaSuccess, kOp, ": the copy-engine route's entry barrier failed to launch: ",
              cudaGetErrorString(err));
  std::vector<at::Tensor> partials;  // alive until the join (declared first: destroyed after it)
  fused_glue::RsCopyEngine copies(kOp, g, flag_base, slot_bytes, stream);
  for (int64_t j = 1; j < world; ++j) {
    const int64_t dst = (rank + j) % world;
    partials.push_back(engine_gemm(kOp, x.narrow(0, dst * b, b), w));
    copies.send(static_cast<int>(dst), partials.back().data_ptr(), block_bytes);
  }
  const at::Tensor own = engine_gemm(kOp, x.narrow(0, rank * b, b), w);
  fused::RsSlotsReduce r;
  r.group = g;
  r.op = comm::kOpGemmRs;
  r.flag_base = flag_base;
  r.own = own.data_ptr();
  r.slot_bytes = slot_bytes;
  r.out = out.data_ptr();
  r.elems = b * n;
  r.bf16 = x.scalar_type() == at::kBFloat16 ? 1 : 0;
  // Two CTAs per SM at most, one 16-byte vector per thread and pass at least.
  const int64_t vec_ctas = (r.elems / 8 + 255) / 256;
  const int grid = static_cast<int>(std::clamp<int64_t>(vec_ctas, 1, 2 * device_sms()));
  err = fused::launch_rs_slots_reduce(r, grid, stream);
  copies.join();  // (also when the launch failed: the side streams' work is enqueued)
  TORCH_CHECK(err == cudaSuccess, kOp,
              ": the copy-engine route's reduce failed to launch: ", cudaGetErrorString(err));
  static std::once_flag logged;  // tests/gpu/fused_ranks.py suite rscopyengine requires it
  std::call_once(logged, [] { std::fprintf(stderr, "%s: copy-engine route launched\n", kOp); });
}

at::Tensor gemm_rs_cuda(const at::Tensor& x, const at::Tensor& w, int64_t group,
                        int64_t world_size) {
  validate_gemm_rs(x, w, group, world_size);
  validation::check_aligned16(kOp, "x", x);
  validation::check_aligned16(kOp, "w", w);
  if (world_size == 1) return engine_gemm(kOp, x, w);  // nothing to reduce
  const c10::cuda::CUDAGuard device_guard(x.device());
  check_engine_inputs(kOp, x);
  comm::SymmetricGroup& sg = comm::SymmetricGroup::get(kOp, group, world_size, x.device());
  const int64_t world = world_size, rows = x.size(0) / world;
  const char* why =
      "the group spans several nodes (MKERNEL_FUSED_NODES=1: the fused kernel across nodes, "
      "opt-in)";
  // Across nodes the fused kernel sends partial tiles through the inter-node path
  // (fused_hooks.cuh "kModeReduce across nodes") with MKERNEL_FUSED_NODES=1 (opt-in until a
  // GPU run shows it correct and faster; every rank must see the same value).
  const bool nodes = !sg.single_node();
  if (!nodes || fused_glue::fused_nodes_enabled(kOp)) {
    // One fused launch (kernels/fused/fused_hooks.cuh, kModeReduce): each CTA reduces the
    // tiles of this rank's rows its own consumers computed, from every rank (its side warps
    // during the GEMM, its consumer warps after their last tile). The tile order is the same
    // on every rank, so the CTA of the same index produced them: the owners' M units
    // alternate, so every rank's share of the reduction is spread over the whole GEMM.
    const int rank = sg.rank();
    // The copy-engine route (opt-in): one node, where the fused kernel fits (its plan runs
    // inside graph capture), the runtime's copy-engine submission available.
    const ag_route::CopyEngine ce_mode = rs_copy_engine_mode();
    const bool ce_fits = ag_route::copy_engine_fits(
        world, nodes,
        fused_glue::copy_engine_offered(kOp, "MKERNEL_FUSED_RS_COPY_ENGINE",
                                        ce_mode != ag_route::CopyEngine::kOff));
    std::string key = fused_glue::shape_key(x, w, world);
    if (ce_mode != ag_route::CopyEngine::kOff) {  // (keys measured without the route stay valid)
      key += std::string(" rsce=") + ag_route::copy_engine_name(ce_mode) + (ce_fits ? "" : "/none");
    }
    // A shape measured unfused runs it with no fused set-up (fused_common.h known_unfused).
    if (rows > 0 && fused_glue::known_unfused(group, key)) return unfused(x, w, group, world_size);
    at::Tensor out = at::empty({rows, w.size(0)}, x.options());
    fused_glue::ReduceLayout layout;
    layout.row0 = layout.out_row0 = rank * rows;
    layout.rows = layout.rows_per_rank = rows;
    layout.interleave = true;
    layout.nodes = nodes;
    if (x.size(0) == 0) return out;  // nothing to compute or reduce on any rank
    if (fused_glue::reduce_fits(kOp, group, x, w, layout, &why)) {
      // The fused kernel in each candidate plan, the copy-engine route where asked for (one
      // candidate: plans[0] marked copy_engine, the plan it runs inside graph capture), then the
      // unfused path (fused_common.h).
      std::vector<fused_glue::FusedPlan> plans =
          fused_glue::candidate_plans(kOp, group, x.size(0), w.size(0), x.size(1), false, nodes);
      if (ce_fits && ce_mode != ag_route::CopyEngine::kOff && !plans.empty()) {
        fused_glue::FusedPlan route = plans[0];
        route.copy_engine = true;
        if (ce_mode == ag_route::CopyEngine::kOn) plans.clear();
        plans.push_back(route);
      }
      return fused_glue::run_kept_path(
          kOp, group, key, plans,
          [&](const fused_glue::FusedPlan& c) {
            if (c.copy_engine && !fused_glue::capturing()) {
              rs_copy_engine_call(sg, x, w, out);
            } else {
              fused_glue::reduce_call(kOp, group, comm::kOpGemmRs, sg, x, w, layout, out, {}, c,
                                      &why);
            }
            return out;
          },
          [&] { return unfused(x, w, group, world_size); }, 2.0 * x.size(0) * w.size(0) * x.size(1),
          world_size);
    }
  }
  fused_glue::note_fallback(kOp, why);
  return unfused(x, w, group, world_size);
}
#endif  // MKERNEL_WITH_CUDA

}  // namespace

TORCH_LIBRARY_IMPL(mkernel, Meta, m) { m.impl("gemm_rs", &gemm_rs_meta); }
TORCH_LIBRARY_IMPL(mkernel, CPU, m) { m.impl("gemm_rs", &gemm_rs_cpu); }
#ifdef MKERNEL_WITH_CUDA
TORCH_LIBRARY_IMPL(mkernel, CUDA, m) { m.impl("gemm_rs", &gemm_rs_cuda); }
#endif  // MKERNEL_WITH_CUDA

}  // namespace mkernel
