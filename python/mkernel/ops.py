"""The mkernel ops as plain, typed Python functions.

Each function is a thin wrapper over its ``torch.ops.mkernel.<op>.default`` (registered by the
``mkernel._C`` extension, which ``import mkernel`` loads first): it resolves ``group`` into the
group handle and world size that the op's schema takes explicitly, and passes the tensors through
untouched. Inputs must be row-major contiguous; nothing is copied behind your back.

Validation, the shapes of the outputs and the fake (meta) kernels that ``torch.compile`` traces
with live in C++ (``csrc/<op>.cpp``): one validator per op, shared by its CPU reference, CUDA and
Meta kernels, so a bad input gets the same error eagerly, on every backend, and while tracing.
Autograd is not registered yet.

Dtypes: bf16 or fp16 on CUDA; the CPU reference path also accepts fp32. Weights follow
:func:`torch.nn.functional.linear`: ``y = x @ w.T`` with ``w`` of shape ``[N, K]``. ``W`` below is
the group's world size.

Importing this module needs neither the Go control plane nor the built extension: the ops are
looked up when called, and the default group is imported from :mod:`mkernel.runtime` only when
``group`` is left out.
"""

from __future__ import annotations

from typing import Literal, NamedTuple, Protocol, overload

import torch
from torch import Tensor

__all__ = [
    "Group",
    "MoeDispatchOutput",
    "GEMM_CONFIGS",
    "ag_gemm",
    "all_gather",
    "all_reduce",
    "gemm",
    "gemm_grouped",
    "gemm_grouped_plan",
    "gemm_plan",
    "gemm_ar",
    "gemm_rs",
    "moe_combine",
    "moe_dispatch_gemm",
    "last_wait_failure",
    "reduce_scatter",
    "ring_attention",
    "synchronize",
]


class Group(Protocol):
    """What the ops need of an mkernel group: the context that :func:`mkernel.init` returns."""

    @property
    def handle(self) -> int:
        """The group's opaque handle (>= 0), as the C++ ops receive it."""
        ...

    @property
    def world_size(self) -> int:
        """The number of ranks in the group (>= 1)."""
        ...


class MoeDispatchOutput(NamedTuple):
    """What :func:`moe_dispatch_gemm` returns; pass ``handle`` on to :func:`moe_combine`."""

    out: Tensor
    """``[E_local, capacity, F]``, x's dtype: ``x_e @ w1[e].T`` for the tokens that local expert
    ``e`` received, in its first ``counts[e]`` rows."""
    counts: Tensor
    """``[E_local]`` int32: the number of tokens each local expert received."""
    handle: Tensor
    """``[T, k]`` int64: where each (token, choice) landed, for :func:`moe_combine`."""


def _default_group() -> Group:
    """The default context of :func:`mkernel.init`; RuntimeError if init() has not been called."""
    from mkernel.runtime import current_group

    return current_group()


def _group_args(op: str, group: Group | None) -> tuple[int, int]:
    """``(handle, world_size)`` of ``group``, or of the default group when it is None."""
    if group is None:
        group = _default_group()
    handle = getattr(group, "handle", None)
    world_size = getattr(group, "world_size", None)
    if handle is None or world_size is None:
        raise TypeError(
            f"mkernel.{op}: group must be an mkernel context (from mkernel.init(), with .handle "
            f"and .world_size) or None for the default one, got {type(group).__name__}"
        )
    return handle, world_size


@overload
def ag_gemm(
    x: Tensor, w: Tensor, *, group: Group | None = None, return_gathered: Literal[False] = False
) -> Tensor: ...
@overload
def ag_gemm(
    x: Tensor, w: Tensor, *, group: Group | None = None, return_gathered: Literal[True]
) -> tuple[Tensor, Tensor]: ...
def ag_gemm(
    x: Tensor, w: Tensor, *, group: Group | None = None, return_gathered: bool = False
) -> Tensor | tuple[Tensor, Tensor]:
    """All-gather of row shards fused with a GEMM: ``allgather(x) @ w.T``.

    The column-parallel linear (fc1, qkv) under sequence parallelism.

    Args:
        x: ``[m, K]``, this rank's rows (m may differ from any tile size).
        w: ``[N, K]``, this rank's weight shard, x's dtype.
        group: the mkernel group; None for the default one.
        return_gathered: also return the gathered ``x`` (for the weight gradient).

    Returns:
        ``out [W*m, N]`` in x's dtype, rows in rank order; with ``return_gathered``,
        ``(out, gathered)`` where ``gathered`` is ``[W*m, K]``.
    """
    handle, world_size = _group_args("ag_gemm", group)
    try:
        out, gathered = torch.ops.mkernel.ag_gemm.default(x, w, handle, world_size, return_gathered)
    except RuntimeError as e:  # a dead context after a trapped wait surfaces at the next call
        err = _wait_failure_error(e)
        if err is None:
            raise
        raise err from e
    return (out, gathered) if return_gathered else out


