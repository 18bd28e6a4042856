// mkernel.all_gather, mkernel.reduce_scatter, mkernel.all_reduce: the plain collectives on the
// GPU substrate (kernels/collectives/collectives_api.h), and Context.reserve (_reserve).
//
//   all_gather(x [m, ...])      -> [W*m, ...]   rank r's x in rows [r*m, (r+1)*m)
//   reduce_scatter(x [M, ...])  -> [M/W, ...]   rank r: rows [r*M/W, (r+1)*M/W) of the sum over
//                                               ranks, fp32 sums in rank order 0..W-1
//   all_reduce(x [...])         -> [...]        the sum over ranks, identical bits on every rank
// Every rank passes the same shape and dtype (bf16, fp16 or fp32); the kernel's entry barrier
// compares the calls' signatures on the device and fails naming the peer that differs.
//
// Holds the ops' validators, Meta and CUDA kernels. The CPU reference kernels live in
// collectives_host.cpp.
#include <ATen/ATen.h>
#include <torch/library.h>

#include <algorithm>
#include <cstdlib>
#include <string>

#include "ops_validation.h"

#ifdef MKERNEL_WITH_CUDA
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>

#include "comm/symmetric_group.h"
#include "comm/wait_record.h"
#include "kernels/collectives/collectives_api.h"
#endif

