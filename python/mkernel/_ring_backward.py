"""Backward of :func:`mkernel.ring_attention` (issue 13, first step — not the fused backward
ring with dK/dV travelling beside K/V).

With the forward's final ``out`` and ``lse``, the gradient splits exactly over the key blocks of
the ring (P_block = exp(scale·Q·K_blockᵀ − lse), delta = rowsum(dO ∘ out)): every rank gathers
the K/V shards over the substrate (``all_gather`` on the batch dimension), runs the per-block
attention backward (on CUDA the kernel :func:`mkernel.ops._attention_backward_choice` picks for
the block — cuDNN's SDPA backward where it applies, else FlashAttention-2's — fed with our LSE; on
the CPU the fp32 math backward: ``mkernel.ops._attention_backward_auto``) for the same blocks and causal
zigzag split as the forward, sums dQ locally in fp32, and returns each block's dK/dV partial to
its owner with an fp32 ``reduce_scatter``. The gradient of ``lse`` itself is not propagated
(as for :func:`mkernel.attention`).

With the native backward opted in (``MKERNEL_ATTN_BWD=native``, CUDA), the per-block calls are
one launch of its ring mode (``mkernel::attention_backward_ring``: every source's blocks, each
with its zigzag visibility, :func:`ring_visible`), between the same all-gather and reduce-scatter.
"""

from __future__ import annotations

from typing import Any, Iterator

import torch
from torch import Tensor


def ring_steps(rank: int, world: int, causal: bool, s: int) -> Iterator[tuple[int, slice, slice, bool]]:
    """Per ring step: ``(src, query rows, key rows of src's shard, causal)`` — the work split of
    the CUDA ring (csrc/ring_attention.cpp). Causal shards are zigzag (``s`` even): step 0 is
    causal on the local shard; a lower source's first half is seen by every query, a higher
    source is seen whole by the second query half only."""
    c = s // 2
    for j in range(world):
        src = (rank - j) % world
        if not causal:
            yield src, slice(0, s), slice(0, s), False
        elif j == 0:
            yield src, slice(0, s), slice(0, s), True
        elif src < rank:
            yield src, slice(0, s), slice(0, c), False
        else:
            yield src, slice(c, s), slice(0, s), False


def ring_visible(rank: int, world: int, s: int, causal: bool) -> Tensor:
    """Which keys of the all-gathered shards (``[s, world * s]``: query row, source * s + key
    row) this rank's queries see — the rule the native backward's ring mode applies per CTA
    (csrc/kernels/attention/attention_bwd_api.h): non-causal all; causal, for source ``src``:
    ``j <= i`` when ``src == rank``, ``j < s/2`` when ``src < rank``, ``i >= s/2`` when
    ``src > rank``."""
    if not causal:
        return torch.ones(s, world * s, dtype=torch.bool)
    c = s // 2
    i = torch.arange(s)[:, None]
    j = torch.arange(s)[None, :]
    blocks = []
    for src in range(world):
        if src == rank:
            blocks.append(j <= i)
        elif src < rank:
            blocks.append((j < c).expand(s, s))
        else:
            blocks.append((i >= c).expand(s, s))
    return torch.cat(blocks, dim=1)


def setup_context(ctx: Any, inputs: tuple, output: tuple) -> None:
    q, k, v, group, world_size, causal, softmax_scale = inputs
    out, lse = output
    ctx.group, ctx.world, ctx.causal = group, world_size, causal
    ctx.scale = softmax_scale if softmax_scale is not None else q.shape[-1] ** -0.5
    ctx.save_for_backward(q, k, v, out, lse)


def backward(ctx: Any, dout: Tensor | None, dlse: Tensor | None):
    from . import runtime
    from .ops import _attention_backward_auto, _attention_backward_choice

    q, k, v, out, lse = ctx.saved_tensors
    if dout is None:
        dout = torch.zeros_like(out)
    dout = dout.contiguous()
    if ctx.world == 1:
        dq, dk, dv = _attention_backward_auto(dout, q, k, v, out, lse, ctx.causal, ctx.scale)
        return dq, dk, dv, None, None, None, None
    rank, world, b = runtime._contexts[ctx.group].rank, ctx.world, q.shape[0]
    k_all = torch.ops.mkernel.all_gather.default(k.contiguous(), ctx.group, world)  # [W*b, ...]
    v_all = torch.ops.mkernel.all_gather.default(v.contiguous(), ctx.group, world)
    if _attention_backward_choice(q, k, v, ctx.causal) == "native":
        # The engine's native backward over every source in one launch (its ring mode).
        dq, dk_all, dv_all = torch.ops.mkernel.attention_backward_ring.default(
            dout, q, k_all, v_all, out, lse, ctx.causal, ctx.scale, world, rank)
        dk = torch.ops.mkernel.reduce_scatter.default(dk_all, ctx.group, world).to(k.dtype)  # fp32
        dv = torch.ops.mkernel.reduce_scatter.default(dv_all, ctx.group, world).to(v.dtype)
        return dq, dk, dv, None, None, None, None
    dq = torch.zeros(q.shape, dtype=torch.float32, device=q.device)
    dk_all = torch.zeros(k_all.shape, dtype=torch.float32, device=q.device)
    dv_all = torch.zeros_like(dk_all)
    for src, qr, kr, causal in ring_steps(rank, world, ctx.causal, q.shape[1]):
        blk = slice(src * b, (src + 1) * b)
        dq_p, dk_p, dv_p = _attention_backward_auto(
            dout[:, qr].contiguous(), q[:, qr].contiguous(), k_all[blk, kr].contiguous(),
            v_all[blk, kr].contiguous(), out[:, qr].contiguous(), lse[:, :, qr].contiguous(),
            causal, ctx.scale)
        dq[:, qr] += dq_p.float()
        dk_all[blk, kr] += dk_p.float()
        dv_all[blk, kr] += dv_p.float()
    dk = torch.ops.mkernel.reduce_scatter.default(dk_all, ctx.group, world).to(k.dtype)
    dv = torch.ops.mkernel.reduce_scatter.default(dv_all, ctx.group, world).to(v.dtype)
    return dq.to(q.dtype), dk, dv, None, None, None, None
