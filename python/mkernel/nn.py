"""Drop-in layers on the fused ops, with Megatron-core's layouts: the tensor-parallel linear layers
below, :class:`MoEMLP` (expert parallel) and :class:`ContextParallelAttention` (context parallel).

- :class:`ColumnParallelLinear`: weight ``[out/tp, in]``. With ``sequence_parallel`` the input is
  the sequence shard ``[s/tp, b, in]`` and the forward is one :func:`mkernel.ag_gemm` (its
  backward: dgrad through :func:`mkernel.gemm_rs`, wgrad from the gathered input); without it the
  input ``[s, b, in]`` is replicated, the forward a local GEMM and dgrad one
  :func:`mkernel.gemm_ar`. Output ``[s, b, out/tp]`` (``gather_output``: ``[s, b, out]``).
- :class:`RowParallelLinear`: weight ``[out, in/tp]``, input ``[s, b, in/tp]``
  (``input_is_parallel``; else ``[s, b, in]``, split here). With ``sequence_parallel`` the
  forward is one :func:`mkernel.gemm_rs` (output the sequence shard ``[s/tp, b, out]``), without
  it one :func:`mkernel.gemm_ar` (output ``[s, b, out]`` on every rank).

As in Megatron-core, ``forward`` returns ``(output, output_bias)``: ``output_bias`` is the bias
when ``skip_bias_add`` (not added), else None. Under sequence parallelism the row layer's bias
is added to every rank's sequence shard, so its gradient here covers this rank's tokens only:
it carries ``sequence_parallel = True`` (Megatron's marker for the all-reduce of such grads
across the tensor-parallel group before the optimizer step).
"""

from __future__ import annotations

import math
from typing import Any, Callable

import torch
from torch import Tensor

from . import ops
from ._local_gemm import linear, wgrad

_mk = torch.ops.mkernel


def _group_of(group: Any) -> Any:
    return group if group is not None else ops._default_group()


def _all_gather_rows(t: Tensor, group: Any) -> Tensor:
    """``[rows, c]`` on every rank -> ``[W*rows, c]`` in rank order (no autograd)."""
    handle, world = ops._group_args("nn", group)
    if t.is_cuda and hasattr(_mk, "all_gather"):  # the substrate's collective (CUDA only)
        return _mk.all_gather.default(t.contiguous(), handle, world)
    probe = t.new_zeros(8, t.shape[1])  # the cheapest ag_gemm that returns the gathered rows
    return _mk.ag_gemm.default(t.contiguous(), probe, handle, world, True)[1]


class _GatherLastDim(torch.autograd.Function):
    """Forward: all-gather along the last dim; backward: this rank's slice of the gradient
    (the gathered output is replicated, so is its gradient)."""

    @staticmethod
    def forward(ctx: Any, y: Tensor, group: Any, rank: int, world: int) -> Tensor:
        ctx.rank, ctx.cols = rank, y.shape[-1]
        flat = y.reshape(-1, y.shape[-1])
        gathered = _all_gather_rows(flat.t().contiguous(), group)  # [W*c, rows]
        return gathered.t().reshape(*y.shape[:-1], world * y.shape[-1]).contiguous()

    @staticmethod
    def backward(ctx: Any, grad: Tensor):
        c = ctx.cols
        return grad[..., ctx.rank * c:(ctx.rank + 1) * c].contiguous(), None, None, None


class _SplitLastDim(torch.autograd.Function):
    """Forward: this rank's slice of the last dim; backward: all-gather of the gradient."""

    @staticmethod
    def forward(ctx: Any, x: Tensor, group: Any, rank: int, world: int) -> Tensor:
        ctx.group, ctx.rank, ctx.world = group, rank, world
        c = x.shape[-1] // world
        return x[..., rank * c:(rank + 1) * c].contiguous()

    @staticmethod
    def backward(ctx: Any, grad: Tensor):
        return _GatherLastDim.apply(grad, ctx.group, ctx.rank, ctx.world), None, None, None


