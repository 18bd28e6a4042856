"""Backward formulas of the fused ops, registered with ``torch.library.register_autograd`` so
that ``torch.ops.mkernel.*``, the ``mkernel.*`` wrappers and ``torch.compile`` all differentiate
them (Megatron's column-/row-parallel rules under sequence parallelism):

- ``ag_gemm``: ``out = allgather(x) @ w.T``. dgrad is a reduce-scatter of ``grad @ w``, i.e.
  ``gemm_rs(grad, w.T)``; wgrad is ``grad.T @ allgather(x)`` with the gathered input saved by
  the forward when it returned it, else gathered again (an ``ag_gemm`` with an 8-row weight).
  A gradient flowing into the returned gathered input adds its reduce-scatter to dgrad.
- ``gemm_rs``: ``out = reduce_scatter(x @ w.T)``. dgrad is ``allgather(grad) @ w``, i.e.
  ``ag_gemm(grad, w.T)``, whose gathered ``grad`` gives wgrad ``gathered.T @ x``.
- ``gemm_ar``: ``out = allreduce(x @ w.T)``. The incoming gradient is already the same on every
  rank (the all-reduce's backward is the identity): dgrad ``grad @ w`` and wgrad ``grad.T @ x``
  are local, no communication.

The local GEMMs of the backward are ``torch.matmul`` (cuBLAS on CUDA, any dtype on CPU), or the
engine where torch's half-precision GEMM is wrong on this GPU share (``_local_gemm.py``).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from ._local_gemm import dgrad, wgrad

_ops = torch.ops.mkernel


def _t(w: Tensor) -> Tensor:
    """``w.T`` as a contiguous tensor (the ops take row-major ``[N, K]`` operands)."""
    return w.t().contiguous()


# ---- ag_gemm(x [m, K], w [N, K], group, world_size, return_gathered) -> (out, gathered) ----

def _ag_setup(ctx: Any, inputs: tuple, output: tuple) -> None:
    x, w, group, world_size, return_gathered = inputs
    ctx.group, ctx.world_size = group, world_size
    ctx.gathered_saved = bool(return_gathered)
    ctx.save_for_backward(x, w, output[1] if return_gathered else None)


def _ag_backward(ctx: Any, grad_out: Tensor | None, grad_gathered: Tensor | None):
    x, w, gathered = ctx.saved_tensors
    group, world = ctx.group, ctx.world_size
    grad_x = grad_w = None
    if grad_out is not None:
        grad_out = grad_out.contiguous()
        if ctx.needs_input_grad[0]:
            # [W*m, N] @ [N, K] summed over the ranks' N shards, scattered by rows: [m, K].
            grad_x = _ops.gemm_rs.default(grad_out, _t(w), group, world)
        if ctx.needs_input_grad[1]:
            if gathered is None:
                if x.is_cuda and hasattr(_ops, "all_gather"):  # the substrate's collective
                    gathered = _ops.all_gather.default(x.contiguous(), group, world)
                else:
                    probe = w.new_zeros(8, w.shape[1])  # the cheapest GEMM that gathers x
                    gathered = _ops.ag_gemm.default(x, probe, group, world, True)[1]
            grad_w = wgrad(grad_out, gathered)
    if grad_gathered is not None and ctx.needs_input_grad[0] and grad_gathered.numel():
        # d(allgather(x)) / dx: the reduce-scatter of the gathered input's gradient (an exact
        # GEMM with the identity: every product is one term).
        eye = torch.eye(x.shape[1], dtype=x.dtype, device=x.device)
        extra = _ops.gemm_rs.default(grad_gathered.contiguous(), eye, group, world)
        grad_x = extra if grad_x is None else grad_x + extra
    return grad_x, grad_w, None, None, None


# ---- gemm_rs(x [M, k], w [N, k], group, world_size) -> out [M/W, N] ------------------------

def _rs_setup(ctx: Any, inputs: tuple, output: Tensor) -> None:
    x, w, group, world_size = inputs
    ctx.group, ctx.world_size = group, world_size
    ctx.save_for_backward(x, w)


def _rs_backward(ctx: Any, grad_out: Tensor):
    x, w = ctx.saved_tensors
    if grad_out is None:
        return None, None, None, None
    grad_out = grad_out.contiguous()
    # allgather(grad) [M, N] @ w [N, k] -> [M, k]; the gathered grad gives wgrad.
    grad_x, gathered = _ops.ag_gemm.default(grad_out, _t(w), ctx.group, ctx.world_size, True)
    grad_w = wgrad(gathered, x) if ctx.needs_input_grad[1] else None
    return (grad_x if ctx.needs_input_grad[0] else None), grad_w, None, None


# ---- gemm_ar(x [M, k], w [N, k], group, world_size) -> out [M, N] --------------------------

def _ar_setup(ctx: Any, inputs: tuple, output: Tensor) -> None:
    x, w, _, _ = inputs
    ctx.save_for_backward(x, w)


def _ar_backward(ctx: Any, grad_out: Tensor):
    x, w = ctx.saved_tensors
    if grad_out is None:
        return None, None, None, None
    grad_x = dgrad(grad_out, w) if ctx.needs_input_grad[0] else None
    grad_w = wgrad(grad_out, x) if ctx.needs_input_grad[1] else None
    return grad_x, grad_w, None, None


torch.library.register_autograd("mkernel::ag_gemm", _ag_backward, setup_context=_ag_setup)
torch.library.register_autograd("mkernel::gemm_rs", _rs_backward, setup_context=_rs_setup)
torch.library.register_autograd("mkernel::gemm_ar", _ar_backward, setup_context=_ar_setup)

# The attention engine's backward (python/mkernel/ops.py: torch's FA2 backward fed with our
# out and lse; GQA gradients summed over each kv head's query heads).
from .ops import _attention_autograd_backward, _attention_setup_context  # noqa: E402

torch.library.register_autograd("mkernel::attention", _attention_autograd_backward,
                                setup_context=_attention_setup_context)

# ring_attention's backward (python/mkernel/_ring_backward.py: the per-block attention backward
# with the forward's LSE, K/V gathered and dK/dV reduce-scattered over the substrate).
from . import _ring_backward  # noqa: E402

torch.library.register_autograd("mkernel::ring_attention", _ring_backward.backward,
                                setup_context=_ring_backward.setup_context)
