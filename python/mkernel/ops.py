"""The mkernel ops as plain, typed Python functions.

Each function is a thin wrapper over its ``torch.ops.mkernel.<op>.default`` (registered by the
``mkernel._C`` extension, which ``import mkernel`` loads first): it resolves ``group`` into the
group handle and world size that the op's schema takes explicitly, and passes the tensors through
untouched. Inputs must be row-major contiguous; nothing is copied behind your back.

Validation, the shapes of the outputs and the fake (meta) kernels that ``torch.compile`` traces
with live in C++ (``csrc/<op>.cpp``): one validator per op, shared by its CPU reference, CUDA and
Meta kernels, so a bad input gets the same error eagerly, on every backend, and while tracing.
Autograd: the MoE ops (python/mkernel/_moe_registry.py); the others not yet.

Dtypes: bf16 or fp16 on CUDA; the CPU reference path also accepts fp32. Weights follow
:func:`torch.nn.functional.linear`: ``y = x @ w.T`` with ``w`` of shape ``[N, K]``. ``W`` below is
the group's world size.

Importing this module needs neither the Go control plane nor the built extension: the ops are
looked up when called, and the default group is imported from :mod:`mkernel.runtime` only when
``group`` is left out.
"""

from __future__ import annotations

from typing import Any, Literal, NamedTuple, Protocol, overload

import torch
from torch import Tensor

# Tile configurations of the Hopper GEMM engine (name -> ConfigId), generated with the C++ enum
# from one table (csrc/kernels/gemm/generate_instantiations.py). Read from the sibling file, not
# through the package: importing this module must not load the natives (see the docstring).
# The same for the environment variables' registry (_env_knobs.py: plain Python, no package import).
if __package__:
    from . import _env_knobs
    from ._gemm_configs import GEMM_CONFIGS as _GENERATED_CONFIGS
else:  # loaded as a lone file
    import importlib.util as _util
    from pathlib import Path as _Path

    _spec = _util.spec_from_file_location("_gemm_configs", _Path(__file__).with_name("_gemm_configs.py"))
    _configs = _util.module_from_spec(_spec)
    _spec.loader.exec_module(_configs)
    _GENERATED_CONFIGS = _configs.GEMM_CONFIGS
    _spec = _util.spec_from_file_location("_env_knobs", _Path(__file__).with_name("_env_knobs.py"))
    _env_knobs = _util.module_from_spec(_spec)
    _spec.loader.exec_module(_env_knobs)
# The engine's tile configurations, name -> ConfigId ("auto": -1, by shape): what gemm(config=)
# and gemm_grouped(config=) accept; generated (csrc/kernels/gemm/generate_instantiations.py).
GEMM_CONFIGS: dict[str, int] = _GENERATED_CONFIGS