class _ReplicatedColumnLinear(torch.autograd.Function):
    """``x @ w.T`` on a replicated input; dgrad ``allreduce(grad @ w)`` in one gemm_ar."""

    @staticmethod
    def forward(ctx: Any, x: Tensor, w: Tensor, handle: int, world: int) -> Tensor:
        ctx.save_for_backward(x, w)
        ctx.handle, ctx.world = handle, world
        return linear(x, w)

    @staticmethod
    def backward(ctx: Any, grad: Tensor):
        x, w = ctx.saved_tensors
        grad = grad.contiguous()
        grad_x = grad_w = None
        if ctx.needs_input_grad[0]:
            grad_x = _mk.gemm_ar.default(grad, w.t().contiguous(), ctx.handle, ctx.world)
        if ctx.needs_input_grad[1]:
            grad_w = wgrad(grad, x)
        return grad_x, grad_w, None, None


def _config_value(config: Any, name: str, default: Any) -> Any:
    return getattr(config, name, default) if config is not None else default


class _ParallelLinear(torch.nn.Module):
    def __init__(self, weight_shape: tuple[int, int], bias_size: int, *, bias: bool,
                 skip_bias_add: bool, sequence_parallel: bool, group: Any, config: Any,
                 params_dtype: torch.dtype | None, device: Any,
                 init_method: Callable[[Tensor], Any] | None) -> None:
        super().__init__()
        self.group = _group_of(group)
        self.world_size = self.group.world_size
        self.rank = getattr(self.group, "rank", 0)
        self.sequence_parallel = bool(_config_value(config, "sequence_parallel", sequence_parallel))
        dtype = params_dtype or _config_value(config, "params_dtype", None) or torch.get_default_dtype()
        self.skip_bias_add = skip_bias_add
        self.weight = torch.nn.Parameter(torch.empty(weight_shape, dtype=dtype, device=device))
        (init_method or (lambda w: torch.nn.init.kaiming_uniform_(w, a=math.sqrt(5))))(self.weight)
        if bias:
            self.bias = torch.nn.Parameter(torch.zeros(bias_size, dtype=dtype, device=device))
        else:
            self.register_parameter("bias", None)

    def _finish(self, out: Tensor) -> tuple[Tensor, Tensor | None]:
        if self.bias is None:
            return out, None
        if self.skip_bias_add:
            return out, self.bias
        return out + self.bias, None


class ColumnParallelLinear(_ParallelLinear):
    """``Y = X Aᵀ + b`` with ``A`` split by rows (output features) over the tensor-parallel group.

    Args:
        input_size: ``in`` features (full).
        output_size: ``out`` features (full); divisible by the group's world size.
        bias: add a bias ``[out/tp]``.
        gather_output: all-gather the output to ``[..., out]`` (not with sequence_parallel).
        sequence_parallel: the input is the sequence shard ``[s/tp, b, in]`` (gathered inside
            the fused :func:`mkernel.ag_gemm`).
        skip_bias_add: return the bias instead of adding it.
        group: the mkernel group (None: the default one).
        config: a Megatron ``TransformerConfig``-like object; its ``sequence_parallel`` and
            ``params_dtype`` win over the keywords.
    """

    def __init__(self, input_size: int, output_size: int, *, bias: bool = True,
                 gather_output: bool = False, sequence_parallel: bool = False,
                 skip_bias_add: bool = False, group: Any = None, config: Any = None,
                 params_dtype: torch.dtype | None = None, device: Any = None,
                 init_method: Callable[[Tensor], Any] | None = None) -> None:
        group = _group_of(group)
        if output_size % group.world_size:
            raise ValueError(f"ColumnParallelLinear: output_size {output_size} is not divisible "
                             f"by the group's world size {group.world_size}")
        per_rank = output_size // group.world_size
        super().__init__((per_rank, input_size), per_rank, bias=bias, skip_bias_add=skip_bias_add,
                         sequence_parallel=sequence_parallel, group=group, config=config,
                         params_dtype=params_dtype, device=device, init_method=init_method)
        if gather_output and self.sequence_parallel:
            raise ValueError("ColumnParallelLinear: gather_output is not supported with "
                             "sequence_parallel (as in Megatron-core)")
        self.input_size, self.output_size, self.gather_output = input_size, output_size, gather_output

    def forward(self, x: Tensor) -> tuple[Tensor, Tensor | None]:
        """x: ``[s/tp, b, in]`` (sequence_parallel) or ``[s, b, in]`` (any leading dims).

        Returns ``(output, output_bias)``; output ``[s, b, out/tp]`` (``[s, b, out]`` when
        gather_output)."""
        handle, world = ops._group_args("ColumnParallelLinear", self.group)
        lead = x.shape[:-1]
        flat = x.reshape(-1, x.shape[-1]).contiguous()
        if self.sequence_parallel:
            out = _mk.ag_gemm.default(flat, self.weight, handle, world, False)[0]
            out = out.reshape(world * lead[0], *lead[1:], -1) if lead else out
        else:
            out = _ReplicatedColumnLinear.apply(flat, self.weight, handle, world)
            out = out.reshape(*lead, -1)
        out, out_bias = self._finish(out)
        if self.gather_output:
            out = _GatherLastDim.apply(out, self.group, self.rank, world)
        return out, out_bias


