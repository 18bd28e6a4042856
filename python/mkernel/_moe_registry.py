"""The Python half of the MoE ops' registration: moe_dispatch_gemm's fake kernel and the
autograd formulas of moe_dispatch_gemm and moe_combine (imported by ``mkernel`` once ``_C`` is
loaded).

Fake kernel: with ``capacity == 0`` at world size > 1, the packed row count ``R`` depends on
every rank's routing, so under ``torch.compile`` it is an unbacked SymInt (like ``nonzero``'s);
at world size 1 it is ``T * k`` and with ``capacity > 0`` the output is ``[E_local, capacity, F]``
(both static). The C++ validator runs first (``mkernel._moe_dispatch_check``), so a bad input
gets the same error while tracing as eagerly.

Autograd (the exchange of one direction is the other's backward):

* ``moe_dispatch_gemm``: ``out = x_e @ w1[e].T`` on dispatched rows, so
  ``grad_x = moe_combine(grad_out_e @ w1[e], weights = 1)`` (each token's choices summed in
  fp32) and ``grad_w1[e] = grad_out_e.T @ x_e`` on the received rows (``return_recv``).
* ``moe_combine``: ``out[t] = sum_j w[t, j] * y[row(t, j)]``, so
  ``grad_y[row(t, j)] = w[t, j] * grad_out[t]`` (``_moe_scatter``, a dispatch by route) and
  ``grad_w[t, j] = <grad_out[t], y[row(t, j)]>`` (``_moe_gather`` brings the rows back).

At world size > 1 the backward passes are collectives too: every rank runs them in the same
order (the same graph), as in the forward.
"""

from __future__ import annotations

import torch
from torch import Tensor

_OPS = torch.ops.mkernel


def _dispatch_fake(x, topk_idx, w1, group, world_size, num_experts, capacity=0,
                   return_recv=False, topk_weights=None):
    _OPS._moe_dispatch_check(x, topk_idx, w1, group, world_size, num_experts, capacity, topk_weights)
    e_local = num_experts // world_size
    tokens, k = topk_idx.shape
    if capacity > 0:
        lead = (e_local, capacity)
    elif world_size == 1:
        lead = (tokens * k,)
    else:
        lead = (torch.library.get_ctx().new_dynamic_size(),)
    out = x.new_empty((*lead, w1.shape[1]))
    counts = x.new_empty((e_local,), dtype=torch.int32)
    route = x.new_empty((tokens, k), dtype=torch.int64)
    recv_counts = x.new_empty((world_size, e_local), dtype=torch.int32)
    recv_x = x.new_empty((*lead, x.shape[1])) if return_recv else x.new_empty((0,))
    # Carried routes: [W*max_T, 3k] across nodes with weights (max_T is the group's), else [0, 3k].
    carried = topk_weights is not None and world_size > 1 and capacity == 0
    peer_rows = torch.library.get_ctx().new_dynamic_size() if carried else 0
    peer_routes = x.new_empty((peer_rows, 3 * k), dtype=torch.int32)
    return out, counts, route, recv_counts, recv_x, peer_routes


_WARNED: set[str] = set()


def _warn_once(msg: str) -> None:
    if msg not in _WARNED:
        _WARNED.add(msg)
        import logging

        logging.getLogger("mkernel").warning(msg)


def _expert_rows(counts: Tensor, capacity: int) -> list[tuple[int, int]]:
    """(first row, rows) of each local expert in the flattened layout (one host read)."""
    spans, start = [], 0
    for e, n in enumerate(counts.tolist()):
        first = e * capacity if capacity > 0 else start
        spans.append((first, n))
        start += n
    return spans


def _grouped_dgrad(grad_out: Tensor, w1: Tensor, counts: Tensor, capacity: int) -> Tensor:
    """grad_out_e @ w1[e] per local expert, in grad_out's layout (rows past counts unspecified)."""
    w1_t = w1.transpose(1, 2).contiguous()  # [E, H, F]: the engine's [N, K] per expert
    if capacity > 0:
        return _OPS.gemm_grouped(grad_out.contiguous(), w1_t, counts)
    offs = torch.cumsum(counts, 0, dtype=torch.int32)
    return _OPS.gemm_grouped_packed(grad_out.contiguous(), w1_t, offs)