__all__ = [
    "Group",
    "MoeDispatchOutput",
    "MoeHandle",
    "GEMM_CONFIGS",
    "ag_gemm",
    "all_gather",
    "all_reduce",
    "gemm",
    "gemm_grouped",
    "gemm_grouped_plan",
    "gemm_plan",
    "gemm_plans_file",
    "gemm_ar",
    "gemm_rs",
    "moe_combine",
    "moe_dispatch_gemm",
    "last_wait_failure",
    "reduce_scatter",
    "ring_attention",
    "share_gemm_plans",
    "synchronize",
    "attention",
    "attention_merge_",
    "zigzag_shard",
    "zigzag_unshard",
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


class MoeHandle(NamedTuple):
    """Where :func:`moe_dispatch_gemm` put every token: what :func:`moe_combine` needs."""

    route: Tensor
    """``[T, k]`` int64 on this (source) rank: ``(rank << 32) | row`` of each (token, choice)
    in the destination's output, -1 where ``capacity`` dropped it."""
    recv_counts: Tensor
    """``[W, E_local]`` int32 on this (destination) rank: rows local expert ``e`` holds from
    each source rank."""
    peer_routes: Tensor | None = None
    """Across nodes, when the dispatch was given ``topk_weights``: every rank's routes and
    weights as the combine reads them (``[W*max_T, 3k]`` int32), so that :func:`moe_combine`
    with those same weights need not all-gather them; else None or 0 rows."""
    routed_weights: Tensor | None = None
    """The ``topk_weights`` the dispatch carried (``peer_routes`` holds their values)."""
    weights_version: int = 0
    """``routed_weights._version`` at the dispatch: an in-place change since voids ``peer_routes``."""


class MoeDispatchOutput(NamedTuple):
    """What :func:`moe_dispatch_gemm` returns; pass ``handle`` on to :func:`moe_combine`.

    The rows of local expert ``e`` are ordered by (source rank, token, choice): with
    ``capacity == 0`` they are packed back to back (``out[offs[e-1]:offs[e]]``, the layout of
    :func:`gemm_grouped` with ``offs`` and of ``torch._grouped_mm``); with ``capacity > 0`` they
    are ``out[e, :counts[e]]``.
    """

    out: Tensor
    """``[R, F]`` (capacity 0) or ``[E_local, capacity, F]``, x's dtype: ``x_e @ w1[e].T``;
    rows past the counts are zero on the CPU and unspecified on CUDA."""
    counts: Tensor
    """``[E_local]`` int32: the rows each local expert holds."""
    offs: Tensor
    """``[E_local]`` int32: ``cumsum(counts)``, the packed layout's row ends."""
    handle: MoeHandle
    """For :func:`moe_combine` (and the backward passes)."""
    recv_x: Tensor
    """The received token rows in ``out``'s layout with H columns when ``return_recv`` (or
    when autograd needs them), else a 0-element tensor."""


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


def _fused_op_call(op: Any, x: Tensor, w: Tensor, *args: Any) -> Any:
    """``op(x, w, *args)`` for a fused op (ag_gemm, gemm_rs, gemm_ar: an OpOverload), below
    autograd when neither operand needs a gradient. Those ops' autograd kernels are Python
    (``torch.library.register_autograd``, autograd.py), which with no gradient to record only
    redispatch below autograd, after a round trip through Python on every call: decode-sized
    calls take tens of us in all, so it would make the op's unfused fallback slower than the
    same collective + GEMM called directly. Traced as the plain op under torch.compile."""
    global _launched_group_op
    if torch.compiler.is_compiling():
        return op(x, w, *args)
    if x.is_cuda and len(args) > 1 and args[1] > 1:  # args: (group handle, world size, ...)
        _launched_group_op = True  # a lost context after this call is explained (_wait_failure_error)
    if (
        torch.is_grad_enabled()
        and (getattr(x, "requires_grad", True) or getattr(w, "requires_grad", True))
    ):
        return op(x, w, *args)
    with torch._C._AutoDispatchBelowAutograd():
        return op(x, w, *args)


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
        out, gathered = _fused_op_call(torch.ops.mkernel.ag_gemm.default, x, w, handle, world_size,
                                        return_gathered)
    except RuntimeError as e:  # a dead context after a trapped wait surfaces at the next call
        err = _wait_failure_error(e)
        if err is None:
            raise
        raise err from e
    return (out, gathered) if return_gathered else out


_RASTER = {"auto": 0, "m": 1, "n": 2}  # tile order argument -> op value


def _config_id(config: str | int) -> int:
    """The ConfigId of a config name (or an id, passed through: the op checks its range)."""
    if not isinstance(config, str):
        return int(config)
    try:
        return GEMM_CONFIGS[config]
    except KeyError:
        raise ValueError(f"mkernel: unknown GEMM config {config!r}; valid configs: "
                         f"{', '.join(GEMM_CONFIGS)}") from None


def gemm(a: Tensor, b: Tensor, *, config: str | int = "auto", sm_count: int = 0, swizzle: int = 0,
         raster: Literal["auto", "m", "n"] = "auto", splits: int = 0, pdl: bool = False) -> Tensor:
    """The GEMM engine on its own: ``a @ b.T``, no communication.

    With ``config="auto"`` and the tile order left open, the first call of a shape times the
    shape heuristic's plan and a few alternates on these operands and caches the fastest
    (:func:`gemm_plan` says which); ``MKERNEL_GEMM_AUTOTUNE=0`` keeps the heuristic alone.
    The timing runs as a training step does, at the board's power cap: about 0.3 s of warm-up
    until the call time settles (at most 1.5 s), then ~0.3 s of candidates, once per shape per
    machine (the plan file persists them).
    No candidate splits K, so the result does not depend on which one wins. Small M runs other
    kernels: the GEMV at M <= 16 (by shape), and at 17 <= M <= 512 the swapped-operand GEMM
    (``torch.ops.mkernel.gemm_swap``) where the first call of the M bucket measured it faster than
    the engine's plan; that choice changes the bits, and is cached and shared like the plans.

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


def gemm_plan(a: Tensor, b: Tensor, *, sm_count: int = 0, group: Group | None = None,
              root: int = 0) -> str:
    """What :func:`gemm` with ``config="auto"`` runs for ``a [M, K]`` and ``b [N, K]``.

    Returns ``"<config>/s<swizzle>/<m|n>"`` plus ``" (tuned)"`` when the autotuner measured it
    (the first query of a shape on CUDA tunes it, like the first call would; at small M also
    ``"gemv/..."``, ``"swap_..."`` or ``"split:<config>/k<splits>"``: the hooked kernel with K
    split, a candidate with ``MKERNEL_GEMM_SMALLM_S11=1``), or
    ``"host reference"`` for CPU tensors. Plans are kept per M bucket (the next power of two)
    and persist across processes (:func:`gemm_plans_file`).

    With ``group`` (collective: every rank calls it with its operands of the same shape), only
    rank ``root`` tunes; its plans reach the other ranks (:func:`share_gemm_plans`), so every
    rank runs the same plan and no rank spends the tuning time.
    """
    if group is None:
        return torch.ops.mkernel.gemm_plan.default(a, b, sm_count)
    if _group_rank("gemm_plan", group) == root:
        torch.ops.mkernel.gemm_plan.default(a, b, sm_count)  # tunes the shape if it is new
    share_gemm_plans(group, root=root)
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
            kernel (``coop_128x256_c2x1``, ``coop_128x128_c2x1``, ``coop_128x256_c1x2``,
            ``coop_256x128_c1x2``, ``ping_128x128_c1x2``) runs that one, with ``swizzle`` (1, 2, 4, 8; 0: 8) and ``raster`` (``"m"``/``"n"``) as tile order.

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


def gemm_grouped_plan(a: Tensor, b: Tensor, offs: Tensor, *, group: Group | None = None,
                      root: int = 0) -> str:
    """What :func:`gemm_grouped` runs for packed rows ``a [T, K]``, ``b [E, N, K]``, ``offs [E]``.

    Returns ``"<config>/s<swizzle>/<m|n>"`` plus ``" (tuned)"`` when the autotuner measured it.
    The plan is tuned once per (E, T bucket, N, K) on the first call's routing (the query tunes
    too, like that call would), or ``"host reference"`` for CPU tensors. ``group``: rank
    ``root`` tunes and shares the plan, as in :func:`gemm_plan`.
    """
    if group is None:
        return torch.ops.mkernel.gemm_grouped_plan.default(a, b, offs)
    if _group_rank("gemm_grouped_plan", group) == root:
        torch.ops.mkernel.gemm_grouped_plan.default(a, b, offs)
    share_gemm_plans(group, root=root)
    return torch.ops.mkernel.gemm_grouped_plan.default(a, b, offs)


def _group_rank(op: str, group: Group) -> int:
    rank = getattr(group, "rank", None)
    if rank is None or not callable(getattr(group, "allgather_bytes", None)):
        raise TypeError(f"mkernel.{op}: group must be an mkernel context (from mkernel.init(), with "
                        f".rank and .allgather_bytes), got {type(group).__name__}")
    return int(rank)


def share_gemm_plans(group: Group | None = None, *, root: int = 0, persist: bool = False) -> int:
    """Give every rank of ``group`` the GEMM plans rank ``root`` has (tuned, or read from its
    plan file), so all ranks run the same plans without tuning them. Collective.

    Call it after a warm-up step on ``root`` (or use ``gemm_plan(..., group=)`` per shape).
    Received plans replace a rank's own for the same key; a plan whose device (model, SMs,
    driver) differs from a rank's is kept but never matches, so that rank still tunes.

    Args:
        group: the mkernel context; None for the default one.
        root: the rank whose plans everyone takes.
        persist: also write the received plans into each rank's plan file.

    Returns:
        The number of plans in root's table (root included).
    """
    if group is None:
        group = _default_group()
    rank = _group_rank("share_gemm_plans", group)
    mine = torch.ops.mkernel.gemm_plans_export.default() if rank == root else ""
    blobs = group.allgather_bytes(mine.encode())  # type: ignore[attr-defined]
    if not 0 <= root < len(blobs):
        raise ValueError(f"mkernel.share_gemm_plans: root {root} is not a rank of the group "
                         f"(world size {len(blobs)})")
    return int(torch.ops.mkernel.gemm_plans_import.default(blobs[root].decode(), persist))


def gemm_plans_file() -> str:
    """The autotuner's plan file ($MKERNEL_CACHE_DIR, else ~/.cache/mkernel, then
    ``gemm_plans.json``); ``""`` when ``MKERNEL_GEMM_PLAN_CACHE=0`` keeps plans in memory."""
    return torch.ops.mkernel.gemm_plans_file.default()


def fused_verdicts_file() -> str:
    """The fused ops' verdict file ($MKERNEL_CACHE_DIR, else ~/.cache/mkernel, then
    ``fused_verdicts.json``): the first call's fused / unfused verdicts of ag_gemm, gemm_rs,
    gemm_ar and the MoE ops, reused by later processes where every rank of the group holds the
    same one; ``""`` when ``MKERNEL_FUSED_VERDICT_CACHE=0`` keeps them in memory. Delete the file
    to measure again."""
    return torch.ops.mkernel.fused_verdicts_file.default()


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
        return _fused_op_call(torch.ops.mkernel.gemm_rs.default, x, w, handle, world_size)
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
        return _fused_op_call(torch.ops.mkernel.gemm_ar.default, x, w, handle, world_size)
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
    capacity: int = 0,
    return_recv: bool = False,
    topk_weights: Tensor | None = None,
    group: Group | None = None,
) -> MoeDispatchOutput:
    """Expert-parallel MoE dispatch fused with each local expert's first GEMM.

    Each token goes to the ranks holding its ``k`` chosen experts, once per rank (rank ``r``
    holds experts ``r*E_local`` to ``(r+1)*E_local - 1``, ``E_local = num_experts / W``), and
    every local expert ``e`` multiplies what it received by ``w1[e].T``. Differentiable in x
    and w1 (the backward is a :func:`moe_combine`).

    Args:
        x: ``[T, H]`` tokens of this rank (T may be 0, and differ between ranks).
        topk_idx: ``[T, k]`` int64 or int32 expert ids in ``[0, num_experts)``, on x's device.
        w1: ``[E_local, F, H]``, the local experts' first weights, x's dtype.
        num_experts: experts over all ranks, divisible by W.
        capacity: 0 (default): capacity-free, every choice kept, rows packed: ``out`` is
            ``[R, F]`` with R the rows this rank received (``T*k`` at W = 1; data dependent at
            W > 1, an unbacked size under torch.compile). ``> 0``: ``out`` is
            ``[E_local, capacity, F]`` (static, for CUDA graphs at W > 1); an expert's rows past
            ``capacity`` in (source rank, token, choice) order are dropped, which
            ``handle.route == -1`` reports on the token's rank.
        return_recv: also return the received rows (for the weight gradient).
        topk_weights: optional ``[T, k]`` fp32 routing weights, the ones the matching
            :func:`moe_combine` will take. Across nodes they travel beside the expert ids (a few
            bytes per token), so that combine skips its own exchange of routes and weights
            before the first partial sum. Every rank of the group must pass them, or none.
        group: the mkernel group; None for the default one.

    Returns:
        :class:`MoeDispatchOutput` ``(out, counts, offs, handle, recv_x)``.
    """
    handle, world_size = _group_args("moe_dispatch_gemm", group)
    need_recv = return_recv or (torch.is_grad_enabled() and w1.requires_grad)
    out, counts, route, recv_counts, recv_x, peer_routes = torch.ops.mkernel.moe_dispatch_gemm.default(
        x, topk_idx, w1, handle, world_size, num_experts, capacity, need_recv, topk_weights
    )
    offs = torch.cumsum(counts, 0, dtype=torch.int32)
    if topk_weights is None:
        moe_handle = MoeHandle(route, recv_counts)
    else:
        moe_handle = MoeHandle(route, recv_counts, peer_routes, topk_weights, topk_weights._version)
    return MoeDispatchOutput(out, counts, offs, moe_handle, recv_x)


def _carried_routes(handle: MoeHandle, topk_weights: Tensor) -> Tensor | None:
    """The dispatch's peer_routes when the combine is given the very weights it carried, unchanged."""
    if handle.peer_routes is None or handle.routed_weights is None:
        return None
    if topk_weights is not handle.routed_weights or topk_weights._version != handle.weights_version:
        return None
    return handle.peer_routes if handle.peer_routes.numel() else None


