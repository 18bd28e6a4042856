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
from collections import OrderedDict
from typing import Any, NamedTuple

import torch
import torch.nn.functional as F
from torch import Tensor

from . import ops
from ._moe_registry import _grouped_wgrad

_mk = torch.ops.mkernel

__all__ = ["DispatchLayout", "MoEBuffer", "MoEMLP", "get_dispatch_layout", "reserve_tokens"]


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


class _Graphs:
    """CUDA graphs of one op keyed by what they read, least recently used first out."""

    def __init__(self, limit: int):
        self.graphs: OrderedDict[tuple, tuple[Any, Any]] = OrderedDict()  # key -> (graph, outputs)
        self.seen: OrderedDict[tuple, None] = OrderedDict()  # keys met once, not captured
        self.limit = limit
        self.captures = 0

    def get(self, key: tuple):
        hit = self.graphs.get(key)
        if hit is not None:
            self.graphs.move_to_end(key)
        return hit

    def sighted_before(self, key: tuple) -> bool:
        """Whether key was met before (and remember it now)."""
        if key in self.seen:
            return True
        self.seen[key] = None
        while len(self.seen) > 64:
            self.seen.popitem(last=False)
        return False

    def capture(self, key: tuple, fn) -> None:
        """fn() captured on a side stream into a graph with its own memory pool (no work runs)."""
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, stream=stream, capture_error_mode="thread_local"):
            outs = fn()
        torch.cuda.current_stream().wait_stream(stream)
        self.graphs[key] = (graph, outs)
        self.captures += 1
        while len(self.graphs) > self.limit:
            self.graphs.popitem(last=False)