# Tile configurations of the Hopper GEMM engine (csrc/kernels/gemm/gemm_api.h, ConfigId).
GEMM_CONFIGS: dict[str, int] = {
    "auto": -1,
    "coop_128x256_c2x1": 0,
    "coop_128x128_c2x1": 1,
    "coop_128x256_c1x2": 2,
    "ping_64x256_c1x1": 3,
    "coop_128x128_streamk": 4,
    "ping_128x128_c1x2": 5,
    "coop_256x128_c2x1": 6,
    "coop_256x128_c1x2": 7,
    "ping_64x128_c1x1": 8,
    "ping_64x128k128_c1x1": 9,
    "coop_128x256_c2x1_streamk": 10,
}


_RASTER = {"auto": 0, "m": 1, "n": 2}  # tile order argument -> op value


def _config_id(config: str | int) -> int:
    return GEMM_CONFIGS[config] if isinstance(config, str) else int(config)


def gemm(a: Tensor, b: Tensor, *, config: str | int = "auto", sm_count: int = 0, swizzle: int = 0,
         raster: Literal["auto", "m", "n"] = "auto", splits: int = 0, pdl: bool = False) -> Tensor:
    """The GEMM engine on its own: ``a @ b.T``, no communication.

    With ``config="auto"`` and the tile order left open, the first call of a shape times the
    shape heuristic's plan and a few alternates on these operands and caches the fastest
    (:func:`gemm_plan` says which); ``MKERNEL_GEMM_AUTOTUNE=0`` keeps the heuristic alone.
    No candidate splits K, so the result does not depend on which one wins.

    Args:
        a: ``[M, K]`` bf16/fp16 (CUDA) or any float dtype (CPU reference), contiguous.
        b: ``[N, K]`` like ``a``; N and K multiples of 8 on CUDA.
        config: a name from :data:`GEMM_CONFIGS` (or its id); ``"auto"`` picks by shape.
        sm_count: SMs the persistent kernel may use (0: all the process may use).
        swizzle: tiles per band of the persistent tile order (1, 2, 4, 8; 0: by shape).
        raster: walk tiles along ``"m"`` or ``"n"`` within a band (``"auto"``: by shape).
        splits: split-K slices per output tile (0: by shape, 1: none); > 1 runs the hooked
            (cooperative) kernel, whose slices are summed in a fixed order (reproducible).
        pdl: launch with programmatic dependent launch: the kernel's set-up overlaps the tail
            of the previous kernel on the stream (it reads nothing before that one is done).
            Off by default: back-to-back GEMMs measured no faster with it.

    Returns:
        ``[M, N]`` in ``a``'s dtype (fp32 accumulation).
    """
    if config == "auto" and raster == "auto" and not (sm_count or swizzle or splits or pdl):
        return torch.ops.mkernel.gemm.default(a, b)  # fewer arguments to convert: a decode call is ~20 us
    return torch.ops.mkernel.gemm.default(a, b, _config_id(config), sm_count, swizzle, _RASTER[raster],
                                          splits, pdl)


def gemm_plan(a: Tensor, b: Tensor, *, sm_count: int = 0) -> str:
    """What :func:`gemm` with ``config="auto"`` runs for ``a [M, K]`` and ``b [N, K]``.

    Returns ``"<config>/s<swizzle>/<m|n>"`` plus ``" (tuned)"`` when the autotuner measured it
    (the first query of a shape on CUDA tunes it, like the first call would), or
    ``"host reference"`` for CPU tensors.
    """
    return torch.ops.mkernel.gemm_plan.default(a, b, sm_count)


