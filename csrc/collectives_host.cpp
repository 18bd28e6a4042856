// The host reference (CPU tensors) of the plain collectives, through the host reference
// backend's protocol (host_reference.h: FIFO -> Go proxy -> loopback within a node, the
// selected transport across nodes):
//
//   all_gather(x [m, ...])      -> [W*m, ...]   rank r's x in rows [r*m, (r+1)*m)
//   reduce_scatter(x [M, ...])  -> [M/W, ...]   rank r: rows [r*M/W, (r+1)*M/W) of the sum
//   all_reduce(x [...])         -> [...]        the sum, identical bits on every rank
//
// Sums are fp32, in rank order 0..W-1 for every element, rounded once to x's dtype: the result
// does not depend on which rank computes it, so it is bit-reproducible run to run and equal to
// the CUDA kernels' (the same additions in the same order). Every rank passes the same shape and
// dtype; a mismatch raises on every rank naming the peer (the call header). The schemas and the
// Meta / CUDA kernels live in registration.cpp / collectives.cpp.
#include <ATen/ATen.h>
#include <torch/library.h>

#include <algorithm>
#include <cstring>
#include <functional>
#include <vector>

#include "host_reference.h"
#include "ops_validation.h"

namespace mkernel {
namespace {

constexpr const char* kAllGather = "mkernel.all_gather";
constexpr const char* kReduceScatter = "mkernel.reduce_scatter";
constexpr const char* kAllReduce = "mkernel.all_reduce";

// x: at least one dimension, bf16 / fp16 / fp32, contiguous (the CUDA kernels' rules).
void check_input(const char* op, const at::Tensor& x, int64_t group, int64_t world_size) {
  validation::check_group(op, group, world_size);
  TORCH_CHECK(x.dim() >= 1, op, ": x must have at least one dimension, got a scalar");
  validation::check_dtype_in(op, "x", x, {at::kBFloat16, at::kHalf, at::kFloat}, "the values to exchange");
  validation::check_contiguous(op, "x", x);
}

// What every rank announces: the full shape folds into the header's four dims.
host::CallInfo call_info(host::OpKind op, const at::Tensor& x, uint64_t recv_bytes, uint64_t send_bytes) {
  const int64_t rows = x.size(0);
  int64_t row_elems = 1;
  size_t trailing = 0x9e3779b97f4a7c15ull;
  for (int64_t d = 1; d < x.dim(); ++d) {
    row_elems *= x.size(d);
    trailing = trailing * 1000003u ^ std::hash<int64_t>{}(x.size(d));
  }
  return host::CallInfo{op,
                        x.scalar_type(),
                        {rows, row_elems, x.dim(), static_cast<int64_t>(trailing & 0x7fffffffffffffffull)},
                        0b1111u,
                        {"x's first dimension", "x's row size (elements after the first dimension)",
                         "x's number of dimensions", "x's sizes after the first"},
                        recv_bytes,
                        send_bytes};
}

// Stages `bytes` at `offset` of the send area of every data path that reaches a peer once
// (ranks of one data path share its send area), from `src`.
void stage_once(host::Call& call, int rank, int world, uint64_t offset, const void* src, uint64_t bytes) {
  std::vector<uint8_t*> staged;
  for (int j = 1; j < world; ++j) {
    uint8_t* stage = call.send_area((rank + j) % world) + offset;
    if (std::find(staged.begin(), staged.end(), stage) != staged.end()) continue;
    if (bytes > 0) std::memcpy(stage, src, bytes);
    staged.push_back(stage);
  }
}

at::Tensor all_gather_cpu(const at::Tensor& x, int64_t group, int64_t world_size) {
  check_input(kAllGather, x, group, world_size);
  std::vector<int64_t> sizes = x.sizes().vec();
  sizes[0] *= world_size;
  at::Tensor out = at::empty(sizes, x.options());
  if (world_size == 1) return out.copy_(x);
  host::Call call(kAllGather, group, world_size);
  const int rank = call.rank(), world = call.world();
  const uint64_t block = static_cast<uint64_t>(x.numel()) * x.element_size();
  call.begin(call_info(host::OpKind::kAllGather, x, world * block, block));
  // Our block, once per data path, to every peer's receive area at rank * block.
  stage_once(call, rank, world, 0, x.data_ptr(), block);
  for (int j = 1; j < world; ++j) call.send((rank + j) % world, 0, rank * block, block, host::Arrival::kPhaseA);
  uint8_t* dst = static_cast<uint8_t*>(out.data_ptr());
  if (block > 0) std::memcpy(dst + rank * block, x.data_ptr(), block);
  for (int j = 1; j < world; ++j) {
    const int peer = (rank + world - j) % world;
    call.wait(peer, host::Arrival::kPhaseA, "its block of x");
    if (block > 0) std::memcpy(dst + peer * block, call.recv_area(peer) + peer * block, block);
  }
  call.end();
  return out;
}

// sum = fp32(parts[0]) + fp32(parts[1]) + ... in this order, rounded once to `dtype`.
at::Tensor sum_in_rank_order(const std::vector<at::Tensor>& parts, at::ScalarType dtype) {
  at::Tensor sum = parts[0].to(at::kFloat, /*non_blocking=*/false, /*copy=*/true);
  for (size_t r = 1; r < parts.size(); ++r) sum.add_(parts[r].to(at::kFloat));
  return sum.to(dtype);
}

at::Tensor reduce_scatter_cpu(const at::Tensor& x, int64_t group, int64_t world_size) {
  check_input(kReduceScatter, x, group, world_size);
  TORCH_CHECK_VALUE(x.size(0) % world_size == 0, kReduceScatter,
                    ": x's first dimension M must be divisible by world_size to be reduce-scattered (x: ",
                    x.sizes(), ", world_size: ", world_size, ")");
  std::vector<int64_t> sizes = x.sizes().vec();
  sizes[0] /= world_size;
  if (world_size == 1) return x.clone();
  host::Call call(kReduceScatter, group, world_size);
  const int rank = call.rank(), world = call.world();
  const int64_t elems = x.numel() / world;  // one block: M/W rows
  const uint64_t block = static_cast<uint64_t>(elems) * x.element_size();
  call.begin(call_info(host::OpKind::kReduceScatter, x, world * block, world * block));
  const at::Tensor flat = x.reshape({world, elems});
  // Block dst of x to rank dst (into its receive area at rank * block). Every path's send
  // area holds all of x at the block's own offset.
  stage_once(call, rank, world, 0, x.data_ptr(), world * block);
  for (int j = 1; j < world; ++j) {
    const int dst = (rank + j) % world;
    call.send(dst, dst * block, rank * block, block, host::Arrival::kPhaseA);
  }
  std::vector<at::Tensor> parts(world);
  for (int r = 0; r < world; ++r) {
    if (r == rank) {
      parts[r] = flat[rank];
      continue;
    }
    call.wait(r, host::Arrival::kPhaseA, "its partial block");
    parts[r] = at::from_blob(call.recv_area(r) + r * block, {elems}, x.options());
  }
  at::Tensor out = sum_in_rank_order(parts, x.scalar_type()).reshape(sizes);
  call.end();
  return out;
}

at::Tensor all_reduce_cpu(const at::Tensor& x, int64_t group, int64_t world_size) {
  check_input(kAllReduce, x, group, world_size);
  if (world_size == 1) return x.clone();
  host::Call call(kAllReduce, group, world_size);
  const int rank = call.rank(), world = call.world();
  // Element blocks (ragged: any size, a block may be empty): rank b owns [first(b), first(b+1)).
  const int64_t n = x.numel();
  auto first = [&](int b) { return n * b / world; };
  auto count = [&](int b) { return first(b + 1) - first(b); };
  const uint64_t es = x.element_size();
  const uint64_t total = static_cast<uint64_t>(n) * es;
  const uint64_t slot = static_cast<uint64_t>((n + world - 1) / world) * es;  // phase A slot per source
  const uint64_t reduced_at = world * slot;                                    // phase B area
  call.begin(call_info(host::OpKind::kAllReduce, x, reduced_at + total, total + slot));
  // Phase A (reduce-scatter): block b of x to its owner b, into its slot `rank`.
  stage_once(call, rank, world, 0, x.data_ptr(), total);
  for (int j = 1; j < world; ++j) {
    const int dst = (rank + j) % world;
    call.send(dst, first(dst) * es, rank * slot, count(dst) * es, host::Arrival::kPhaseA);
  }
  const at::Tensor flat = x.reshape({n});
  std::vector<at::Tensor> parts(world);
  for (int r = 0; r < world; ++r) {
    if (r == rank) {
      parts[r] = flat.narrow(0, first(rank), count(rank));
      continue;
    }
    call.wait(r, host::Arrival::kPhaseA, "its partial block");
    parts[r] = at::from_blob(call.recv_area(r) + r * slot, {count(rank)}, x.options());
  }
  const at::Tensor reduced = sum_in_rank_order(parts, x.scalar_type()).contiguous();
  // Phase B (all-gather): the reduced block to every peer, at its place in the result.
  const uint64_t bytes = static_cast<uint64_t>(count(rank)) * es;
  stage_once(call, rank, world, total, reduced.data_ptr(), bytes);
  for (int j = 1; j < world; ++j) {
    call.send((rank + j) % world, total, reduced_at + first(rank) * es, bytes, host::Arrival::kPhaseB);
  }
  at::Tensor out = at::empty_like(x);
  at::Tensor out_flat = out.view({n});
  out_flat.narrow(0, first(rank), count(rank)).copy_(reduced);
  for (int j = 1; j < world; ++j) {
    const int peer = (rank + world - j) % world;
    call.wait(peer, host::Arrival::kPhaseB, "its reduced block");
    out_flat.narrow(0, first(peer), count(peer))
        .copy_(at::from_blob(call.recv_area(peer) + reduced_at + first(peer) * es, {count(peer)}, x.options()));
  }
  call.end();
  return out;
}

}  // namespace

TORCH_LIBRARY_IMPL(mkernel, CPU, m) {
  m.impl("all_gather", &all_gather_cpu);
  m.impl("reduce_scatter", &reduce_scatter_cpu);
  m.impl("all_reduce", &all_reduce_cpu);
}

}  // namespace mkernel
