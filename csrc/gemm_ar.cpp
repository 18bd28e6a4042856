// mkernel.gemm_ar: a GEMM fused with an all-reduce of its output (row-parallel linear without
// sequence parallelism; inference).
//
//   x [M, k], w [N, k] (the reduction dimension K is sharded over the ranks)
//     ->  out = allreduce(x @ w.T)  [M, N]
//
// Holds the op's validator and its Meta, CPU-reference and CUDA kernels.
#include <ATen/ATen.h>
#include <torch/library.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <mutex>
#include <string>
#include <vector>

#include "env_knobs.h"
#include "gemm_engine.h"
#include "host_reference.h"
#include "ops_validation.h"

#ifdef MKERNEL_WITH_CUDA
#include <c10/cuda/CUDAGuard.h>

#include "fused_common.h"
#endif

namespace mkernel {
namespace {
constexpr const char* kOp = "mkernel.gemm_ar";
}  // namespace

GemmSizes validate_gemm_ar(const at::Tensor& x, const at::Tensor& w, int64_t group,
                           int64_t world_size) {
  validation::check_group(kOp, group, world_size);
  validation::check_linear_operands(kOp, x, "[M, k]", w, "[N, k]", "k");
  return {x.sym_size(0), w.sym_size(0), x.sym_size(1)};
}

namespace {

at::Tensor gemm_ar_meta(const at::Tensor& x, const at::Tensor& w, int64_t group,
                        int64_t world_size) {
  const GemmSizes sizes = validate_gemm_ar(x, w, group, world_size);
  return x.new_empty_symint({sizes.rows, sizes.n});
}

// The host reference at world_size > 1 (protocol: host_reference.h): a reduce-scatter and an
// all-gather. The M rows split into W blocks, rank r owning rows [r*M/W, (r+1)*M/W) (ragged M is
// fine; a block may be empty). Phase A: each rank writes the fp32 partial product of every
// block to its owner, which sums them in fp32 in rank order and rounds once to x's dtype.
// Phase B: each owner writes its reduced block to every peer. Every rank ends with the same bits.
at::Tensor gemm_ar_host(const at::Tensor& x, const at::Tensor& w, int64_t group,
                        int64_t world_size) {
  const int64_t rows = x.size(0), k = x.size(1), n = w.size(0);
  host::Call call(kOp, group, world_size);
  const int rank = call.rank(), world = call.world();
  auto first = [&](int r) { return rows * r / world; };
  auto count = [&](int r) { return first(r + 1) - first(r); };
  const uint64_t es = x.element_size();
  const uint64_t slot = static_cast<uint64_t>((rows + world - 1) / world * n) * sizeof(float);
  const uint64_t reduced_at = world * slot;  // phase B area of the receive buffer
  const uint64_t staged_at = static_cast<uint64_t>(rows * n) * sizeof(float);  // of the send area
  host::CallInfo info{host::OpKind::kGemmAr,
                      x.scalar_type(),
                      {rows, k, n, w.size(1)},
                      0b0101u,
                      {"M (x's row count)", "k", "N (w's row count)", "k"},
                      reduced_at + static_cast<uint64_t>(rows * n) * es,
                      staged_at + slot};
  call.begin(info);
  const auto f32 = x.options().dtype(at::kFloat);
  const at::Tensor xf = x.to(at::kFloat);
  const at::Tensor wt = w.to(at::kFloat).t();
  for (int j = 1; j < world; ++j) {  // rank + 1 first: the ranks' first sends go to distinct peers
    const int dst = (rank + j) % world;
    const uint64_t at_byte = static_cast<uint64_t>(first(dst) * n) * sizeof(float);
    at::Tensor part = at::from_blob(call.send_area(dst) + at_byte, {count(dst), n}, f32);
    at::mm_out(part, xf.narrow(0, first(dst), count(dst)), wt);
    call.send(dst, at_byte, rank * slot, part.numel() * sizeof(float), host::Arrival::kPhaseA);
  }
  const at::Tensor own = at::mm(xf.narrow(0, first(rank), count(rank)), wt);
  at::Tensor sum;
  for (int r = 0; r < world; ++r) {
    at::Tensor part = own;
    if (r != rank) {
      call.wait(r, host::Arrival::kPhaseA, "the partial block");
      part = at::from_blob(call.recv_area(r) + r * slot, {count(rank), n}, f32);
    }
    if (r == 0) {
      sum = part.clone();
    } else {
      sum.add_(part);
    }
  }
  const at::Tensor reduced = sum.to(x.scalar_type()).contiguous();
  const uint64_t bytes = static_cast<uint64_t>(reduced.numel()) * es;
  at::Tensor out = at::empty({rows, n}, x.options());
  out.narrow(0, first(rank), count(rank)).copy_(reduced);
  std::vector<uint8_t*> staged;
  for (int j = 1; j < world; ++j) {
    const int peer = (rank + j) % world;
    uint8_t* stage = call.send_area(peer) + staged_at;
    if (std::find(staged.begin(), staged.end(), stage) == staged.end()) {
      if (bytes > 0) std::memcpy(stage, reduced.data_ptr(), bytes);
      staged.push_back(stage);
    }
    call.send(peer, staged_at, reduced_at + first(rank) * n * es, bytes, host::Arrival::kPhaseB);
  }
  for (int j = 1; j < world; ++j) {
    const int peer = (rank + world - j) % world;
    call.wait(peer, host::Arrival::kPhaseB, "the reduced block");
    out.narrow(0, first(peer), count(peer))
        .copy_(at::from_blob(call.recv_area(peer) + reduced_at + first(peer) * n * es,
                             {count(peer), n}, x.options()));
  }
  call.end();
  return out;
}

at::Tensor gemm_ar_cpu(const at::Tensor& x, const at::Tensor& w, int64_t group,
                       int64_t world_size) {
  validate_gemm_ar(x, w, group, world_size);
  if (world_size == 1) return reference_gemm(x, w);  // nothing to reduce
  return gemm_ar_host(x, w, group, world_size);
}

#ifdef MKERNEL_WITH_CUDA
// Rows up to which gemm_ar runs the engine's small-M GEMM and then the substrate's all-reduce
// instead of the fused kernel (gemm_engine.h: the swapped GEMM's range).
constexpr int64_t kSmallRows = kSwapMaxRows;

// One-shot or two-shot, from shapes only (the same choice on every rank). Per rank, one-shot
// reads all W partials of every tile ((W + 1)·M·N elements of traffic in the reduce role), two-shot
// reads W partials of its own M/W rows and copies the others' reduced rows (~3·M·N) but adds a
// dependency hop. So: one-shot at W = 2 (equal traffic) and for small outputs (latency), two-shot
// beyond. MKERNEL_GEMM_AR_ALGO=oneshot|twoshot forces one, for measuring both (every rank must
// see the same value: the call signature includes it).
bool two_shot(int64_t rows, int64_t n, int64_t world, int64_t element_size) {
  static const char* forced = env::get("MKERNEL_GEMM_AR_ALGO");
  if (forced != nullptr && std::strcmp(forced, "oneshot") == 0) return false;
  if (forced != nullptr && std::strcmp(forced, "twoshot") == 0) return true;
  return world > 2 && rows * n * element_size > (4 << 20);
}

// The substrate's all_reduce of the engine GEMM (the fallback).
at::Tensor unfused(const at::Tensor& x, const at::Tensor& w, int64_t group, int64_t world_size) {
  return fused_glue::substrate_collective(kOp, "all_reduce", engine_gemm(kOp, x, w), group,
                                          world_size);
}

// Across nodes (fused_common.h fused_nodes_enabled): a reduce-scatter then an all-gather. Rank r
// owns rows [r * R, (r + 1) * R) of the product (R = ceil(M / W); with ragged M the last owners
// hold fewer rows or none). The fused kernel's gemm_rs across nodes (fused_hooks.cuh
// "kModeReduce across nodes": partial tiles of other nodes' rows through the FIFO, fp32 sums in
// rank order 0..W-1) reduces this rank's rows into a [R, N] shard; the substrate's all_gather
// across nodes then gathers the W shards into [W * R, N], whose first M rows are out (a shard's
// rows past M land past row M). Every row is rounded once, by its owner, and copied bit for bit:
// every rank holds the same bits. choose_path measures it against the unfused path (engine GEMM
// + the substrate's all_reduce) per shape; a shape the kernel cannot take runs unfused (logged).
at::Tensor gemm_ar_nodes(const at::Tensor& x, const at::Tensor& w, int64_t group,
                         int64_t world_size, comm::SymmetricGroup& sg) {
  const int64_t rows = x.size(0), n = w.size(0), world = world_size;
  const int64_t per = (rows + world - 1) / world;
  fused_glue::ReduceLayout layout;
  layout.rows_per_rank = per;
  layout.row0 = layout.out_row0 = std::min(rows, sg.rank() * per);
  layout.rows = std::min(rows, layout.row0 + per) - layout.row0;
  layout.interleave = true;  // every owner's share of the reduction spread over the whole GEMM
  layout.nodes = true;
  layout.world = world;
  const std::string key = fused_glue::shape_key(x, w, world) + " rs+ag";
  // A shape measured unfused runs it with no fused set-up (fused_common.h known_unfused).
  if (rows > 0 && fused_glue::known_unfused(group, key)) return unfused(x, w, group, world_size);
  if (rows == 0) return at::empty({0, n}, x.options());  // the same on every rank: no call
  const char* why = nullptr;
  if (!fused_glue::reduce_fits(kOp, group, x, w, layout, &why)) {
    fused_glue::note_fallback(kOp, why);
    return unfused(x, w, group, world_size);
  }
  at::Tensor shard = at::empty({per, n}, x.options());
  // The fused kernel in each candidate plan (+ the all_gather), then the unfused path.
  return fused_glue::run_kept_path(
      kOp, group, key, fused_glue::candidate_plans(kOp, group, rows, n, x.size(1), false, true),
      [&](const fused_glue::FusedPlan& c) {
        TORCH_CHECK(fused_glue::reduce_call(kOp, group, comm::kOpGemmAr, sg, x, w, layout, shard,
                                            {}, c, &why),
                    kOp, ": the fused reduce-scatter across nodes refused the call: ", why);
        return fused_glue::substrate_collective(kOp, "all_gather", shard, group, world_size)
            .narrow(0, 0, rows);
      },
      [&] { return unfused(x, w, group, world_size); }, 2.0 * rows * n * x.size(1), world_size);
}

at::Tensor gemm_ar_cuda(const at::Tensor& x, const at::Tensor& w, int64_t group,
                        int64_t world_size) {
  validate_gemm_ar(x, w, group, world_size);
  validation::check_aligned16(kOp, "x", x);
  validation::check_aligned16(kOp, "w", w);
  if (world_size == 1) return engine_gemm(kOp, x, w);  // nothing to reduce
  const c10::cuda::CUDAGuard device_guard(x.device());
  check_engine_inputs(kOp, x);
  // The group first, so that a closed or unknown group is reported as gemm_ar's on every path.
  comm::SymmetricGroup& sg = comm::SymmetricGroup::get(kOp, group, world_size, x.device());
  if (x.size(0) <= kSmallRows && env::get("MKERNEL_GEMM_AR_ALGO") == nullptr) {
    // Decode sizes: the local GEMM runs the small-M kernels (the GEMV up to 16 rows, the
    // swapped GEMM or the engine's tiles by measurement up to 512: gemm.cpp), which the fused
    // kernel's hooked tiles are not; the all-reduce of at most 512·N elements then follows on
    // the substrate (identical bits on every rank). Decided by shape alone, the same on every
    // rank, whatever each rank's tuner picked for its local GEMM. MKERNEL_GEMM_AR_ALGO (which
    // forces a fused algorithm, for measuring and testing both) keeps the fused kernel here too.
    // Logged once per process (call_once: the decode path's host time is most of its cost).
    static std::once_flag logged;
    std::call_once(logged, [] {
      fused_glue::note_fallback(kOp, "M <= 512 rows (decode sizes) run the small-M GEMM, then "
                                     "the substrate's all_reduce");
    });
    return fused_glue::substrate_collective(kOp, "all_reduce", engine_gemm(kOp, x, w), group,
                                            world_size);
  }
  if (!sg.single_node() && fused_glue::fused_nodes_enabled(kOp)) {
    return gemm_ar_nodes(x, w, group, world_size, sg);
  }
  const char* why =
      "the group spans several nodes (MKERNEL_FUSED_NODES=1: the fused reduce-scatter across "
      "nodes + all_gather)";
  if (sg.single_node()) {
    // kernels/fused/fused_hooks.cuh, kModeReduce. One-shot: every rank reduces every tile of
    // all W partials in rank order. Two-shot: rank q reduces its block of rows (the same
    // rank-order sum) and every rank copies the reduced blocks. Either way every rank holds the
    // same bits.
    const int64_t rows = x.size(0), world = world_size, rank = sg.rank();
    fused_glue::ReduceLayout layout;
    layout.two_shot = two_shot(rows, w.size(0), world, x.element_size());
    const std::string key = fused_glue::shape_key(x, w, world) +
                            (layout.two_shot ? " two-shot" : " one-shot");
    // A shape measured unfused runs it with no fused set-up (fused_common.h known_unfused).
    if (rows > 0 && fused_glue::known_unfused(group, key)) return unfused(x, w, group, world_size);
    at::Tensor out = at::empty({rows, w.size(0)}, x.options());
    if (layout.two_shot) {
      layout.rows_per_rank = (rows + world - 1) / world;
      layout.row0 = std::min(rows, rank * layout.rows_per_rank);
      layout.rows = std::min(rows, layout.row0 + layout.rows_per_rank) - layout.row0;
    } else {
      layout.rows = layout.rows_per_rank = rows;
    }
    // The natural tile order on every rank (see gemm_rs.cpp).
    if (x.size(0) == 0) return out;  // nothing to compute or reduce on any rank
    if (fused_glue::reduce_fits(kOp, group, x, w, layout, &why)) {
      // The fused kernel in each candidate plan, then the unfused path (fused_common.h).
      return fused_glue::run_kept_path(
          kOp, group, key,
          fused_glue::candidate_plans(kOp, group, rows, w.size(0), x.size(1), false),
          [&](const fused_glue::FusedPlan& c) {
            fused_glue::reduce_call(kOp, group, comm::kOpGemmAr, sg, x, w, layout, out, {}, c,
                                    &why);
            return out;
          },
          [&] { return unfused(x, w, group, world_size); }, 2.0 * rows * w.size(0) * x.size(1),
          world_size);
    }
  }
  fused_glue::note_fallback(kOp, why);
  return unfused(x, w, group, world_size);
}
#endif  // MKERNEL_WITH_CUDA

}  // namespace

TORCH_LIBRARY_IMPL(mkernel, Meta, m) { m.impl("gemm_ar", &gemm_ar_meta); }
TORCH_LIBRARY_IMPL(mkernel, CPU, m) { m.impl("gemm_ar", &gemm_ar_cpu); }
#ifdef MKERNEL_WITH_CUDA
TORCH_LIBRARY_IMPL(mkernel, CUDA, m) { m.impl("gemm_ar", &gemm_ar_cuda); }
#endif  // MKERNEL_WITH_CUDA

}  // namespace mkernel
