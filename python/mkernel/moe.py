"""Expert-parallel MoE layer on the fused ops: :class:`MoEMLP`.

Router outputs in, FFN output out: ``forward(x [T, H], topk_idx [T, k], topk_weights [T, k])``
returns ``[T, H]`` = ``sum_j topk_weights[t, j] * FFN_{topk_idx[t, j]}(x[t])``, the experts
spread over the group's ranks (rank r holds experts ``r*E_local .. (r+1)*E_local - 1``).
One :func:`mkernel.moe_dispatch_gemm` (tokens to their experts' ranks, fused with the first
expert GEMM), the activation on the received rows, the second expert GEMM (the engine's grouped
GEMM on the same layout), one :func:`mkernel.moe_combine` (back and weighted sum, fp32).
Differentiable in x, the expert weights and topk_weights.
"""

from __future__ import annotations

import math
from typing import Any, NamedTuple

import torch
import torch.nn.functional as F
from torch import Tensor

from . import ops
from ._moe_registry import _grouped_wgrad

_mk = torch.ops.mkernel

__all__ = ["DispatchLayout", "MoEMLP", "get_dispatch_layout", "reserve_tokens"]


class DispatchLayout(NamedTuple):
    """What a dispatch of ``topk_idx`` sends from this rank (DeepEP's ``get_dispatch_layout``)."""

    tokens_per_rank: Tensor
    """``[W]`` int32: tokens sent to each rank (each token once per rank, as the dispatch does)."""
    tokens_per_expert: Tensor
    """``[num_experts]`` int32: choices of each expert."""
    is_token_in_rank: Tensor
    """``[T, W]`` bool: whether token t goes to rank r."""


def get_dispatch_layout(topk_idx: Tensor, num_experts: int, world_size: int) -> DispatchLayout:
    """The counts of a dispatch, computed on topk_idx's device without a host sync.

    Args:
        topk_idx: ``[T, k]`` expert ids in ``[0, num_experts)`` (int64 or int32).
        num_experts: experts over the group (divisible by world_size).
        world_size: ranks in the group.
    """
    if num_experts % world_size:
        raise ValueError(f"mkernel.get_dispatch_layout: num_experts ({num_experts}) must be "
                         f"divisible by world_size ({world_size})")
    idx = topk_idx.long()
    dest = idx // (num_experts // world_size)
    in_rank = torch.zeros(idx.shape[0], world_size, dtype=torch.bool, device=idx.device)
    in_rank.scatter_(1, dest, True)
    per_expert = torch.zeros(num_experts, dtype=torch.int32, device=idx.device)
    per_expert.scatter_add_(0, idx.reshape(-1), torch.ones_like(idx.reshape(-1), dtype=torch.int32))
    return DispatchLayout(in_rank.sum(0, dtype=torch.int32), per_expert, in_rank)


def reserve_tokens(max_tokens: int, group: Any = None) -> None:
    """Fix the group's MoE token bound: every later :func:`mkernel.moe_dispatch_gemm` of the
    group on CUDA (W > 1) sizes its token areas, and with ``capacity == 0`` its packed
    outputs (``W * max_tokens * min(k, E_local)`` rows), for ``max_tokens`` tokens per rank,
    instead of all-gathering every rank's T on the host at each call. Shapes then stay fixed
    call after call (CUDA graphs, no host exchange). Every rank must pass the same value, and
    every later call's T must not exceed it; 0 goes back to the per-call exchange.

    Args:
        max_tokens: the largest T any rank will pass.
        group: the mkernel group (None: the default one).
    """
    g = group if group is not None else ops._default_group()
    torch.ops.mkernel._moe_reserve(g.handle, g.world_size, int(max_tokens))


def _grouped(a: Tensor, w: Tensor, counts: Tensor, capacity: int) -> Tensor:
    """a_e @ w[e].T per local expert on the dispatch layout (rows past the counts unspecified)."""
    if capacity > 0:
        return _mk.gemm_grouped(a.contiguous(), w, counts)
    return _mk.gemm_grouped_packed(a.contiguous(), w, torch.cumsum(counts, 0, dtype=torch.int32))


class _ExpertLinear(torch.autograd.Function):
    """y_e = a_e @ w[e].T on the dispatch layout (packed [R, K] or padded [E, C, K])."""

    @staticmethod
    def forward(ctx, a: Tensor, w: Tensor, counts: Tensor, capacity: int) -> Tensor:
        ctx.save_for_backward(a, w, counts)
        ctx.capacity = capacity
        return _grouped(a, w, counts, capacity)

    @staticmethod
    def backward(ctx, grad: Tensor):
        a, w, counts = ctx.saved_tensors
        grad_a = grad_w = None
        if ctx.needs_input_grad[0]:
            grad_a = _grouped(grad, w.transpose(1, 2).contiguous(), counts, ctx.capacity)
        if ctx.needs_input_grad[1]:
            grad_w = _grouped_wgrad(grad, a, counts, ctx.capacity)
        return grad_a, grad_w, None, None


class MoEMLP(torch.nn.Module):
    """This rank's experts of an expert-parallel MoE FFN.

    Args:
        hidden_size: H.
        ffn_hidden_size: I, each expert's intermediate size.
        num_experts: experts over the whole group (divisible by its world size).
        gated: SwiGLU experts (``w1`` is ``[E_local, 2*I, H]``, ``silu(h[:I]) * h[I:]``) or plain
            GELU ones (``w1`` is ``[E_local, I, H]``).
        capacity: 0 (capacity-free, packed rows) or token slots per local expert (static
            shapes; overflow dropped deterministically, see :func:`mkernel.moe_dispatch_gemm`).
        group: the mkernel group (None: the default one).
    """

    def __init__(self, hidden_size: int, ffn_hidden_size: int, num_experts: int, *,
                 gated: bool = True, capacity: int = 0, group: Any = None,
                 dtype: torch.dtype | None = None, device: torch.device | str | None = None):
        super().__init__()
        self.group = group
        world = (group if group is not None else ops._default_group()).world_size
        if num_experts % world:
            raise ValueError(f"mkernel.MoEMLP: num_experts ({num_experts}) must be divisible by "
                             f"the group's world size ({world})")
        self.num_experts, self.local_experts = num_experts, num_experts // world
        self.ffn_hidden_size, self.gated, self.capacity = ffn_hidden_size, gated, capacity
        rows1 = 2 * ffn_hidden_size if gated else ffn_hidden_size
        kw = dict(dtype=dtype, device=device)
        self.w1 = torch.nn.Parameter(torch.empty(self.local_experts, rows1, hidden_size, **kw))
        self.w2 = torch.nn.Parameter(torch.empty(self.local_experts, hidden_size, ffn_hidden_size, **kw))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        for w in (self.w1, self.w2):
            torch.nn.init.normal_(w, std=1.0 / math.sqrt(w.shape[-1]))

    def forward(self, x: Tensor, topk_idx: Tensor, topk_weights: Tensor) -> Tensor:
        """x ``[T, H]``, topk_idx ``[T, k]`` expert ids, topk_weights ``[T, k]`` -> ``[T, H]``."""
        res = ops.moe_dispatch_gemm(x, topk_idx, self.w1, num_experts=self.num_experts,
                                    capacity=self.capacity, group=self.group)
        h = res.out
        if self.gated:
            a = F.silu(h[..., :self.ffn_hidden_size]) * h[..., self.ffn_hidden_size:]
        else:
            a = F.gelu(h)
        y = _ExpertLinear.apply(a, self.w2, res.counts, self.capacity)
        return ops.moe_combine(y, res.handle, topk_weights.float(), group=self.group)