def gemm_grouped(a: Tensor, b: Tensor, counts: Tensor | None = None, *,
                 offs: Tensor | None = None, config: str | int = "auto", swizzle: int = 0,
                 raster: str = "auto") -> Tensor:
    """The engine's grouped (MoE) GEMM: one GEMM per expert, row counts read on the device.

    Two layouts; pass exactly one of ``counts`` and ``offs``:

    * capacity-padded (``counts``): ``a`` is ``[E, C, K]``, expert ``e``'s tokens are
      ``a[e, :counts[e]]``; returns ``[E, C, N]`` with
      ``out[e, :counts[e]] = a[e, :counts[e]] @ b[e].T``.
    * packed (``offs``, the layout of ``torch._grouped_mm``): ``a`` is ``[T, K]`` with every
      expert's rows back to back, ``offs[e]`` the cumulative end of expert ``e``'s rows;
      returns ``[T, N]`` with ``out[offs[e-1]:offs[e]] = a[offs[e-1]:offs[e]] @ b[e].T``.
      No tile is spent on padding, however skewed the routing.

    Args:
        a: ``[E, C, K]`` or ``[T, K]`` bf16/fp16 (CUDA) or float (CPU reference).
        b: ``[E, N, K]`` expert weights (the linear layout), N and K multiples of 8.
        counts: ``[E]`` int32 on ``a``'s device, valid rows per expert (padded layout).
        offs: ``[E]`` int32 on ``a``'s device, non-decreasing row ends (packed layout).
        config: packed layout only: ``"auto"`` runs the plan the autotuner measured fastest
            for (E, T, N, K) (:func:`gemm_grouped_plan` names it); a config name of the hooked
            kernel (``coop_128x256_c2x1``, ``coop_128x128_c2x1``, ``ping_128x128_c1x2``) runs that
            one, with ``swizzle`` (1, 2, 4, 8; 0: 8) and ``raster`` (``"m"``/``"n"``) as tile order.

    Returns:
        The output in ``a``'s dtype; rows past ``counts[e]`` / ``offs[-1]`` are unspecified
        on CUDA (not computed) and zero on the CPU.
    """
    if (counts is None) == (offs is None):
        raise ValueError("mkernel.gemm_grouped: pass exactly one of counts (a [E, C, K]) "
                         "and offs (a [T, K])")
    if offs is not None:
        if config == "auto" and swizzle == 0 and raster == "auto":
            return torch.ops.mkernel.gemm_grouped_packed.default(a, b, offs)
        return torch.ops.mkernel.gemm_grouped_packed.default(a, b, offs, _config_id(config), swizzle,
                                                             _RASTER[raster])
    if config != "auto" or swizzle != 0 or raster != "auto":
        raise ValueError("mkernel.gemm_grouped: config, swizzle and raster apply to the packed "
                         "layout (offs) only")
    return torch.ops.mkernel.gemm_grouped.default(a, b, counts)


def gemm_grouped_plan(a: Tensor, b: Tensor, offs: Tensor) -> str:
    """What :func:`gemm_grouped` runs for packed rows ``a [T, K]``, ``b [E, N, K]``, ``offs [E]``.

    Returns ``"<config>/s<swizzle>/<m|n>"`` plus ``" (tuned)"`` when the autotuner measured it.
    The plan is tuned once per (E, T, N, K) on the first call's routing (the query tunes too,
    like that call would), or ``"host reference"`` for CPU tensors.
    """
    return torch.ops.mkernel.gemm_grouped_plan.default(a, b, offs)


def gemm_rs(x: Tensor, w: Tensor, *, group: Group | None = None) -> Tensor:
    """A GEMM fused with a reduce-scatter of its output: ``reduce_scatter(x @ w.T)``.

    The row-parallel linear (fc2, proj) under sequence parallelism; a true W-way reduce-scatter
    across all nodes.

    Args:
        x: ``[M, k]``, this rank's slice of the reduction dimension; ``M`` divisible by W.
        w: ``[N, k]``, this rank's weight shard, x's dtype.
        group: the mkernel group; None for the default one.

    Returns:
        ``[M/W, N]`` in x's dtype: rows ``r*M/W`` to ``(r+1)*M/W`` of the summed product on rank r.
    """
    handle, world_size = _group_args("gemm_rs", group)
    try:
        return torch.ops.mkernel.gemm_rs.default(x, w, handle, world_size)
    except RuntimeError as e:  # a dead context after a trapped wait surfaces at the next call
        err = _wait_failure_error(e)
        if err is None:
            raise
        raise err from e