class MoEBuffer:
    """A group's MoE dispatch and combine replayed from CUDA graphs (DeepEP's ``Buffer``, forward only).

    An eager :func:`mkernel.moe_dispatch_gemm` across nodes issues ~100 stream operations per call
    (pieces, waits, copies, cross-stream events); replayed from a CUDA graph the same GPU work runs
    faster (session 21, W=2 over 2 emulated nodes: 0.92x the link replayed, 0.81-0.85x eagerly,
    0.88-0.92x through a buffer). The buffer gives eager callers most of that. It fixes the
    group's token bound (:func:`reserve_tokens`) and replays:

    * the **direct graph** of these very inputs (captured at the second call that passes tensors
      at the same addresses with the same shapes, w1 included: a loop whose activations the caching
      allocator puts at the same place each step replays it from its third step, with no copy);
    * else the **static graph**: x and topk_idx copied into ``[max_tokens, ...]`` inputs of the
      buffer's own (rows ``T ..`` choose expert -1, which the CUDA kernels drop: no row of theirs
      reaches the layout), one graph per (dtype, H, k, w1), captured at the buffer's first call after
      an eager one (the warm-up that sizes the group's areas and tunes the GEMM).

    Every call is one exchange on every rank whichever way it goes, so ranks may differ in what
    they replay. Weights given to :meth:`dispatch_gemm` ride with it (as with the op): a
    :meth:`combine` given the same tensor, unchanged, uses the routes the dispatch carried.
    :meth:`combine` replays a graph per (y, handle, topk_weights) addresses from the
    second call that sees them (eager until then: y is too large to copy in).

    **Outputs are the graphs' own tensors: valid until the next call of this buffer that replays
    the same graph** (as DeepEP's low-latency buffers); clone what must outlive it. Each graph keeps
    its memory pool (the op's outputs and intermediates, sized by the static row bound
    ``W * max_tokens * min(k, E_local)``); at most ``max_graphs`` per op are kept. No
    autograd: use :func:`mkernel.moe_dispatch_gemm` / :func:`mkernel.moe_combine` for training. On
    the CPU the calls run the ops directly (the host reference; no graphs, no padding).

    Args:
        num_experts: experts over the group (divisible by its world size).
        max_tokens: the largest T any rank passes; every rank must pass the same value.
        capacity: as :func:`mkernel.moe_dispatch_gemm`'s.
        group: the mkernel group (None: the default one).
        max_graphs: graphs kept per op (least recently replayed dropped first).
    """

    def __init__(self, num_experts: int, max_tokens: int, *, capacity: int = 0, group: Any = None,
                 max_graphs: int = 3):
        if max_tokens < 1 or max_graphs < 1:
            raise ValueError(f"mkernel.MoEBuffer: max_tokens and max_graphs must be >= 1, got {max_tokens} "
                             f"and {max_graphs}")
        self.num_experts, self.max_tokens, self.capacity, self.group = num_experts, max_tokens, capacity, group
        reserve_tokens(max_tokens, group=group)
        self._inputs: dict[tuple, list] = {}  # static key -> [x, idx, rows of idx set to experts]
        self._dispatch, self._combine = _Graphs(max_graphs), _Graphs(max_graphs)
        self._views: dict[tuple, ops.MoeDispatchOutput] = {}  # (graph key, T) -> the user's view
        self._full: OrderedDict[int, ops.MoeHandle] = OrderedDict()  # route's address -> whole handle
        self._direct_graphs = True  # False: the static graph only (benchmarks time both paths)

    @property
    def captures(self) -> int:
        """Graphs captured so far, both ops (tests and benchmarks read it)."""
        return self._dispatch.captures + self._combine.captures

    def _check(self, x: Tensor, topk_idx: Tensor, topk_weights: Tensor | None) -> None:
        if x.dim() != 2 or topk_idx.dim() != 2 or topk_idx.shape[0] != x.shape[0]:
            raise ValueError(f"mkernel.MoEBuffer.dispatch_gemm: x must be [T, H] and topk_idx [T, k], got "
                             f"{tuple(x.shape)} and {tuple(topk_idx.shape)}")
        if topk_weights is not None and (topk_weights.shape != topk_idx.shape or
                                         topk_weights.dtype != torch.float32 or
                                         topk_weights.device != x.device):
            raise ValueError(f"mkernel.MoEBuffer.dispatch_gemm: topk_weights must be fp32 [T, k] on x's device "
                             f"like topk_idx {tuple(topk_idx.shape)}, got {topk_weights.dtype} "
                             f"{tuple(topk_weights.shape)} on {topk_weights.device}")
        if x.shape[0] > self.max_tokens:
            raise ValueError(f"mkernel.MoEBuffer.dispatch_gemm: x has {x.shape[0]} tokens, more than the "
                             f"buffer's max_tokens ({self.max_tokens})")
        if topk_idx.device != x.device:
            raise ValueError(f"mkernel.MoEBuffer.dispatch_gemm: topk_idx is on {topk_idx.device}, x on "
                             f"{x.device}")

    @staticmethod
    def _no_grad(name: str, *ts: Tensor) -> None:
        if torch.is_grad_enabled() and any(t.requires_grad for t in ts):
            raise ValueError(f"mkernel.MoEBuffer.{name} is forward only (its outputs are reused by later "
                             "calls); under autograd use mkernel.moe_dispatch_gemm / mkernel.moe_combine")

    @staticmethod
    def _carry(handle: ops.MoeHandle, full: ops.MoeHandle, tw: Tensor | None) -> ops.MoeHandle:
        """The user's handle carries the user's weights (the combine checks them against its own)."""
        if tw is None or full.peer_routes is None:
            return handle
        return handle._replace(peer_routes=full.peer_routes, routed_weights=tw, weights_version=tw._version)

    def _keep(self, res: ops.MoeDispatchOutput, t: int, tw: Tensor | None = None) -> ops.MoeDispatchOutput:
        """The user's view of a dispatch's outputs (route cut to T rows); remembers the whole handle."""
        handle = self._carry(ops.MoeHandle(res.handle.route[:t], res.handle.recv_counts), res.handle, tw)
        ptr = handle.route.data_ptr()
        self._full.pop(ptr, None)
        self._full[ptr] = res.handle
        while len(self._full) > 16:  # eager results (misses, CPU) are not kept for ever
            self._full.popitem(last=False)
        return res._replace(handle=handle)

    def _replayed(self, key: tuple, t: int, hit, tw: Tensor | None = None) -> ops.MoeDispatchOutput:
        hit[0].replay()
        view = self._views.get((key, t))
        if view is None:
            if len(self._views) > 256:
                self._views.clear()
            view = self._views[(key, t)] = self._keep(hit[1], t)
        else:
            self._full[view.handle.route.data_ptr()] = hit[1].handle
            self._full.move_to_end(view.handle.route.data_ptr())
        if tw is not None:  # this call's weights (the view is shared by the calls of this graph)
            view = view._replace(handle=self._carry(view.handle, hit[1].handle, tw))
        return view

    def _dispatch_call(self, x: Tensor, topk_idx: Tensor, w1: Tensor,
                       tw: Tensor | None = None) -> ops.MoeDispatchOutput:
        return ops.moe_dispatch_gemm(x, topk_idx, w1, num_experts=self.num_experts, capacity=self.capacity,
                                     topk_weights=tw, group=self.group)

    def dispatch_gemm(self, x: Tensor, topk_idx: Tensor, w1: Tensor,
                      topk_weights: Tensor | None = None) -> ops.MoeDispatchOutput:
        """:func:`mkernel.moe_dispatch_gemm` of ``x [T, H]`` (T <= max_tokens), ``topk_idx [T, k]``,
        ``w1 [E_local, F, H]``; the outputs as the op's (``handle.route`` ``[T, k]``), valid until
        this buffer replays the same graph again. ``topk_weights`` (``[T, k]`` fp32, optional; every
        rank gives them or none does): carried with the dispatch, so that :meth:`combine` given the
        same tensor, unchanged, needs no exchange of routes before its first partial sum."""
        t = x.shape[0]
        tw = topk_weights
        wkey = (w1.data_ptr(), w1.shape, w1.stride(), w1.dtype)
        twkey = None if tw is None else (tw.data_ptr(), tw.shape, tw.stride(), tw.dtype)
        direct = ("direct", x.data_ptr(), x.shape, x.stride(), x.dtype, topk_idx.data_ptr(),
                  topk_idx.shape, topk_idx.stride(), topk_idx.dtype, twkey) + wkey
        hit = self._dispatch.get(direct)
        if hit is not None:  # these very tensors, replayed (checked when captured)
            self._no_grad("dispatch_gemm", x, w1)
            return self._replayed(direct, t, hit, tw)
        self._check(x, topk_idx, tw)
        self._no_grad("dispatch_gemm", x, w1)
        if x.device.type != "cuda":  # the host reference: no graphs, no padding (it rejects id -1)
            return self._keep(self._dispatch_call(x, topk_idx, w1, tw), t, tw)
        skey = (x.device, x.dtype, x.shape[1], topk_idx.shape[1], topk_idx.dtype, tw is not None)
        if skey not in self._inputs:
            k = topk_idx.shape[1]
            self._inputs[skey] = [torch.zeros(self.max_tokens, x.shape[1], dtype=x.dtype, device=x.device),
                                  torch.full((self.max_tokens, k), -1, dtype=topk_idx.dtype, device=x.device), 0,
                                  torch.zeros(self.max_tokens, k, dtype=torch.float32, device=x.device)
                                  if tw is not None else None]
        static = self._inputs[skey]
        sx, sidx, live, sw = static
        sx[:t].copy_(x)
        sidx[:t].copy_(topk_idx)
        if sw is not None:
            sw[:t].copy_(tw)
        if live > t:
            sidx[t:live].fill_(-1)  # rows past T choose no expert (their x rows stay as they were)
            if sw is not None:
                sw[t:live].zero_()
        static[2] = t
        key = ("static",) + skey + wkey
        hit = self._dispatch.get(key)
        if hit is None:
            res = self._keep(self._dispatch_call(sx, sidx, w1, sw), t, tw)  # this call's exchange; the warm-up
            self._dispatch.capture(key, lambda: self._dispatch_call(sx, sidx, w1, sw))
        else:
            res = self._replayed(key, t, hit, tw)
        if self._direct_graphs and self._dispatch.sighted_before(direct):  # the same tensors again: a graph of their own
            self._dispatch.capture(direct, lambda: self._dispatch_call(x, topk_idx, w1, tw))
        return res

    def combine(self, y: Tensor, handle: ops.MoeHandle, topk_weights: Tensor) -> Tensor:
        """:func:`mkernel.moe_combine` of ``y`` (the local experts' outputs in the layout of this
        buffer's dispatch) with ``handle`` from :meth:`dispatch_gemm` and ``topk_weights [T, k]``
        fp32; returns ``[T, H]``, valid until this buffer replays the same combine graph again."""
        route, w = handle.route, topk_weights
        # The routes the dispatch carried, when these are the weights it was given, unchanged.
        carried = ops._carried_routes(handle, w) is not None
        key = (y.data_ptr(), y.shape, y.stride(), y.dtype, route.data_ptr(), route.shape,
               handle.recv_counts.data_ptr(), w.data_ptr(), w.shape, w.stride(), w.dtype, carried)
        hit = self._combine.get(key)
        if hit is not None:  # a graph of these very tensors (each entry keeps its handle alive)
            self._no_grad("combine", y, w)
            out, _, sw = hit[1]
            if sw is not w and not carried:  # (carried: sw is what the dispatch read, w's values)
                sw[:w.shape[0]].copy_(w)  # its rows past T stay zero
            hit[0].replay()
            return out
        full = self._full.get(route.data_ptr())
        if full is None:
            raise ValueError("mkernel.MoEBuffer.combine: handle does not come from this buffer's dispatch_gemm")
        t, k = route.shape
        if tuple(w.shape) != (t, k):
            raise ValueError(f"mkernel.MoEBuffer.combine: topk_weights must be [{t}, {k}] (the dispatch's "
                             f"tokens and choices), got {tuple(w.shape)}")
        self._no_grad("combine", y, w)
        if y.device.type != "cuda":
            return ops.moe_combine(y, full, w, group=self.group)
        tf = full.route.shape[0]  # max_tokens (the static graph's, padded) or T (a direct graph's)
        if carried and full.routed_weights is not None:
            # The weights the dispatch read (the caller's own, or the static graph's padded copy of
            # them): the combine uses the routes it carried.
            sw = full.routed_weights
            full = full._replace(weights_version=sw._version)
        elif tf == t and w.dtype == torch.float32 and w.is_contiguous():
            sw = w  # as they are: no padding to add
            full = full._replace(peer_routes=None)  # (other weights than the dispatch's, if any)
        else:
            sw = torch.zeros(tf, k, dtype=torch.float32, device=y.device)
            sw[:t].copy_(w)

        def call() -> tuple[Tensor, ops.MoeHandle, Tensor]:
            return ops.moe_combine(y, full, sw, num_tokens=tf, group=self.group)[:t], full, sw

        res = call()
        if self._combine.sighted_before(key):  # the second call at these addresses: captured for the next
            self._combine.capture(key, call)
        return res[0]

    def clear(self) -> None:
        """Drop every captured graph and static tensor (the next calls capture again)."""
        for cache in (self._inputs, self._views, self._full):
            cache.clear()
        self._dispatch, self._combine = _Graphs(self._dispatch.limit), _Graphs(self._combine.limit)


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
        inference_max_tokens: > 0: forward calls on CUDA without autograd (``torch.no_grad()``,
            inference) run the dispatch and the combine through a :class:`MoEBuffer` of this
            many tokens per rank, replaying CUDA graphs (the output is cloned out of the buffer:
            it stays valid). Sets the group's :func:`reserve_tokens` at the first such call, so
            every rank must pass the same value and no call may pass more tokens.
    """

    def __init__(self, hidden_size: int, ffn_hidden_size: int, num_experts: int, *,
                 gated: bool = True, capacity: int = 0, group: Any = None,
                 dtype: torch.dtype | None = None, device: torch.device | str | None = None,
                 inference_max_tokens: int = 0):
        super().__init__()
        self.group = group
        self.inference_max_tokens = inference_max_tokens
        self._buffer: MoEBuffer | None = None
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
        if self.inference_max_tokens > 0 and x.is_cuda and not torch.is_grad_enabled():
            return self._forward_buffered(x, topk_idx, topk_weights)
        # The weights travel with the dispatch (across nodes the combine then needs no exchange of
        # its own before its first partial sum): the same tensor goes to both ops.
        w = topk_weights.float().contiguous()
        res = ops.moe_dispatch_gemm(x, topk_idx, self.w1, num_experts=self.num_experts,
                                    capacity=self.capacity, topk_weights=w, group=self.group)
        h = res.out
        if self.gated:
            a = F.silu(h[..., :self.ffn_hidden_size]) * h[..., self.ffn_hidden_size:]
        else:
            a = F.gelu(h)
        y = _ExpertLinear.apply(a, self.w2, res.counts, self.capacity)
        return ops.moe_combine(y, res.handle, w, group=self.group)

    def _forward_buffered(self, x: Tensor, topk_idx: Tensor, topk_weights: Tensor) -> Tensor:
        """forward's inference path: the exchanges replayed from the layer's MoEBuffer."""
        if self._buffer is None:
            self._buffer = MoEBuffer(self.num_experts, self.inference_max_tokens, capacity=self.capacity,
                                     group=self.group)
        w = topk_weights.float().contiguous()  # carried with the dispatch, as in forward
        res = self._buffer.dispatch_gemm(x, topk_idx, self.w1, w)
        h = res.out
        if self.gated:
            a = F.silu(h[..., :self.ffn_hidden_size]) * h[..., self.ffn_hidden_size:]
        else:
            a = F.gelu(h)
        y = _grouped(a, self.w2, res.counts, self.capacity)
        return self._buffer.combine(y, res.handle, w).clone()
