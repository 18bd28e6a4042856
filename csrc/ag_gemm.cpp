// mkernel.ag_gemm: all-gather of row shards fused with a GEMM (column-parallel linear under
// sequence parallelism).
//
//   x [m, K] (this rank's rows), w [N, K]  ->  out = allgather(x) @ w.T  [world_size * m, N]
//   and, if return_gathered, the gathered x [world_size * m, K] (for the weight gradient);
//   otherwise a 0-element tensor of x's dtype and device.
//
// Holds the op's validator and its Meta, CPU-reference and CUDA kernels.
#include <ATen/ATen.h>
#include <torch/library.h>

#include <algorithm>
#include <cstring>
#include <tuple>
#include <vector>

#include "gemm_engine.h"
#include "host_reference.h"
#include "ops_validation.h"

namespace mkernel {
namespace {
constexpr const char* kOp = "mkernel.ag_gemm";
}  // namespace

AgGemmSizes validate_ag_gemm(const at::Tensor& x, const at::Tensor& w, int64_t group,
                             int64_t world_size) {
  validation::check_group(kOp, group, world_size);
  validation::check_linear_operands(kOp, x, "[m, K]", w, "[N, K]", "K");
  return {x.sym_size(0) * world_size, w.sym_size(0), x.sym_size(1)};
}

namespace {

std::tuple<at::Tensor, at::Tensor> ag_gemm_meta(const at::Tensor& x, const at::Tensor& w,
                                                int64_t group, int64_t world_size,
                                                bool return_gathered) {
  const AgGemmSizes sizes = validate_ag_gemm(x, w, group, world_size);
  at::Tensor out = x.new_empty_symint({sizes.rows, sizes.n});
  at::Tensor gathered =
      return_gathered ? x.new_empty_symint({sizes.rows, sizes.k}) : x.new_empty({0});
  return {out, gathered};
}

// At world size 1 there is nothing to gather: the op is a GEMM (and a copy of x).
std::tuple<at::Tensor, at::Tensor> world_one(const at::Tensor& out, const at::Tensor& x,
                                             bool return_gathered) {
  return {out, return_gathered ? x.clone() : x.new_empty({0})};
}

// The host reference at world_size > 1 (protocol: host_reference.h). Every rank stages its rows
// x once per data path and writes them into every peer's receive area (phase A); the output
// block of rank r's rows is computed as soon as they have arrived, own rows first.
std::tuple<at::Tensor, at::Tensor> ag_gemm_host(const at::Tensor& x, const at::Tensor& w,
                                                int64_t group, int64_t world_size,
                                                bool return_gathered) {
  const int64_t m = x.size(0), k = x.size(1), n = w.size(0);
  const uint64_t block = static_cast<uint64_t>(m * k) * x.element_size();
  host::Call call(kOp, group, world_size);
  const int rank = call.rank(), world = call.world();
  host::CallInfo info{host::OpKind::kAgGemm,
                      x.scalar_type(),
                      {m, k, n, w.size(1)},
                      0b0011u,
                      {"m (x's row count)", "K (x's column count)", "N", "K"},
                      world * block,
                      block};
  call.begin(info);
  std::vector<uint8_t*> staged;
  for (int j = 1; j < world; ++j) {  // rank + 1 first: the ranks' first sends go to distinct peers
    const int peer = (rank + j) % world;
    uint8_t* stage = call.send_area(peer);
    if (std::find(staged.begin(), staged.end(), stage) == staged.end()) {
      if (block > 0) std::memcpy(stage, x.data_ptr(), block);
      staged.push_back(stage);
    }
    call.send(peer, 0, rank * block, block, host::Arrival::kPhaseA);
  }
  at::Tensor out = at::empty({world * m, n}, x.options());
  at::Tensor gathered = return_gathered ? at::empty({world * m, k}, x.options()) : x.new_empty({0});
  auto compute = [&](int r, const at::Tensor& rows) {
    out.narrow(0, r * m, m).copy_(reference_gemm(rows, w));
    if (return_gathered) gathered.narrow(0, r * m, m).copy_(rows);
  };
  compute(rank, x);
  for (int j = 1; j < world; ++j) {  // rank - 1 sent to us first
    const int peer = (rank + world - j) % world;
    call.wait(peer, host::Arrival::kPhaseA, "the x rows");
    compute(peer, at::from_blob(call.recv_area(peer) + peer * block, {m, k}, x.options()));
  }
  call.end();
  return {out, gathered};
}

std::tuple<at::Tensor, at::Tensor> ag_gemm_cpu(const at::Tensor& x, const at::Tensor& w,
                                               int64_t group, int64_t world_size,
                                               bool return_gathered) {
  validate_ag_gemm(x, w, group, world_size);
  if (world_size == 1) return world_one(reference_gemm(x, w), x, return_gathered);
  return ag_gemm_host(x, w, group, world_size, return_gathered);
}

#ifdef MKERNEL_WITH_CUDA
std::tuple<at::Tensor, at::Tensor> ag_gemm_cuda(const at::Tensor& x, const at::Tensor& w,
                                                int64_t group, int64_t world_size,
                                                bool return_gathered) {
  validate_ag_gemm(x, w, group, world_size);
  if (world_size == 1) return world_one(engine_gemm(kOp, x, w), x, return_gathered);
  TORCH_CHECK_NOT_IMPLEMENTED(false, kOp, ": the CUDA kernel has not landed yet");
}
#endif  // MKERNEL_WITH_CUDA

}  // namespace

TORCH_LIBRARY_IMPL(mkernel, Meta, m) { m.impl("ag_gemm", &ag_gemm_meta); }
TORCH_LIBRARY_IMPL(mkernel, CPU, m) { m.impl("ag_gemm", &ag_gemm_cpu); }
#ifdef MKERNEL_WITH_CUDA
TORCH_LIBRARY_IMPL(mkernel, CUDA, m) { m.impl("ag_gemm", &ag_gemm_cuda); }
#endif  // MKERNEL_WITH_CUDA

}  // namespace mkernel