def moe_combine(
    y: Tensor,
    handle: MoeHandle,
    topk_weights: Tensor,
    *,
    num_tokens: int | None = None,
    group: Group | None = None,
) -> Tensor:
    """The reverse of :func:`moe_dispatch_gemm`: bring the experts' outputs back and sum them.

    ``out[t] = sum_j topk_weights[t, j] * y[the row handle.route[t, j] names]``, summed in fp32
    over j in order and rounded once (across nodes, unless ``MKERNEL_MOE_NODES_COMBINE=allgather``:
    in fp32 over j at each owner rank, then over the owners in rank order, rounded once; where
    the combine runs pipelined (one rank per node, GPU-memory inter-node areas: the default
    there) each owner's partial travels in y's dtype, as DeepEP's combine, and is rounded once
    more before that sum; ``=reduce`` keeps fp32 partials, ``=reduce16`` narrows them everywhere);
    dropped choices add nothing. Differentiable
    in y and topk_weights (the backward of y is a dispatch). When ``topk_weights`` is the very
    tensor the dispatch was given (and unchanged since), the routes it carried are used.

    Args:
        y: the local experts' outputs in the dispatch's layout: ``[R, H]`` (capacity 0) or
            ``[E_local, capacity, H]``.
        handle: from the matching :func:`moe_dispatch_gemm`.
        topk_weights: ``[T, k]`` fp32 routing weights.
        num_tokens: T; None takes it from ``handle.route``.
        group: the mkernel group; None for the default one.

    Returns:
        ``[T, H]`` in y's dtype.
    """
    group_handle, world_size = _group_args("moe_combine", group)
    if num_tokens is None:
        num_tokens = handle.route.shape[0]
    return torch.ops.mkernel.moe_combine.default(
        y, handle.route, handle.recv_counts, topk_weights, group_handle, world_size, num_tokens,
        _carried_routes(handle, topk_weights),
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
        causal: mask by global sequence position; the shards must then be in the zigzag
            layout (:func:`zigzag_shard`: rank r holds chunks r and 2W-1-r of 2W).
        softmax_scale: scale of ``q @ k.T``; None for ``1 / sqrt(d)``.
        group: the mkernel group; None for the default one.

    Returns:
        ``(out [b, s, h, d]`` in q's dtype, ``lse [b, h, s]`` fp32 log-sum-exp of the scaled
        scores).

    On CUDA with W > 1 ranks of one node the K/V shards travel over the group's symmetric
    memory and the attention engine consumes them chunk by chunk as they arrive: in one engine
    launch per call when the shard length (causal: half of it) is a multiple of 128, else one
    launch per ring step with fp32 merges (csrc/kernels/attention/README.md). Groups spanning
    several nodes run the same one-launch mode, the other nodes' shards pushed through the
    inter-node FIFO by a send kernel (MKERNEL_RING_FUSED_NODES=0: gathered through the
    substrate's inter-node path first, then per-step engine calls; ragged shards always so).
    Across nodes, and inside a node for shards of at most 8192 keys, the engine computes every
    query tile's keys of the rank's own shard before any peer's, so the transfer hides behind
    them; that holds a temporary fp32 workspace of about ``b * (s + 191) * h * (d + 8)`` floats
    (~2.1x the output; off above 2 GiB; MKERNEL_RING_OWN_FIRST=0 off, =1 on for every shard
    length). Head dims other than 64 / 128 (multiples of 8 up to 256 on CUDA): the K/V shards
    all-gathered over the substrate, then torch's FlashAttention-2 kernel per ring step with the
    same fp32 merges (not fused; one warning). Differentiable through out and lse
    (python/mkernel/_ring_backward.py; lse's gradient, rarely needed, costs one ring forward and
    one ring backward more, on every rank: the ranks' losses must all read lse or all not).
    """
    global _launched_group_op
    handle, world_size = _group_args("ring_attention", group)
    if world_size > 1 and q.is_cuda:
        _launched_group_op = True
    try:
        out, lse = torch.ops.mkernel.ring_attention.default(
            q, k, v, handle, world_size, causal, softmax_scale
        )
    except RuntimeError as e:  # a dead context after a trapped wait surfaces at the next call
        err = None if isinstance(e, NotImplementedError) else _wait_failure_error(e)
        if err is None:
            raise
        raise err from e
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
        # A dead context reports a CUDA error; mkernel's own refusals ("... during CUDA-graph
        # capture: call ctx.reserve ...") mention CUDA too and must pass through unchanged.
        msg = str(e)
        dead = "CUDA error" in msg or "launch fail" in msg or type(e).__name__ == "AcceleratorError"
        if not (_launched_group_op and dead):
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
def attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    causal: bool = False,
    softmax_scale: float | None = None,
    *,
    block_m: int = 0,
    block_n: int = 0,
) -> tuple[Tensor, Tensor]:
    """The attention engine at world size 1 (FlashAttention-3-style Hopper kernel on CUDA).

    ``out[b, i, h] = softmax(scale * q[b, i, h] @ k[b, :, h // g].T) @ v[b, :, h // g]`` with
    ``g = h // h_kv`` (grouped-query / multi-query attention).

    Args:
        q: ``[b, s, h, d]`` bf16/fp16 on CUDA (d 64 or 128 on the engine; the other multiples of
            8 up to 256 through torch's FlashAttention-2 kernel, same conventions, warned once)
            or fp32/bf16/fp16 on the CPU (the reference, any d).
        k: ``[b, s_kv, h_kv, d]``; ``h`` a multiple of ``h_kv``.
        v: ``[b, s_kv, h_kv, d]``.
        causal: query ``i`` sees keys ``j <= i + s_kv - s`` (bottom-right aligned, as
            FlashAttention does when ``s != s_kv``); a query that sees no key gets ``out = 0``
            and ``lse = -inf``.
        softmax_scale: scale of ``q @ k.T``; None for ``1 / sqrt(d)``.
        block_m, block_n: the CUDA kernel's tile, query rows x keys per KV block (a tuning
            choice that changes no result beyond rounding): 0 by shape (192x128 for bf16 d=64
            non-causal with s >= 2048, else 128x128); built: 128x128, 192x128 (bf16, d=64,
            non-causal).

    Returns:
        ``(out [b, s, h, d]`` in q's dtype, ``lse [b, h, s]`` fp32 natural-log log-sum-exp of
        the scaled scores). Differentiable in q, k and v: on CUDA through the engine's own
        backward kernels where they measured faster (non-causal, d = 128, long sequences), else
        torch's cuDNN (or, where cuDNN does not apply, FA2) backward kernel fed with this
        ``out`` and ``lse`` (:func:`_attention_backward_choice`). A loss may read ``lse`` too
        (merging partial attentions in torch): its gradient costs one forward and one backward
        more (:func:`_attention_lse_backward`).
    """
    if (torch.is_grad_enabled() and (q.requires_grad or k.requires_grad or v.requires_grad)
            and not torch.compiler.is_compiling()):
        return _AttentionFunction.apply(q, k, v, causal, softmax_scale, block_m, block_n)
    return torch.ops.mkernel.attention.default(q, k, v, causal, softmax_scale, block_m, block_n)


class _AttentionFunction(torch.autograd.Function):
    """mkernel.attention's eager autograd: the op (below autograd) and the same backward as its
    registration (mkernel/autograd.py) through a plain autograd.Function, the op called below
    the Autograd key: the registration's generated wrapper (pytree flattening, a Function of its
    own, a Python redispatch) cost ~60 µs of host time per forward on the GPU machine (session 43,
    benchmarks/attention_bwd_host.py, S = 4096: forward enqueue 150-158 µs this way vs 204-221 µs,
    SDPA's own 235-255 µs). Traced calls (torch.compile) and direct ``torch.ops.mkernel.attention``
    calls take the registration; the backward is the same function either way."""

    @staticmethod
    def forward(ctx, q: Tensor, k: Tensor, v: Tensor, causal: bool,  # type: ignore[no-untyped-def]
                softmax_scale: float | None, block_m: int, block_n: int) -> tuple[Tensor, Tensor]:
        # Below the Autograd key: the registration's Python kernel is not entered again.
        with torch._C._AutoDispatchBelowAutograd():
            out, lse = torch.ops.mkernel.attention.default(q, k, v, causal, softmax_scale, block_m, block_n)
        _attention_setup_context(ctx, (q, k, v, causal, softmax_scale, block_m, block_n), (out, lse))
        return out, lse

    @staticmethod
    def backward(ctx, dout: Tensor | None, dlse: Tensor | None):  # type: ignore[no-untyped-def]
        return _attention_autograd_backward(ctx, dout, dlse)


def _attention_backward_math(dout: Tensor, q: Tensor, k: Tensor, v: Tensor, out: Tensor,
                             lse: Tensor, causal: bool, scale: float,
                             dlse: Tensor | None = None) -> tuple[Tensor, Tensor, Tensor]:
    """Attention backward in fp32 from the forward's (out, lse): P = exp(scale·QKᵀ − lse),
    dV = Pᵀ·dO, dS = P ∘ (dO·Vᵀ − rowsum(dO ∘ O) + dlse), dQ = scale·dS·K, dK = scale·dSᵀ·Q
    (``∂lse_i / ∂S_ij = P_ij``; dlse ``[b, h, s]`` or None). Shapes as :func:`attention`; GQA
    gradients are summed over each kv head's query heads."""
    b, s, h, d = q.shape
    s_kv, h_kv = k.shape[1], k.shape[2]
    g = h // h_kv
    qf, kf, vf = (x.float().transpose(1, 2) for x in (q, k, v))  # [b, heads, seq, d]
    of, dof = out.float().transpose(1, 2), dout.float().transpose(1, 2)
    if g > 1:
        kf, vf = kf.repeat_interleave(g, dim=1), vf.repeat_interleave(g, dim=1)
    scores = torch.matmul(qf, kf.transpose(-2, -1)) * scale
    if causal:
        rows = torch.arange(s, device=q.device).unsqueeze(1)
        cols = torch.arange(s_kv, device=q.device).unsqueeze(0)
        scores = scores.masked_fill(cols > rows + (s_kv - s), float("-inf"))
    lse_f = lse.float().unsqueeze(-1)
    p = torch.exp(scores - lse_f).masked_fill(torch.isneginf(lse_f), 0.0)
    dv = torch.matmul(p.transpose(-2, -1), dof)
    dp = torch.matmul(dof, vf.transpose(-2, -1))
    delta = (dof * of).sum(-1, keepdim=True)
    if dlse is not None:  # rows that see no key have P = 0: whatever dlse holds there adds nothing
        delta = delta - torch.nan_to_num(dlse.float().unsqueeze(-1), posinf=0.0, neginf=0.0)
    ds = p * (dp - delta)
    dq = torch.matmul(ds, kf) * scale
    dk = torch.matmul(ds.transpose(-2, -1), qf) * scale
    if g > 1:
        dk = dk.unflatten(1, (h_kv, g)).sum(2)
        dv = dv.unflatten(1, (h_kv, g)).sum(2)
    return (dq.transpose(1, 2).to(q.dtype), dk.transpose(1, 2).to(k.dtype),
            dv.transpose(1, 2).to(v.dtype))


# One int64 scalar per device, passed as the philox seed / offset of torch's SDPA backward kernels,
# which read them only with dropout (never here): a fresh torch.zeros per call cost a fill kernel
# and ~20 us of host time (session 31: the backward's host enqueue 837 vs SDPA's own 551 us).
_PHILOX_PLACEHOLDER: dict[torch.device, Tensor] = {}


def _philox_placeholder(q: Tensor) -> Tensor:
    """An int64 scalar on q's device for the unread philox arguments: the cached one for a plain
    eager tensor; a fresh one while tracing (fake / functional tensors) or capturing a CUDA
    graph (memory allocated in capture belongs to the graph's pool)."""
    if type(q) is not torch.Tensor or (q.is_cuda and torch.cuda.is_current_stream_capturing()):
        return torch.zeros((), dtype=torch.int64, device=q.device)
    seed = _PHILOX_PLACEHOLDER.get(q.device)
    if seed is None:
        seed = _PHILOX_PLACEHOLDER[q.device] = torch.zeros((), dtype=torch.int64, device=q.device)
    return seed


def _attention_backward_flash(dout: Tensor, q: Tensor, k: Tensor, v: Tensor, out: Tensor,
                              lse: Tensor, causal: bool, scale: float) -> tuple[Tensor, Tensor, Tensor]:
    """Attention backward through torch's FlashAttention-2 backward kernel, fed with our
    forward's out and lse (natural log, [b, h, s] fp32, which is what FA2 saves). FA2 is
    bottom-right causal like the engine. GQA: k/v expanded to h heads, gradients summed back."""
    b, s, h, d = q.shape
    s_kv, h_kv = k.shape[1], k.shape[2]
    g = h // h_kv
    ke, ve = (k.repeat_interleave(g, dim=2), v.repeat_interleave(g, dim=2)) if g > 1 else (k, v)
    # cum_seq_q/k None (an undefined tensor): the dense, not varlen, kernel; philox seed and
    # offset are read only with dropout.
    seed = _philox_placeholder(q)
    dq, dk, dv = torch.ops.aten._scaled_dot_product_flash_attention_backward.default(
        dout.transpose(1, 2), q.transpose(1, 2), ke.transpose(1, 2), ve.transpose(1, 2),
        out.transpose(1, 2), lse.contiguous(), None, None, s, s_kv, 0.0, causal, seed, seed,
        scale=scale)
    dq, dk, dv = dq.transpose(1, 2), dk.transpose(1, 2), dv.transpose(1, 2)
    if g > 1:
        dk = dk.unflatten(2, (h_kv, g)).sum(3)
        dv = dv.unflatten(2, (h_kv, g)).sum(3)
    return dq, dk, dv


def _attention_backward(dout: Tensor, q: Tensor, k: Tensor, v: Tensor, out: Tensor, lse: Tensor,
                        causal: bool, scale: float) -> tuple[Tensor, Tensor, Tensor]:
    """Backward of :func:`attention`: torch's FA2 backward kernel on CUDA (first step; a fused
    engine backward is future work), the fp32 math backward on the CPU."""
    if q.is_cuda and q.dtype in (torch.bfloat16, torch.float16) and q.shape[-1] <= 256:
        return _attention_backward_flash(dout.contiguous(), q, k, v, out, lse, causal, scale)
    return _attention_backward_math(dout, q, k, v, out, lse, causal, scale)


def _lse_row_weights(dlse: Tensor, lse: Tensor) -> Tensor:
    """dlse ``[b, h, s]`` as fp32 row weights ``[b, s, h, 1]`` over out's layout; rows that see no
    key (lse = -inf) have P = 0 and get nothing, whatever dlse holds there."""
    w = torch.nan_to_num(dlse.float(), posinf=0.0, neginf=0.0).masked_fill(torch.isneginf(lse), 0.0)
    return w.transpose(1, 2).unsqueeze(-1)


def _attention_lse_backward(dlse: Tensor, q: Tensor, k: Tensor, v: Tensor, out: Tensor, lse: Tensor,
                            causal: bool, scale: float) -> tuple[Tensor, Tensor]:
    """The gradient that reaches q and k through ``lse`` (v gets none), through the kernels:
    ``∂lse_i / ∂S_ij = P_ij`` with ``S = scale·QKᵀ``, so ``dq_i = scale·dlse_i·Σ_j P_ij k_j`` —
    the forward with ``v := k`` — and ``dk_j = scale·Σ_i P_ij dlse_i q_i`` — the dV of a backward fed
    ``dO := dlse·q`` (``dV = Pᵀ·dO`` reads neither V nor the row term ``rowsum(dO ∘ O)``). GQA sums
    over each kv head's query heads as the kernels do. Returns fp32 ``(dq [b, s, h, d], dk [b,
    s_kv, h_kv, d])``. One forward and one backward more: the price of a loss that reads lse."""
    w = _lse_row_weights(dlse, lse)
    pk, _ = torch.ops.mkernel.attention.default(q, k, k, causal, scale, 0, 0)
    dq = pk.float() * w * scale
    _, _, dk = _attention_backward_auto((q.float() * w).to(q.dtype), q, k, v, out, lse, causal, scale)
    return dq, dk.float() * scale


def _attention_backward_cudnn(dout: Tensor, q: Tensor, k: Tensor, v: Tensor, out: Tensor,
                              lse: Tensor, causal: bool, scale: float) -> tuple[Tensor, Tensor, Tensor]:
    """Attention backward through torch's cuDNN SDPA backward kernel, fed with our forward's
    out and lse (cuDNN's softmax stats are the same natural-log LSE, ``[b, h, s, 1]`` fp32;
    torch's context-parallel merge treats them as FA2's). cuDNN's causal mask is top-left
    aligned, the engine's bottom-right: the same only when ``s == s_kv``
    (:func:`_attention_backward_choice` sends the others to FA2). GQA: k/v expanded to h heads,
    gradients summed back. Shapes as :func:`attention`; dout ``[b, s, h, d]`` contiguous."""
    b, s, h, d = q.shape
    s_kv, h_kv = k.shape[1], k.shape[2]
    g = h // h_kv
    ke, ve = (k.repeat_interleave(g, dim=2), v.repeat_interleave(g, dim=2)) if g > 1 else (k, v)
    # No dropout: the philox seed/offset are not read; no bias; cum_seq None = dense (not
    # nested) problem. dout has out's strides, as cuDNN wants.
    seed = _philox_placeholder(q)
    dq, dk, dv = torch.ops.aten._scaled_dot_product_cudnn_attention_backward.default(
        dout.transpose(1, 2), q.transpose(1, 2), ke.transpose(1, 2), ve.transpose(1, 2),
        out.transpose(1, 2), lse.contiguous().unsqueeze(-1), seed, seed, None, None, None, s,
        s_kv, 0.0, causal, scale=scale)
    dq, dk, dv = dq.transpose(1, 2), dk.transpose(1, 2), dv.transpose(1, 2)
    if g > 1:
        dk = dk.unflatten(2, (h_kv, g)).sum(3)
        dv = dv.unflatten(2, (h_kv, g)).sum(3)
    return dq, dk, dv


# mkernel.attention's backward on CUDA: "auto" (the engine's own backward kernels where they
# measured faster than cuDNN's, :func:`_native_backward_wins`; else cuDNN's where it applies,
# else FA2's), "torch" (cuDNN's / FA2's always: auto before session 38, kept as a pin and a
# baseline), "flash" (FA2 always: the earliest first step, a benchmark baseline) or "native"
# (the engine's own backward kernels, csrc/kernels/attention/attention_bwd*, wherever they run:
# bf16/fp16, d 64/128). The environment variable MKERNEL_ATTN_BWD (auto | torch | flash |
# native), read at each backward call, overrides it when set.
ATTENTION_BACKWARD: str = "auto"
_BACKWARD_MODES = ("auto", "torch", "flash", "native")

# auto's native rows: non-causal, d = 128, at least this many queries and keys. Measured on an
# H100 (benchmarks/results/attention_bwd_*, the backward alone, b * S = 16384 tokens, 32 query
# heads): the native kernel (wgmma_ws_dqwarp) against cuDNN's on the engine's lse, wall time,
# MHA S = 4096 / 8192 / 16384 1.05x / 1.03x / 1.03x (GPU time against SDPA's own cuDNN 1.00x /
# 1.01x / 1.09x), GQA 32/8 S = 8192 1.07x. Causal it is at parity since session 39 (0.975-1.005x
# GPU time, S = 4k-16k, GQA), not ahead, and at d = 64 it loses (0.87-0.90x): cuDNN's stays there.
NATIVE_AUTO_MIN_SEQ: int = 4096


def _attention_backward_mode() -> str:
    """The backward selection in force: ``MKERNEL_ATTN_BWD`` if set, else ATTENTION_BACKWARD."""
    mode = _env_knobs.get("MKERNEL_ATTN_BWD", "") or ATTENTION_BACKWARD
    if mode not in _BACKWARD_MODES:
        raise ValueError(f"mkernel.attention backward: MKERNEL_ATTN_BWD / ATTENTION_BACKWARD must be "
                         f"one of {', '.join(_BACKWARD_MODES)}, got {mode!r}")
    return mode


def _native_backward_wins(q: Tensor, k: Tensor, causal: bool) -> bool:
    """Whether auto takes the native backward for this problem (NATIVE_AUTO_MIN_SEQ says where it
    measured faster than cuDNN's): non-causal, d = 128, long enough queries and keys — and not
    under ``torch.use_deterministic_algorithms``: its dq is summed by reduce-adds in arrival order
    (dk and dv repeat bit for bit), so there auto keeps torch's kernels, whose own checks pick a
    deterministic one."""
    return (not causal and q.shape[-1] == 128
            and min(q.shape[1], k.shape[1]) >= NATIVE_AUTO_MIN_SEQ
            and not torch.are_deterministic_algorithms_enabled())


def _attention_backward_native(dout: Tensor, q: Tensor, k: Tensor, v: Tensor, out: Tensor,
                               lse: Tensor, causal: bool, scale: float) -> tuple[Tensor, Tensor, Tensor]:
    """The engine's native backward (``mkernel::attention_backward``): preprocess (D = rowsum(dO ∘
    O)), one main kernel parallel over K/V blocks (dK/dV per CTA, dQ by fp32 atomics), dQ
    conversion. Shapes as :func:`attention`; returns ``(dq [b, s, h, d], dk, dv [b, s_kv, h_kv,
    d])`` in q's dtype, GQA gradients already summed over each kv head's query heads."""
    return torch.ops.mkernel.attention_backward.default(dout, q, k, v, out, lse, causal, scale)


def _attention_backward_choice(q: Tensor, k: Tensor, v: Tensor, causal: bool) -> str:
    """Which kernel :func:`_attention_autograd_backward` runs for these inputs: "native" (the
    engine's own backward: opted in, :func:`_attention_backward_mode`, or where auto's
    :func:`_native_backward_wins`), "cudnn",
    "flash" (torch's FA2 backward) or "math" (the fp32 reference, CPU)."""
    # Asked on every backward call, whose host time counts wherever the GPU waits on the host
    # (session 48: 48 µs of the body's 317 on an H100's host). The answer depends only on this
    # key, so it is cached whole: one tuple of the tensors' own size / stride tuples and the
    # settings read raw (the mode is validated on a miss; a bad one raises and is not cached).
    key = (q.shape, q.stride(), k.shape, k.stride(), v.shape, v.stride(), q.dtype, q.device,
           causal, torch.backends.cuda.cudnn_sdp_enabled(),
           torch.are_deterministic_algorithms_enabled(), _env_knobs.get("MKERNEL_ATTN_BWD", ""),
           ATTENTION_BACKWARD, NATIVE_AUTO_MIN_SEQ)
    try:
        choice = _BACKWARD_CHOICES.get(key)
    except TypeError:  # symbolic sizes (torch.compile) are not hashable: no cache
        return _attention_backward_choice_uncached(q, k, v, causal)
    if choice is None:
        if len(_BACKWARD_CHOICES) >= 1024:
            _BACKWARD_CHOICES.clear()
        choice = _BACKWARD_CHOICES[key] = _attention_backward_choice_uncached(q, k, v, causal)
    return choice


# _attention_backward_choice's answers, by its key (shapes, strides, dtype, device, causal, the
# torch flags and the mkernel settings that decide it).
_BACKWARD_CHOICES: dict[tuple, str] = {}


def _attention_backward_choice_uncached(q: Tensor, k: Tensor, v: Tensor, causal: bool) -> str:
    """:func:`_attention_backward_choice` worked out: the settings, then cuDNN's applicability
    (itself cached per problem, :data:`_CUDNN_BACKWARD_OK`)."""
    if not (q.is_cuda and q.dtype in (torch.bfloat16, torch.float16) and q.shape[-1] <= 256):
        return "math"
    mode = _attention_backward_mode()
    if mode == "native" and q.shape[-1] in (64, 128):
        return "native"
    if mode == "auto" and _native_backward_wins(q, k, causal):
        return "native"
    if mode == "flash" or (causal and q.shape[1] != k.shape[1]):
        return "flash"
    # The check builds SDPAParams and stand-in tensors: tens of microseconds of host time, so it
    # is asked once per key (the answer depends only on these and cuDNN SDPA being enabled).
    dims = (*q.shape, *q.stride(), *k.shape, *k.stride(), *v.stride())
    if not all(type(x) is int for x in dims):  # symbolic sizes (torch.compile): no cache
        return "cudnn" if _cudnn_backward_applies(q, k, v, causal) else "flash"
    key = (q.device, q.dtype, dims, causal, torch.backends.cuda.cudnn_sdp_enabled(),
           torch.are_deterministic_algorithms_enabled())
    hit = _CUDNN_BACKWARD_OK.get(key)
    if hit is None:
        if len(_CUDNN_BACKWARD_OK) >= 1024:
            _CUDNN_BACKWARD_OK.clear()
        hit = _CUDNN_BACKWARD_OK[key] = _cudnn_backward_applies(q, k, v, causal)
    return "cudnn" if hit else "flash"


# _attention_backward_choice_uncached's cache of _cudnn_backward_applies, by shapes, strides,
# dtype, device, cuDNN SDPA enabled and deterministic algorithms (torch's check refuses cuDNN
# under those).
_CUDNN_BACKWARD_OK: dict[tuple, bool] = {}


def _cudnn_backward_applies(q: Tensor, k: Tensor, v: Tensor, causal: bool) -> bool:
    """Whether torch's cuDNN SDPA backward takes this problem (q ``[b, s, h, d]``, k/v ``[b,
    s_kv, h_kv, d]``; GQA as k/v expanded to h heads, which is how it runs)."""
    # GQA runs on k/v expanded to h heads: check that problem (uninitialised stand-ins of the
    # expanded shape; the check reads sizes, dtypes, devices and strides only).
    ke, ve = (k.new_empty(*k.shape[:2], q.shape[2], k.shape[3]),) * 2 if k.shape[2] != q.shape[2] \
        else (k, v)
    try:
        params = torch.backends.cuda.SDPAParams(q.transpose(1, 2), ke.transpose(1, 2),
                                                ve.transpose(1, 2), None, 0.0, causal, False)
        return bool(torch.backends.cuda.can_use_cudnn_attention(params, False))
    except (AttributeError, RuntimeError, TypeError):  # an older torch without the check
        return False


def _attention_setup_context(ctx, inputs, output) -> None:  # type: ignore[no-untyped-def]
    q, k, v, causal, softmax_scale, _block_m, _block_n = inputs
    out, lse = output
    ctx.causal = causal
    ctx.scale = softmax_scale if softmax_scale is not None else q.shape[-1] ** -0.5
    # lse's gradient is not propagated: no zeros tensor materialized for it (nor for an unused
    # out; the backward handles dout None).
    ctx.set_materialize_grads(False)
    ctx.save_for_backward(q, k, v, out, lse)


def _attention_autograd_backward(ctx, dout: Tensor | None, dlse: Tensor | None):  # type: ignore[no-untyped-def]
    q, k, v, out, lse = ctx.saved_tensors
    dq, dk, dv = _attention_backward_full(dout, dlse, q, k, v, out, lse, ctx.causal, ctx.scale)
    return dq, dk, dv, None, None, None, None


def _attention_backward_full(dout: Tensor | None, dlse: Tensor | None, q: Tensor, k: Tensor, v: Tensor,
                             out: Tensor, lse: Tensor, causal: bool,
                             scale: float) -> tuple[Tensor, Tensor, Tensor]:
    """The backward of one attention call for the gradients of both outputs (either None when the
    loss does not read it): out's through :func:`_attention_backward_auto`, lse's through
    :func:`_attention_lse_backward` (in the fp32 math directly where that runs)."""
    if dout is None and dlse is None or q.shape[0] == 0:
        return torch.zeros_like(q), torch.zeros_like(k), torch.zeros_like(v)
    if dlse is not None and _attention_backward_choice(q, k, v, causal) == "math":
        dout = torch.zeros_like(out) if dout is None else dout
        return _attention_backward_math(dout, q, k, v, out, lse, causal, scale, dlse)
    if dout is None:
        dq, dk, dv = torch.zeros_like(q), torch.zeros_like(k), torch.zeros_like(v)
    else:
        dq, dk, dv = _attention_backward_auto(dout, q, k, v, out, lse, causal, scale)
    if dlse is not None:
        dq_l, dk_l = _attention_lse_backward(dlse, q, k, v, out, lse, causal, scale)
        dq, dk = (dq.float() + dq_l).to(q.dtype), (dk.float() + dk_l).to(k.dtype)
    return dq, dk, dv


def _attention_backward_auto(dout: Tensor, q: Tensor, k: Tensor, v: Tensor, out: Tensor,
                             lse: Tensor, causal: bool, scale: float) -> tuple[Tensor, Tensor, Tensor]:
    """The backward of one attention call through the kernel :func:`_attention_backward_choice`
    picks (cuDNN's where it applies, FA2's, the native one when opted in, the fp32 math on the
    CPU). Shapes as :func:`attention`; gradients in the inputs' dtypes and layouts. Ring
    attention's per-block backward (``_ring_backward.py``) calls it per key block. out's gradient
    only: :func:`_attention_backward_full` adds lse's."""
    if q.shape[0] == 0:  # an empty batch (the forward's results are empty too): no kernel to run
        return torch.zeros_like(q), torch.zeros_like(k), torch.zeros_like(v)
    choice = _attention_backward_choice(q, k, v, causal)
    if choice == "cudnn":
        return _attention_backward_cudnn(dout.contiguous(), q, k, v, out, lse, causal, scale)
    if choice == "native":
        return _attention_backward_native(dout.contiguous(), q, k, v, out, lse, causal, scale)
    return _attention_backward(dout, q, k, v, out, lse, causal, scale)


# Registered by mkernel.autograd (after the extension has defined the op): importing this
# module must need neither the Go core nor the extension.


def attention_merge_(out: Tensor, lse: Tensor, out_part: Tensor, lse_part: Tensor) -> None:
    """Ring attention's merge step, in place, in fp32: folds the attention of the same queries
    over another KV block into a running result.

    ``lse <- log(exp(lse) + exp(lse_part))``;
    ``out <- out * exp(lse_old - lse) + out_part * exp(lse_part - lse)``.

    Args:
        out: ``[b, s, h, d]`` float32, the running output (updated).
        lse: ``[b, h, s]`` float32, its log-sum-exp (updated; ``-inf`` marks rows with no key yet).
        out_part: ``[b, s, h, d]``, the partial output (bf16/fp16 on CUDA, any float on the CPU).
        lse_part: ``[b, h, s]`` float32, the partial's log-sum-exp.
    """
    torch.ops.mkernel.attention_merge_.default(out, lse, out_part, lse_part)


def zigzag_shard(x: Tensor, rank: int, world_size: int, dim: int = 1) -> Tensor:
    """This rank's shard of a full sequence in the zigzag layout of causal ring attention.

    The sequence (length ``S`` along ``dim``, ``S`` divisible by ``2 * world_size``) is cut into
    ``2 * world_size`` chunks; rank ``r`` holds chunks ``r`` and ``2 * world_size - 1 - r``,
    concatenated, so every rank gets the same amount of causal work.

    Returns a contiguous tensor with ``S / world_size`` along ``dim``.
    """
    chunks = x.chunk(2 * world_size, dim=dim)
    if len(chunks) != 2 * world_size or x.shape[dim] % (2 * world_size):
        raise ValueError(f"mkernel.zigzag_shard: the sequence length {x.shape[dim]} must be a "
                         f"multiple of 2 * world_size = {2 * world_size}")
    return torch.cat([chunks[rank], chunks[2 * world_size - 1 - rank]], dim=dim).contiguous()


def zigzag_unshard(shards: list[Tensor], dim: int = 1) -> Tensor:
    """Inverse of :func:`zigzag_shard`: the full sequence from every rank's shard (rank order)."""
    world = len(shards)
    halves = [s.chunk(2, dim=dim) for s in shards]
    order = [halves[r][0] for r in range(world)] + [halves[r][1] for r in reversed(range(world))]
    return torch.cat(order, dim=dim)