def _grouped_wgrad(grad_out: Tensor, recv_x: Tensor, counts: Tensor, capacity: int) -> Tensor:
    """grad_out_e.T @ x_e per local expert -> [E_local, F, H] (fp32 accumulation).

    Padded layout: the dead rows zeroed, then the engine's grouped GEMM on CUDA
    (:func:`_padded_wgrad_cuda`), one bmm on CPU. Packed layout: ``torch._grouped_mm`` with the groups along
    the reduction (``offs``), where its rules hold (bf16, rows 16-byte aligned);
    else a per-expert loop, which reads the counts on the host.
    """
    f, h = grad_out.shape[-1], recv_x.shape[-1]
    if capacity > 0:
        live = torch.arange(capacity, device=counts.device).unsqueeze(0) < counts.unsqueeze(1)
        g = grad_out.masked_fill(~live.unsqueeze(-1), 0)
        x = recv_x.masked_fill(~live.unsqueeze(-1), 0)
        if g.is_cuda:
            return _padded_wgrad_cuda(g, x)
        return torch.bmm(g.transpose(1, 2), x)
    g2, x2 = grad_out.reshape(-1, f).contiguous(), recv_x.reshape(-1, h).contiguous()
    offs = torch.cumsum(counts, 0, dtype=torch.int32)
    if g2.shape[0] and offs.numel():
        # Rows past the counts are unspecified on CUDA (at W > 1 the packed tensors hold a
        # static bound of rows): zero them so no NaN reaches a reduction over rows.
        live = (torch.arange(g2.shape[0], device=g2.device) < offs[-1:]).unsqueeze(1)
        g2, x2 = g2.masked_fill(~live, 0), x2.masked_fill(~live, 0)
    aligned = (f * g2.element_size()) % 16 == 0 and (h * x2.element_size()) % 16 == 0
    if aligned and g2.dtype == torch.bfloat16:
        try:
            return torch._grouped_mm(g2.t(), x2, offs=offs)
        except RuntimeError as e:  # a layout rule of this torch build: the loop below is exact
            _warn_once(f"mkernel.moe_dispatch_gemm backward: torch._grouped_mm refused the weight "
                       f"gradient ({e}); using a per-expert loop (one host read of the counts)")
    out = torch.zeros((counts.shape[0], f, h), dtype=torch.float32, device=grad_out.device)
    for expert, (first, n) in enumerate(_expert_rows(counts, capacity)):
        if n:
            out[expert] = g2[first:first + n].float().T @ x2[first:first + n].float()
    return out.to(grad_out.dtype)