def gemm_ar(x: Tensor, w: Tensor, *, group: Group | None = None) -> Tensor:
    """A GEMM fused with an all-reduce of its output: ``allreduce(x @ w.T)``.

    The row-parallel linear without sequence parallelism (inference).

    Args:
        x: ``[M, k]``, this rank's slice of the reduction dimension.
        w: ``[N, k]``, this rank's weight shard, x's dtype.
        group: the mkernel group; None for the default one.

    Returns:
        ``[M, N]`` in x's dtype, the same on every rank.
    """
    handle, world_size = _group_args("gemm_ar", group)
    try:
        return torch.ops.mkernel.gemm_ar.default(x, w, handle, world_size)
    except RuntimeError as e:  # a dead context after a trapped wait surfaces at the next call
        err = _wait_failure_error(e)
        if err is None:
            raise
        raise err from e


def moe_dispatch_gemm(
    x: Tensor,
    topk_idx: Tensor,
    w1: Tensor,
    *,
    num_experts: int,
    capacity: int,
    group: Group | None = None,
) -> MoeDispatchOutput:
    """Expert-parallel MoE dispatch fused with each local expert's first GEMM.

    Each token goes to the ranks holding its ``k`` chosen experts (rank ``r`` holds experts
    ``r*E_local`` to ``(r+1)*E_local - 1``, ``E_local = num_experts / W``), and every local
    expert ``e`` multiplies what it received by ``w1[e].T``.

    Args:
        x: ``[T, H]`` tokens of this rank (T may be 0).
        topk_idx: ``[T, k]`` int64 or int32 expert ids in ``[0, num_experts)``, on x's device.
        w1: ``[E_local, F, H]``, the local experts' first weights, x's dtype.
        num_experts: experts over all ranks, divisible by W.
        capacity: token slots per local expert (>= 1).
        group: the mkernel group; None for the default one.

    Returns:
        :class:`MoeDispatchOutput` ``(out [E_local, capacity, F], counts [E_local] int32,
        handle [T, k] int64)``.
    """
    handle, world_size = _group_args("moe_dispatch_gemm", group)
    out, counts, dispatch_handle = torch.ops.mkernel.moe_dispatch_gemm.default(
        x, topk_idx, w1, handle, world_size, num_experts, capacity
    )
    return MoeDispatchOutput(out, counts, dispatch_handle)


def moe_combine(
    y: Tensor,
    handle: Tensor,
    topk_weights: Tensor,
    *,
    num_tokens: int | None = None,
    group: Group | None = None,
) -> Tensor:
    """The reverse of :func:`moe_dispatch_gemm`: bring the experts' outputs back and sum them.

    ``out[t] = sum_j topk_weights[t, j] * y[the slot that handle[t, j] names]``.

    Args:
        y: ``[E_local, capacity, H]``, the local experts' outputs.
        handle: ``[T, k]`` int64, from the matching :func:`moe_dispatch_gemm`.
        topk_weights: ``[T, k]`` fp32 routing weights.
        num_tokens: T; None takes it from ``handle``.
        group: the mkernel group; None for the default one.

    Returns:
        ``[T, H]`` in y's dtype.
    """
    group_handle, world_size = _group_args("moe_combine", group)
    if num_tokens is None:
        num_tokens = handle.shape[0]
    return torch.ops.mkernel.moe_combine.default(
        y, handle, topk_weights, group_handle, world_size, num_tokens
    )


def ring_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    *,
    causal: bool = False,
    softmax_scale: float | None = None,
    group: Group | None = None,
) -> tuple[Tensor, Tensor]:
    """Attention of the local query shard over the whole sequence, its K/V shards on a ring.

    Context parallelism: each rank holds one shard of the sequence of q, k and v.

    Args:
        q: ``[b, s, h, d]``, this rank's queries.
        k: ``[b, s_kv, h_kv, d]``, this rank's keys; ``h`` divisible by ``h_kv`` (GQA).
        v: ``[b, s_kv, h_kv, d]``, this rank's values.
        causal: mask by global sequence position.
        softmax_scale: scale of ``q @ k.T``; None for ``1 / sqrt(d)``.
        group: the mkernel group; None for the default one.

    Returns:
        ``(out [b, s, h, d]`` in q's dtype, ``lse [b, h, s]`` fp32 log-sum-exp of the scaled
        scores).
    """
    handle, world_size = _group_args("ring_attention", group)
    out, lse = torch.ops.mkernel.ring_attention.default(
        q, k, v, handle, world_size, causal, softmax_scale
    )
    return out, lse