class RowParallelLinear(_ParallelLinear):
    """``Y = X Aᵀ + b`` with ``A`` split by columns (input features) over the group.

    Args:
        input_size: ``in`` features (full); divisible by the group's world size.
        output_size: ``out`` features.
        bias: add a bias ``[out]`` after the reduction.
        input_is_parallel: the input is already split ``[..., in/tp]``; else it is split here.
        sequence_parallel: reduce-scatter the output over the sequence (the fused
            :func:`mkernel.gemm_rs`; output ``[s/tp, b, out]``); else all-reduce it
            (:func:`mkernel.gemm_ar`).
        skip_bias_add, group, config: as for :class:`ColumnParallelLinear`.
    """

    def __init__(self, input_size: int, output_size: int, *, bias: bool = True,
                 input_is_parallel: bool = False, sequence_parallel: bool = False,
                 skip_bias_add: bool = False, group: Any = None, config: Any = None,
                 params_dtype: torch.dtype | None = None, device: Any = None,
                 init_method: Callable[[Tensor], Any] | None = None) -> None:
        group = _group_of(group)
        if input_size % group.world_size:
            raise ValueError(f"RowParallelLinear: input_size {input_size} is not divisible by "
                             f"the group's world size {group.world_size}")
        super().__init__((output_size, input_size // group.world_size), output_size, bias=bias,
                         skip_bias_add=skip_bias_add, sequence_parallel=sequence_parallel,
                         group=group, config=config, params_dtype=params_dtype, device=device,
                         init_method=init_method)
        if self.sequence_parallel and not input_is_parallel:
            raise ValueError("RowParallelLinear: sequence_parallel needs input_is_parallel=True "
                             "(as in Megatron-core)")
        if self.bias is not None and self.sequence_parallel:
            self.bias.sequence_parallel = True  # its grad covers this rank's tokens only
        self.input_size, self.output_size = input_size, output_size
        self.input_is_parallel = input_is_parallel

    def forward(self, x: Tensor) -> tuple[Tensor, Tensor | None]:
        """x: ``[s, b, in/tp]`` (input_is_parallel) or ``[s, b, in]``.

        Returns ``(output, output_bias)``; output ``[s/tp, b, out]`` (sequence_parallel) or
        ``[s, b, out]``."""
        handle, world = ops._group_args("RowParallelLinear", self.group)
        if not self.input_is_parallel:
            x = _SplitLastDim.apply(x, self.group, self.rank, world)
        lead = x.shape[:-1]
        flat = x.reshape(-1, x.shape[-1]).contiguous()
        if self.sequence_parallel:
            if lead and lead[0] % world:
                raise ValueError(f"RowParallelLinear: the sequence length {lead[0]} is not "
                                 f"divisible by the group's world size {world}")
            out = _mk.gemm_rs.default(flat, self.weight, handle, world)
            out = out.reshape(lead[0] // world, *lead[1:], -1) if lead else out
        else:
            out = _mk.gemm_ar.default(flat, self.weight, handle, world).reshape(*lead, -1)
        return self._finish(out)


__all__ = ["ColumnParallelLinear", "RowParallelLinear"]

# The expert-parallel MoE layer lives in mkernel/moe.py (dispatch + grouped GEMMs + combine), the
# context-parallel core attention in mkernel/context_parallel.py (the fused ring attention).
from .context_parallel import ContextParallelAttention  # noqa: E402
from .moe import MoEMLP  # noqa: E402

__all__ += ["ContextParallelAttention", "MoEMLP"]