namespace mkernel {
namespace {

constexpr const char* kAllGather = "mkernel.all_gather";
constexpr const char* kReduceScatter = "mkernel.reduce_scatter";
constexpr const char* kAllReduce = "mkernel.all_reduce";

// x: at least one dimension, bf16/fp16/fp32 (on every backend: a collective moves whatever
// precision the caller reduces in), contiguous.
void check_collective_input(const char* op, const at::Tensor& x, int64_t group,
                            int64_t world_size) {
  validation::check_group(op, group, world_size);
  TORCH_CHECK(x.dim() >= 1, op, ": x must have at least one dimension, got a scalar");
  validation::check_dtype_in(op, "x", x, {at::kBFloat16, at::kHalf, at::kFloat},
                             "the values to exchange");
  validation::check_contiguous(op, "x", x);
}

std::vector<c10::SymInt> sizes_with_rows(const at::Tensor& x, const c10::SymInt& rows) {
  std::vector<c10::SymInt> s(x.sym_sizes().begin(), x.sym_sizes().end());
  s[0] = rows;
  return s;
}

}  // namespace

c10::SymInt validate_all_gather(const at::Tensor& x, int64_t group, int64_t world_size) {
  check_collective_input(kAllGather, x, group, world_size);
  return x.sym_size(0) * world_size;
}

c10::SymInt validate_reduce_scatter(const at::Tensor& x, int64_t group, int64_t world_size) {
  check_collective_input(kReduceScatter, x, group, world_size);
  TORCH_SYM_CHECK((x.sym_size(0) % world_size).sym_eq(0), kReduceScatter,
                  ": x's first dimension M must be divisible by world_size to be "
                  "reduce-scattered (x: ",
                  x.sym_sizes(), ", world_size: ", world_size, ")");
  return x.sym_size(0) / world_size;
}

void validate_all_reduce(const at::Tensor& x, int64_t group, int64_t world_size) {
  check_collective_input(kAllReduce, x, group, world_size);
}

namespace {

at::Tensor all_gather_meta(const at::Tensor& x, int64_t group, int64_t world_size) {
  const c10::SymInt rows = validate_all_gather(x, group, world_size);
  return x.new_empty_symint(sizes_with_rows(x, rows));
}

at::Tensor reduce_scatter_meta(const at::Tensor& x, int64_t group, int64_t world_size) {
  const c10::SymInt rows = validate_reduce_scatter(x, group, world_size);
  return x.new_empty_symint(sizes_with_rows(x, rows));
}

at::Tensor all_reduce_meta(const at::Tensor& x, int64_t group, int64_t world_size) {
  validate_all_reduce(x, group, world_size);
  return x.new_empty_symint(x.sym_sizes());
}

#ifdef MKERNEL_WITH_CUDA
collectives::DType collective_dtype(const at::Tensor& x) {
  switch (x.scalar_type()) {
    case at::kBFloat16:
      return collectives::DType::kBF16;
    case at::kHalf:
      return collectives::DType::kFP16;
    default:
      return collectives::DType::kFP32;
  }
}

using Launcher = cudaError_t (*)(const collectives::Args&, const char**);
using Sizer = uint64_t (*)(collectives::DType, uint64_t, int);
using NetSizer = collectives::NetBytes (*)(collectives::DType, uint64_t, int);

// Groups spanning several nodes move the other nodes' blocks through the GPU inter-node path
// (FIFO -> Go proxy -> transport, SymmetricGroup::ensure_net). A build without that half of the
// kernels refuses such groups on CUDA tensors.
void check_multi_node(const char* op, const comm::SymmetricGroup& g) {
  TORCH_CHECK_NOT_IMPLEMENTED(
      collectives::net_supported(), op, ": the group spans ", g.nodes(),
      " (emulated) nodes and this build has no GPU inter-node path (csrc/comm/net_path); run "
      "every rank of the group on one node (one MKERNEL_EMULATED_NODE)");
}

// The common path of the three CUDA kernels: the group's memory sized for the call, the
// signature (op, dtype, every dim), one launch; errors carry the wait record when an earlier
// kernel of this process trapped (the launch then reports the dead context).
void run_collective(const char* op, int32_t op_id, const at::Tensor& x, at::Tensor& out,
                    int64_t group, int64_t world_size, Launcher launch, Sizer bytes,
                    NetSizer net_bytes) {
  const c10::cuda::CUDAGuard device_guard(x.device());
  comm::SymmetricGroup& g = comm::SymmetricGroup::get(op, group, world_size, x.device());
  const auto dtype = collective_dtype(x);
  const uint64_t count = static_cast<uint64_t>(x.numel());
  if (!g.single_node()) {
    check_multi_node(op, g);
    const collectives::NetBytes nb = net_bytes(dtype, count, g.world());
    g.ensure_net(op, nb.send, nb.recv);
  }
  g.ensure(op, bytes(dtype, count, g.world()));
  // The signature: op, dtype, rank count of x's shape and every size, chained.
  uint64_t sig = comm::call_signature(op_id, {static_cast<int64_t>(x.scalar_type()), x.dim()});
  for (int64_t d : x.sizes()) sig = comm::call_signature(op_id, {static_cast<int64_t>(sig), d});
  collectives::Args a;
  a.group = g.device_view();
  a.x = x.data_ptr();
  a.out = out.data_ptr();
  a.count = count;
  a.dtype = dtype;
  a.signature = sig;
  a.stream = at::cuda::getCurrentCUDAStream();
  const char* reason = nullptr;
  const cudaError_t err = launch(a, &reason);
  if (err != cudaSuccess) {
    cudaGetLastError();
    const std::string wait = g.diagnostic();
    TORCH_CHECK(false, op, ": launch failed: ", cudaGetErrorString(err),
                reason ? std::string(" (") + reason + ")" : std::string(),
                wait.empty() ? std::string() : "; " + wait);
  }
}

at::Tensor all_gather_cuda(const at::Tensor& x, int64_t group, int64_t world_size) {
  validate_all_gather(x, group, world_size);
  validation::check_aligned16(kAllGather, "x", x);
  std::vector<int64_t> s(x.sizes().begin(), x.sizes().end());
  s[0] *= world_size;
  auto out = at::empty(s, x.options());
  if (world_size == 1) return out.copy_(x);
  run_collective(kAllGather, comm::kOpAllGather, x, out, group, world_size,
                 &collectives::all_gather, &collectives::all_gather_bytes,
                 &collectives::all_gather_net_bytes);
  return out;
}

at::Tensor reduce_scatter_cuda(const at::Tensor& x, int64_t group, int64_t world_size) {
  validate_reduce_scatter(x, group, world_size);
  validation::check_aligned16(kReduceScatter, "x", x);
  std::vector<int64_t> s(x.sizes().begin(), x.sizes().end());
  s[0] /= world_size;
  auto out = at::empty(s, x.options());
  if (world_size == 1) return out.copy_(x);
  run_collective(kReduceScatter, comm::kOpReduceScatter, x, out, group, world_size,
                 &collectives::reduce_scatter, &collectives::reduce_scatter_bytes,
                 &collectives::reduce_scatter_net_bytes);
  return out;
}

at::Tensor all_reduce_cuda(const at::Tensor& x, int64_t group, int64_t world_size) {
  validate_all_reduce(x, group, world_size);
  validation::check_aligned16(kAllReduce, "x", x);
  auto out = at::empty(x.sizes(), x.options());
  if (world_size == 1) return out.copy_(x);
  run_collective(kAllReduce, comm::kOpAllReduce, x, out, group, world_size,
                 &collectives::all_reduce, &collectives::all_reduce_bytes,
                 &collectives::all_reduce_net_bytes);
  return out;
}
#endif  // MKERNEL_WITH_CUDA

// Context.reserve(nbytes): the group's symmetric memory on the current CUDA device holds at
// least nbytes per rank (a collective). Without CUDA there is nothing to reserve (the host
// reference backend sizes its own buffers).
void reserve_op(int64_t group, int64_t world_size, int64_t nbytes) {
  validation::check_group("mkernel.Context.reserve", group, world_size);
  TORCH_CHECK_VALUE(nbytes >= 0, "mkernel.Context.reserve: nbytes must be >= 0, got ", nbytes);
#ifdef MKERNEL_WITH_CUDA
  if (world_size == 1 || at::cuda::device_count() == 0) return;
  comm::SymmetricGroup& g = comm::SymmetricGroup::get(
      "mkernel.Context.reserve", group, world_size,
      at::Device(at::kCUDA, c10::cuda::current_device()));
  g.ensure("mkernel.Context.reserve", static_cast<uint64_t>(nbytes));
  if (!g.single_node() && collectives::net_supported()) {
    // The largest inter-node areas a collective of nbytes (fp32: the fewest padding) needs.
    const uint64_t count = static_cast<uint64_t>(nbytes) / 2;
    collectives::NetBytes need{0, 0};
    for (auto f : {&collectives::all_gather_net_bytes, &collectives::reduce_scatter_net_bytes,
                   &collectives::all_reduce_net_bytes}) {
      const collectives::NetBytes nb = f(collectives::DType::kBF16, count, g.world());
      need.send = std::max(need.send, nb.send);
      need.recv = std::max(need.recv, nb.recv);
    }
    g.ensure_net("mkernel.Context.reserve", need.send, need.recv);
  }
#endif
}

}  // namespace

TORCH_LIBRARY_IMPL(mkernel, Meta, m) {
  m.impl("all_gather", &all_gather_meta);
  m.impl("reduce_scatter", &reduce_scatter_meta);
  m.impl("all_reduce", &all_reduce_meta);
}
#ifdef MKERNEL_WITH_CUDA
TORCH_LIBRARY_IMPL(mkernel, CUDA, m) {
  m.impl("all_gather", &all_gather_cuda);
  m.impl("reduce_scatter", &reduce_scatter_cuda);
  m.impl("all_reduce", &all_reduce_cuda);
}

// torch.ops.mkernel._set_net_overlap(mode, stager_eighths): the experimental overlap mode of
// calls across nodes (collectives_api.h set_net_overlap; -1, -1: back to MKERNEL_NET_OVERLAP /
// MKERNEL_NET_STAGERS). For benchmarks/bench_collectives.py --overlap-ab; CUDA builds only, like
// _net_path_info.
static void set_net_overlap_op(int64_t mode, int64_t stager_eighths) {
  TORCH_CHECK_VALUE(mode >= -1 && mode <= 1, "mkernel._set_net_overlap: mode must be -1, 0 or 1, got ", mode);
  TORCH_CHECK_VALUE(stager_eighths >= -1 && stager_eighths <= 7,
                    "mkernel._set_net_overlap: stager_eighths must be -1..7, got ", stager_eighths);
  collectives::set_net_overlap(static_cast<int>(mode), static_cast<int>(stager_eighths));
}
TORCH_LIBRARY_FRAGMENT(mkernel, m) { m.def("_set_net_overlap(int mode, int stager_eighths) -> ()"); }
TORCH_LIBRARY_IMPL(mkernel, CompositeExplicitAutograd, m) { m.impl("_set_net_overlap", &set_net_overlap_op); }
#endif  // MKERNEL_WITH_CUDA
TORCH_LIBRARY_IMPL(mkernel, CompositeExplicitAutograd, m) { m.impl("_reserve", &reserve_op); }

}  // namespace mkernel