# --- the plain collectives on the GPU substrate -----------------------------------------------


def last_wait_failure() -> str | None:
    """What the first timed-out device wait of this process waited for, or None.

    A kernel of a group whose wait times out (a dead or diverging peer) records the op, the
    group, this rank, the peer, the flag and the values seen, then traps: the CUDA context is
    lost, and the next CUDA call raises. This record says why.
    """
    text = torch.ops.mkernel.wait_diagnostic.default()
    return text or None


_launched_group_op = False  # a collective ran at world size > 1 in this process


def _wait_failure_error(e: BaseException) -> BaseException | None:
    """An :class:`mkernel.MkernelError` explaining a CUDA failure after group ops: the failed
    wait's record when this process has one, else (a CUDA error after a group op) that the
    context was lost without a wait of this rank timing out. None when neither applies."""
    record = last_wait_failure()
    cuda = str(e).splitlines()[0] if str(e) else type(e).__name__
    if record is None:
        if not (_launched_group_op and ("CUDA" in str(e) or type(e).__name__ == "AcceleratorError")):
            return None
        record = ("the CUDA context was lost after group ops, and no wait of this rank timed out: "
                  "a kernel of another process on this GPU probably failed first (under MPS a "
                  "fatal fault of one client ends every client of the GPU), see the other ranks' "
                  "errors")
    from mkernel.runtime import MkernelError

    return MkernelError(f"{record} (CUDA: {cuda})")


def synchronize(device: torch.device | int | None = None) -> None:
    """``torch.cuda.synchronize(device)``, raising :class:`mkernel.MkernelError` naming the peer
    and the flag when a kernel of a group failed because a device wait timed out."""
    try:
        torch.cuda.synchronize(device)
    except RuntimeError as e:
        err = _wait_failure_error(e)
        if err is None:
            raise
        raise err from e


def _collective(op: str, x: Tensor, group: Group | None) -> Tensor:
    global _launched_group_op
    handle, world_size = _group_args(op, group)
    if world_size > 1 and x.is_cuda:
        _launched_group_op = True
    try:
        return getattr(torch.ops.mkernel, op).default(x, handle, world_size)
    except RuntimeError as e:  # a dead context after a trapped wait surfaces at the next call
        err = _wait_failure_error(e)
        if err is None:
            raise
        raise err from e


def all_gather(x: Tensor, *, group: Group | None = None) -> Tensor:
    """Concatenate every rank's ``x`` along the first dimension, in rank order.

    Args:
        x: ``[m, ...]``, bf16/fp16/fp32, contiguous; the same shape and dtype on every rank.
        group: the mkernel group; None for the default one.

    Returns:
        ``[W*m, ...]``: rank r's ``x`` in rows ``r*m`` to ``(r+1)*m``.
    """
    return _collective("all_gather", x, group)


def reduce_scatter(x: Tensor, *, group: Group | None = None) -> Tensor:
    """Sum ``x`` over the ranks and keep this rank's block of rows.

    Sums run in fp32, in rank order 0..W-1 for every element: the result is bit-reproducible.

    Args:
        x: ``[M, ...]``, ``M`` divisible by W, bf16/fp16/fp32, contiguous; the same shape and
            dtype on every rank.
        group: the mkernel group; None for the default one.

    Returns:
        ``[M/W, ...]`` in x's dtype: rows ``r*M/W`` to ``(r+1)*M/W`` of the sum on rank r.
    """
    return _collective("reduce_scatter", x, group)


def all_reduce(x: Tensor, *, group: Group | None = None) -> Tensor:
    """Sum ``x`` over the ranks; every rank gets identical bits.

    Each block of the result is summed once, in fp32 and rank order 0..W-1, by the rank that
    owns it, then copied to the others.

    Args:
        x: ``[...]`` (at least one dimension), bf16/fp16/fp32, contiguous; the same shape and
            dtype on every rank.
        group: the mkernel group; None for the default one.

    Returns:
        x's shape and dtype: the sum over the ranks.
    """
    return _collective("all_reduce", x, group)