def _padded_wgrad_cuda(g: Tensor, x: Tensor) -> Tensor:
    """sum_c g[e, c]^T x[e, c] -> [E, F, H] for the padded layout on CUDA, dead rows zeroed.

    Not torch.bmm: torch 2.11 (cu130)'s half-precision GEMMs returned wrong values on a share of
    an H100 (MPS, 42 of 132 SMs; sessions 45-46): the one-batch bmm here 0.26 to 2e6 relative
    error for C = 9 to 32 rows, transposed view or not (a NaN weight gradient at W = 3), and
    torch.mm too (16 of 48 probed shapes), all right at the full GPU and in float32. The engine's
    padded grouped GEMM instead (fuzz-checked at every share): a = g^T [E, F, C8], b = x^T [E, H, C8], every expert's F rows live, the reduction C
    zero-padded to a multiple of 8 for TMA's 16-byte row strides. Outputs whose rows TMA cannot
    store (H * 2 bytes not a multiple of 16) take float32 bmm (right at C = 27 on that share).
    """
    e, c, f = g.shape
    h = x.shape[-1]
    if (h * x.element_size()) % 16 or g.dtype not in (torch.bfloat16, torch.float16):
        return torch.bmm(g.float().transpose(1, 2), x.float()).to(g.dtype)
    c8 = -(-c // 8) * 8
    gt = g.new_zeros(e, f, c8)
    gt[:, :, :c] = g.transpose(1, 2)
    xt = x.new_zeros(e, h, c8)
    xt[:, :, :c] = x.transpose(1, 2)
    rows = torch.full((e,), f, dtype=torch.int32, device=g.device)
    return _OPS.gemm_grouped(gt, xt, rows)


def _dispatch_setup(ctx, inputs, output):
    x, topk_idx, w1, group, world_size, num_experts, capacity, return_recv, _weights = inputs
    _, counts, route, recv_counts, recv_x, _peer_routes = output
    ctx.group, ctx.world_size, ctx.capacity = group, world_size, capacity
    ctx.has_recv = return_recv
    ctx.x_meta = (x.shape[0], x.dtype)
    ctx.save_for_backward(w1, counts, route, recv_counts, recv_x)


def _dispatch_backward(ctx, grad_out, _grad_counts, _grad_route, _grad_recv_counts, grad_recv_x,
                       _grad_peer_routes):
    w1, counts, route, recv_counts, recv_x = ctx.saved_tensors
    grad_x = grad_w1 = None
    if ctx.needs_input_grad[0]:
        grad_rows = _grouped_dgrad(grad_out, w1, counts, ctx.capacity)
        if grad_recv_x is not None and grad_recv_x.numel():
            grad_rows = grad_rows + grad_recv_x
        ones = torch.ones(route.shape, dtype=torch.float32, device=route.device)
        grad_x = _OPS.moe_combine(grad_rows.contiguous(), route, recv_counts, ones, ctx.group,
                                  ctx.world_size, route.shape[0])
    if ctx.needs_input_grad[2]:
        if not ctx.has_recv:
            raise RuntimeError(
                "mkernel.moe_dispatch_gemm: the gradient of w1 needs the received rows: call the "
                "op with return_recv=True (mkernel.moe_dispatch_gemm does when w1 requires grad)")
        grad_w1 = _grouped_wgrad(grad_out, recv_x, counts, ctx.capacity)
    # (topk_weights only ride along to the combine: their gradient is the combine's.)
    return grad_x, None, grad_w1, None, None, None, None, None, None


def _combine_setup(ctx, inputs, output):
    y, route, recv_counts, topk_weights, group, world_size, num_tokens, _peer_routes = inputs
    ctx.group, ctx.world_size = group, world_size
    ctx.capacity = y.shape[1] if y.dim() == 3 else 0
    ctx.save_for_backward(y, route, recv_counts, topk_weights)


def _combine_backward(ctx, grad_out):
    y, route, recv_counts, topk_weights = ctx.saved_tensors
    grad_y = grad_w = None
    kept = (route >= 0).unsqueeze(-1)
    if ctx.needs_input_grad[0]:
        rows = (topk_weights.unsqueeze(-1) * grad_out.float().unsqueeze(1)).masked_fill(~kept, 0)
        out_rows = y.shape[0] if ctx.capacity == 0 else 0
        grad_y = _OPS._moe_scatter(rows.to(y.dtype).contiguous(), route, recv_counts, ctx.group,
                                   ctx.world_size, ctx.capacity, out_rows)
    if ctx.needs_input_grad[3]:
        rows = _OPS._moe_gather(y, route, recv_counts, ctx.group, ctx.world_size)
        grad_w = (rows.float() * grad_out.float().unsqueeze(1)).sum(-1).masked_fill(~kept[..., 0], 0)
    return grad_y, None, None, grad_w, None, None, None, None


torch.library.register_fake("mkernel::moe_dispatch_gemm")(_dispatch_fake)
torch.library.register_autograd("mkernel::moe_dispatch_gemm", _dispatch_backward,
                                setup_context=_dispatch_setup)
torch.library.register_autograd("mkernel::moe_combine", _combine_backward,
                                setup_context=_combine_setup)
