"""Drop-in core attention under context parallelism: :class:`ContextParallelAttention`.

Megatron-core's transformer layer calls its core attention (``DotProductAttention`` /
``TEDotProductAttention``) as ``core_attention(query, key, value, attention_mask,
attn_mask_type=..., packed_seq_params=...)`` with ``[s, b, heads, head_dim]`` tensors and takes
back ``[s, b, heads * head_dim]``. Under context parallelism (CP) each rank holds a shard of the
sequence; for causal attention Megatron's ``get_batch_on_this_cp_rank`` cuts the sequence into
``2 * cp`` chunks and gives rank ``r`` chunks ``r`` and ``2 * cp - 1 - r`` — the zigzag layout of
:func:`mkernel.ring_attention` (:func:`mkernel.ops.zigzag_shard`). This module runs that call on
the fused ring attention (one kernel per call consuming the K/V shards as they arrive from the
other ranks) and is differentiable, so it swaps in where the CP group is mkernel's.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from . import ops

__all__ = ["ContextParallelAttention"]

_CAUSAL, _NO_MASK = "causal", "no_mask"


def _mask_kind(attn_mask_type: Any) -> str:
    """Megatron's ``AttnMaskType`` (an enum: its ``name``), a string, or a bool (causal)."""
    if isinstance(attn_mask_type, bool):
        return _CAUSAL if attn_mask_type else _NO_MASK
    name = getattr(attn_mask_type, "name", attn_mask_type)
    if name in (_CAUSAL, _NO_MASK):
        return name
    raise ValueError(f"ContextParallelAttention: attn_mask_type {attn_mask_type!r} is not "
                     f"supported: causal or no_mask (ring attention masks by global position; "
                     f"no padding or arbitrary masks)")


class ContextParallelAttention(torch.nn.Module):
    """``softmax(Q Kᵀ · scale) V`` of this rank's query shard over the whole sequence, whose K/V
    shards sit on the other ranks of the context-parallel group (:func:`mkernel.ring_attention`).

    Args:
        config: a Megatron ``TransformerConfig``-like object or None; its ``attention_dropout``
            (must be 0) and ``softmax_scale`` are read when present.
        layer_number: accepted for Megatron's signature; unused.
        attn_mask_type: ``AttnMaskType.causal`` / ``"causal"`` / True (the default) or
            ``AttnMaskType.no_mask`` / ``"no_mask"`` / False. Causal needs the zigzag layout.
        attention_type: ``"self"`` only.
        attention_dropout: must be 0 or None (the kernels have no dropout).
        softmax_scale: None for ``1 / sqrt(head_dim)``.
        group: the mkernel group spanning the context-parallel ranks (None: the default one).

    ``forward`` raises ValueError, naming the argument, for a mask tensor, packed sequences,
    an attention bias, or shapes that do not fit together.
    """

    def __init__(self, config: Any = None, layer_number: int | None = None,
                 attn_mask_type: Any = _CAUSAL, attention_type: str = "self",
                 attention_dropout: float | None = None, softmax_scale: float | None = None,
                 *, group: Any = None) -> None:
        super().__init__()
        del layer_number
        if getattr(attention_type, "name", attention_type) != "self":
            raise ValueError(f"ContextParallelAttention: attention_type {attention_type!r}: "
                             f"self-attention only")
        dropout = attention_dropout
        if dropout is None and config is not None:
            dropout = getattr(config, "attention_dropout", None)
        if dropout:
            raise ValueError(f"ContextParallelAttention: attention_dropout {dropout} is not "
                             f"supported (the ring attention kernels have no dropout); set it to 0")
        if softmax_scale is None and config is not None:
            softmax_scale = getattr(config, "softmax_scale", None)
        self.causal = _mask_kind(attn_mask_type) == _CAUSAL
        self.softmax_scale = softmax_scale
        self.group = group if group is not None else ops._default_group()

    def forward(self, query: Tensor, key: Tensor, value: Tensor,
                attention_mask: Tensor | None = None, attn_mask_type: Any = None,
                attention_bias: Tensor | None = None, packed_seq_params: Any = None) -> Tensor:
        """query ``[s, b, h, d]``, key / value ``[s, b, h_kv, d]`` (this rank's shard of the
        sequence; ``h`` a multiple of ``h_kv``) -> ``[s, b, h * d]`` in query's dtype.

        attn_mask_type overrides the constructor's for this call (Megatron passes it)."""
        if attention_mask is not None:
            raise ValueError("ContextParallelAttention: attention_mask must be None (the mask is "
                             "attn_mask_type's: causal or none; Megatron: "
                             "create_attention_mask_in_dataloader=False)")
        if attention_bias is not None:
            raise ValueError("ContextParallelAttention: attention_bias is not supported")
        if packed_seq_params is not None:
            raise ValueError("ContextParallelAttention: packed_seq_params (THD packed sequences) "
                             "is not supported")
        causal = self.causal if attn_mask_type is None else _mask_kind(attn_mask_type) == _CAUSAL
        for name, t in (("query", query), ("key", key), ("value", value)):
            if t.dim() != 4:
                raise ValueError(f"ContextParallelAttention: {name} must be [s, b, heads, "
                                 f"head_dim], got {tuple(t.shape)}")
        s, b, h, d = query.shape
        if key.shape != value.shape or key.shape[0] != s or key.shape[1] != b or key.shape[3] != d:
            raise ValueError(f"ContextParallelAttention: key {tuple(key.shape)} and value "
                             f"{tuple(value.shape)} must both be [s, b, h_kv, d] with query's "
                             f"s, b and d ({tuple(query.shape)})")
        if h % key.shape[2]:
            raise ValueError(f"ContextParallelAttention: query's {h} heads are not a multiple of "
                             f"key's {key.shape[2]}")
        # [s, b, h, d] -> [b, s, h, d], the op's dense layout: views at b = 1 (the usual
        # micro-batch under CP), else a copy each way.
        q, k, v = (t.transpose(0, 1).contiguous() for t in (query, key, value))
        out, _ = ops.ring_attention(q, k, v, causal=causal, softmax_scale=self.softmax_scale,
                                    group=self.group)
        return out.transpose(0, 1).reshape(s, b, h * d)
