// The MoE ops at world size 1 (see moe_local.h).
#include "moe_local.h"

#include <ATen/core/dispatch/Dispatcher.h>

#include <tuple>

namespace mkernel {
namespace moe {
namespace {

// The engine's grouped GEMMs, through the dispatcher (their CPU kernels are the host reference).
at::Tensor grouped_packed(const at::Tensor& a, const at::Tensor& b, const at::Tensor& offs) {
  static auto op = c10::Dispatcher::singleton()
                       .findSchemaOrThrow("mkernel::gemm_grouped_packed", "")
                       .typed<at::Tensor(const at::Tensor&, const at::Tensor&, const at::Tensor&,
                                         int64_t, int64_t, int64_t)>();
  return op.call(a, b, offs, -1, 0, 0);
}

at::Tensor grouped_padded(const at::Tensor& a, const at::Tensor& b, const at::Tensor& counts) {
  using Fn = at::Tensor(const at::Tensor&, const at::Tensor&, const at::Tensor&);
  static auto op =
      c10::Dispatcher::singleton().findSchemaOrThrow("mkernel::gemm_grouped", "").typed<Fn>();
  return op.call(a, b, counts);
}

// The row of each choice's route, and whether it was kept.
std::tuple<at::Tensor, at::Tensor> rows_of(const at::Tensor& route) {
  at::Tensor flat = route.reshape({-1});
  at::Tensor kept = flat.ge(0);
  return {at::where(kept, flat.bitwise_and(0xffffffffLL), 0), kept};
}

}  // namespace

at::Tensor expert_gemm(const at::Tensor& a, const at::Tensor& w, const at::Tensor& counts,
                       int64_t capacity) {
  if (capacity > 0) return grouped_padded(a, w, counts);
  if (a.size(0) == 0) return a.new_zeros({0, w.size(1)});
  return grouped_packed(a, w, at::cumsum(counts, 0, at::kInt));
}

DispatchResult dispatch_local(const at::Tensor& x, const at::Tensor& topk_idx,
                              const at::Tensor& w1, int64_t num_experts, int64_t capacity,
                              bool return_recv) {
  const int64_t T = x.size(0), k = topk_idx.size(1), H = x.size(1), F = w1.size(1);
  const int64_t E = num_experts, n = T * k;
  const auto long_opts = x.options().dtype(at::kLong);
  at::Tensor flat = topk_idx.reshape({-1}).to(at::kLong);
  at::Tensor valid = flat.ge(0).logical_and(flat.lt(E));
  at::Tensor key = at::where(valid, flat, E);  // out-of-range ids sort last and are dropped
  auto sorted = at::sort(key, /*stable=*/true, /*dim=*/0, /*descending=*/false);
  at::Tensor skey = std::get<0>(sorted), perm = std::get<1>(sorted);
  // starts[e]: the first sorted position of expert e (starts[E]: of the dropped ids).
  at::Tensor starts = at::searchsorted(skey, at::arange(E + 1, long_opts));
  at::Tensor requested = starts.narrow(0, 1, E) - starts.narrow(0, 0, E);
  at::Tensor expert = skey.clamp_max(E - 1);
  at::Tensor row_in_e = at::arange(n, long_opts) - starts.index_select(0, expert);
  at::Tensor in_range = skey.lt(E);
  at::Tensor keep = capacity > 0 ? in_range.logical_and(row_in_e.lt(capacity)) : in_range;
  at::Tensor dest = capacity > 0 ? expert * capacity + row_in_e : at::arange(n, long_opts);
  at::Tensor route = at::full({n}, -1, long_opts);
  route.index_put_({perm}, at::where(keep, dest, -1));
  at::Tensor counts = (capacity > 0 ? requested.clamp_max(capacity) : requested).to(at::kInt);
  at::Tensor tokens = at::div(perm, k, "floor");
  at::Tensor recv, out;
  if (capacity == 0) {
    recv = x.index_select(0, tokens);  // [T*k, H] in expert order; dropped ids last
    at::Tensor offs = starts.narrow(0, 1, E).to(at::kInt);
    out = n > 0 ? grouped_packed(recv, w1, offs) : x.new_zeros({0, F});
    if (n > 0) {  // rows past offs[E-1] (dropped ids) are not computed: zero them
      out.narrow(0, 0, n).masked_fill_(in_range.logical_not().unsqueeze(1), 0);
    }
  } else {
    // Dropped choices land in a spare last row, which is cut off.
    at::Tensor slot = at::where(keep, dest, E * capacity);
    recv = at::zeros({E * capacity + 1, H}, x.options());
    recv.index_copy_(0, slot, x.index_select(0, tokens));
    recv = recv.narrow(0, 0, E * capacity).view({E, capacity, H});
    out = grouped_padded(recv, w1, counts);
  }
  return {out, counts, route.view({T, k}), counts.view({1, E}).clone(),
          return_recv ? recv : x.new_empty({0})};
}

at::Tensor gather_local(const at::Tensor& y, const at::Tensor& route) {
  const int64_t T = route.size(0), k = route.size(1), D = y.size(-1);
  auto [rows, kept] = rows_of(route);
  at::Tensor g = y.reshape({-1, D}).index_select(0, rows);
  return g.masked_fill_(kept.logical_not().unsqueeze(1), 0).view({T, k, D});
}

at::Tensor scatter_local(const at::Tensor& rows, const at::Tensor& route, int64_t e_local,
                         int64_t capacity, int64_t out_rows) {
  const int64_t D = rows.size(2);
  const int64_t R = capacity > 0 ? e_local * capacity : out_rows;
  auto [dest, kept] = rows_of(route);
  // Dropped choices land in a spare last row, which is cut off.
  at::Tensor slot = at::where(kept, dest, R);
  at::Tensor out = at::zeros({R + 1, D}, rows.options());
  out.index_copy_(0, slot, rows.reshape({-1, D}));
  out = out.narrow(0, 0, R);
  return capacity > 0 ? out.view({e_local, capacity, D}) : out;
}

}  // namespace moe
}  // namespace mkernel
