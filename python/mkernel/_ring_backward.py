"""Backward of :func:`mkernel.ring_attention`.

With the forward's final ``out`` and ``lse``, the gradient splits exactly over the key blocks of
the ring (P_block = exp(scale·Q·K_blockᵀ − lse), delta = rowsum(dO ∘ out)): every rank gathers
the K/V shards over the substrate (``all_gather`` on the batch dimension), runs the attention
backward for the same blocks and causal zigzag split as the forward — the blocks that share
their query rows and mask as one call over their keys concatenated (:func:`ring_groups`: one
call non-causal, at most three causal, at any W) — on CUDA through the kernel
:func:`mkernel.ops._attention_backward_choice` picks (the native one on its measured rows, else
cuDNN's SDPA backward where it applies, else FlashAttention-2's) fed with our LSE, on the CPU the fp32 math backward
(``mkernel.ops._attention_backward_auto``); sums the calls' dQ in fp32 and returns each block's dK/dV partial to
its owner with an fp32 ``reduce_scatter``. The gradient of ``lse`` itself is not propagated
(as for :func:`mkernel.attention`).

With the native backward opted in (``MKERNEL_ATTN_BWD=native``, CUDA) or on auto's rows
(:func:`native_ring_wins`: d = 128 from 1024-query shards, d = 64 causal from 4096), the
per-block calls are one launch of its ring mode (every source's blocks, each with its zigzag visibility,
:func:`ring_visible`) through ``mkernel::ring_attention_backward``, after an all-gather of the
shards — or, opted in with ``MKERNEL_RING_BWD_ARRIVAL=1`` (one node, block-aligned shards),
consuming the K/V shards as they arrive (the forward ring's send kernel forwards them around the
ring beside it, each CTA waits for its keys' arrival flags, the own shard first). On one node
dK/dV travel back to their owners inside the launch (each CTA stores its fp32 partial into the
owner's receive area and releases a flag there; the owner sums the ranks' slots tile by tile as
the flags come up; ``MKERNEL_RING_BWD_TRAVEL=0`` pins the fp32 reduce-scatter after it instead,
which groups across nodes take).
"""

from __future__ import annotations

from typing import Any, Iterator

import torch
from torch import Tensor


def ring_steps(rank: int, world: int, causal: bool, s: int,
               s_kv: int | None = None) -> Iterator[tuple[int, slice, slice, bool]]:
    """Per ring step: ``(src, query rows, key rows of src's shard, causal)`` — the work split of
    the CUDA ring (csrc/ring_attention.cpp). ``s`` queries and ``s_kv`` keys a shard (``s`` when
    None; non-causal shards may differ). Causal shards are zigzag (``s`` even, keys as many):
    step 0 is causal on the local shard; a lower source's first half is seen by every query, a
    higher source is seen whole by the second query half only."""
    c = s // 2
    for j in range(world):
        src = (rank - j) % world
        if not causal:
            yield src, slice(0, s), slice(0, s if s_kv is None else s_kv), False
        elif j == 0:
            yield src, slice(0, s), slice(0, s), True
        elif src < rank:
            yield src, slice(0, s), slice(0, c), False
        else:
            yield src, slice(c, s), slice(0, s), False


def ring_groups(rank: int, world: int, causal: bool, s: int,
                s_kv: int | None = None) -> list[tuple[slice, list[tuple[int, slice]], bool]]:
    """The blocks of :func:`ring_steps` grouped into backward calls: ``(query rows, [(src, key
    rows of src's shard)], causal)``. Non-causal: one call, every source's keys (``s_kv`` a
    shard, ``s`` when None). Causal zigzag: the own shard (causal), every lower source's first
    half against all queries, every higher source whole against the second query half — at most
    three calls at any W."""
    if not causal:
        keys = slice(0, s if s_kv is None else s_kv)
        return [(slice(0, s), [(src, keys) for src in range(world)], False)]
    c = s // 2
    groups = [(slice(0, s), [(rank, slice(0, s))], True)]
    if rank > 0:
        groups.append((slice(0, s), [(src, slice(0, c)) for src in range(rank)], False))
    if rank < world - 1:
        groups.append((slice(c, s), [(src, slice(0, s)) for src in range(rank + 1, world)], False))
    return groups


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


# auto's rows for the native ring mode: CUDA, bf16 / fp16, d = 128 with local shards of at least
# NATIVE_RING_MIN_SEQ queries (causal and not, MHA and GQA), and d = 64 causal with shards of at
# least NATIVE_RING_MIN_SEQ_D64. Measured on an H100 under MPS, forward + backward, slowest rank,
# the native ring mode after the all-gather against the grouped cuDNN calls
# (MKERNEL_ATTN_BWD=torch):
#  - session 40 (benchmarks/results/ring_backward_nvidia_h100_80gb_hbm3_20261206-08*.json, dK/dV
#    reduce-scattered): d = 128 1.03-1.31x at W = 2 (MHA b 4 s 4096 h 16, GQA b 1 s 8192 32/8),
#    1.08-1.25x at W = 4 (MHA); 2048-query shards 1.22 / 1.45x (W = 2, non-causal / causal),
#    1.19 / 1.13x (W = 4);
#  - session 41 (-094759.json, -094814.json, -094830.json, dK/dV travelling, the default on one
#    node since then): 1024-query shards 1.40-1.41 / 1.65-1.75x at W = 2, 1.47 / 1.51x at W = 4;
#    d = 64 causal 1.20-1.22x (MHA s 4096) and 1.05-1.06x (GQA s 8192) at W = 2, 1.04x at W = 4;
#    d = 64 non-causal mixed (MHA 1.01-1.03x at W = 2, 0.96x at W = 4; GQA 0.92-0.93x): the grouped
#    calls stay there, and on the shorter shards (unmeasured).
NATIVE_RING_MIN_SEQ: int = 1024
NATIVE_RING_MIN_SEQ_D64: int = 4096


def native_ring_wins(q: Tensor, causal: bool) -> bool:
    """Whether auto runs the ring backward on the native backward's ring mode (one launch over
    every source's blocks): the rows above — and not under ``torch.use_deterministic_algorithms``
    (its dq is summed by reduce-adds in arrival order)."""
    if not (q.is_cuda and q.dtype in (torch.bfloat16, torch.float16)
            and not torch.are_deterministic_algorithms_enabled()):
        return False
    d, s = q.shape[-1], q.shape[1]
    return ((d == 128 and s >= NATIVE_RING_MIN_SEQ)
            or (d == 64 and causal and s >= NATIVE_RING_MIN_SEQ_D64))


def setup_context(ctx: Any, inputs: tuple, output: tuple) -> None:
    q, k, v, group, world_size, causal, softmax_scale = inputs
    out, lse = output
    ctx.group, ctx.world, ctx.causal = group, world_size, causal
    ctx.scale = softmax_scale if softmax_scale is not None else q.shape[-1] ** -0.5
    # A gradient the loss does not produce stays None (no zeros tensor; lse's is rare).
    ctx.set_materialize_grads(False)
    ctx.save_for_backward(q, k, v, out, lse)


def backward(ctx: Any, dout: Tensor | None, dlse: Tensor | None):
    from .ops import _attention_backward_full, _lse_row_weights

    q, k, v, out, lse = ctx.saved_tensors
    if ctx.world == 1:
        dq, dk, dv = _attention_backward_full(dout, dlse, q, k, v, out, lse, ctx.causal, ctx.scale)
        return dq, dk, dv, None, None, None, None
    # Every rank runs the same loss (SPMD), so dout / dlse are None on all ranks or on none: the
    # exchanges below pair up.
    if q.shape[0] == 0 or dout is None and dlse is None:  # nothing to send: an empty batch on every rank
        return torch.zeros_like(q), torch.zeros_like(k), torch.zeros_like(v), None, None, None, None
    if dout is None:
        dq, dk, dv = torch.zeros_like(q), torch.zeros_like(k), torch.zeros_like(v)
    else:
        dq, dk, dv = _out_backward(ctx, dout.contiguous(), q, k, v, out, lse)
    if dlse is not None:
        # lse's gradient, as ops._attention_lse_backward over the whole sequence: dq from the ring
        # forward with v := k, dk from the dV of this backward fed dO := dlse·q.
        w = _lse_row_weights(dlse, lse)
        pk, _ = torch.ops.mkernel.ring_attention.default(q, k, k, ctx.group, ctx.world, ctx.causal, ctx.scale)
        _, _, dk_l = _out_backward(ctx, (q.float() * w).to(q.dtype), q, k, v, out, lse)
        dq = (dq.float() + pk.float() * w * ctx.scale).to(q.dtype)
        dk = (dk.float() + dk_l.float() * ctx.scale).to(k.dtype)
    return dq, dk, dv, None, None, None, None


def _out_backward(ctx: Any, dout: Tensor, q: Tensor, k: Tensor, v: Tensor, out: Tensor,
                  lse: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """The gradient through the ring's out (world > 1, dout contiguous): (dq, dk, dv) of this rank."""
    from . import _env_knobs, runtime
    from .ops import _attention_backward_auto, _attention_backward_choice, _attention_backward_mode

    rank, world, b = runtime._contexts[ctx.group].rank, ctx.world, q.shape[0]
    mode = _attention_backward_mode()
    # The native ring mode takes shards of one length (k's as q's); others take the calls below.
    if k.shape[1] == q.shape[1] and (
            (mode == "native" and _attention_backward_choice(q, k, v, ctx.causal) == "native")
            or (mode == "auto" and native_ring_wins(q, ctx.causal))):
        # The engine's native backward over every source in one launch (its ring mode) after an
        # all-gather or on the K/V as it arrives (MKERNEL_RING_BWD_ARRIVAL=1), dK/dV travelling
        # back to their owners inside it on one node (csrc/ring_attention.cpp,
        # mkernel::ring_attention_backward).
        return torch.ops.mkernel.ring_attention_backward.default(
            dout, q, k, v, out, lse, ctx.group, world, ctx.causal, ctx.scale)
    k_all = torch.ops.mkernel.all_gather.default(k.contiguous(), ctx.group, world)  # [W*b, ...]
    v_all = torch.ops.mkernel.all_gather.default(v.contiguous(), ctx.group, world)
    # The ring's blocks in at most three backward calls (ring_groups): blocks that share their
    # query rows and mask run as one call over their keys concatenated, which is exact (each
    # block's P uses the forward's global lse) and costs fewer launches and fp32 partial sums.
    groups = ring_groups(rank, world, ctx.causal, q.shape[1], k.shape[1])
    if _env_knobs.get("MKERNEL_RING_BWD_GROUPS", "1") == "0":  # pinned: one call per block
        groups = [(qr, [(src, kr)], causal) for src, qr, kr, causal in
                  ring_steps(rank, world, ctx.causal, q.shape[1], k.shape[1])]
    # One group (non-causal): its dq is the whole dq; else the groups' partials summed in fp32.
    dq = None if len(groups) == 1 else torch.zeros(q.shape, dtype=torch.float32, device=q.device)
    dk_all = torch.zeros(k_all.shape, dtype=torch.float32, device=q.device)
    dv_all = torch.zeros_like(dk_all)
    for qr, keys, causal in groups:
        kcat = torch.cat([k_all[src * b:(src + 1) * b, kr] for src, kr in keys], dim=1)
        vcat = torch.cat([v_all[src * b:(src + 1) * b, kr] for src, kr in keys], dim=1)
        whole = qr.stop - qr.start == q.shape[1]
        dq_p, dk_p, dv_p = _attention_backward_auto(
            dout if whole else dout[:, qr].contiguous(), q if whole else q[:, qr].contiguous(),
            kcat, vcat, out if whole else out[:, qr].contiguous(),
            lse if whole else lse[:, :, qr].contiguous(), causal, ctx.scale)
        if dq is None:
            dq = dq_p
        else:
            dq[:, qr] += dq_p.float()
        at = 0
        for src, kr in keys:
            n = kr.stop - kr.start
            dk_all[src * b:(src + 1) * b, kr] += dk_p[:, at:at + n].float()
            dv_all[src * b:(src + 1) * b, kr] += dv_p[:, at:at + n].float()
            at += n
    dk = torch.ops.mkernel.reduce_scatter.default(dk_all, ctx.group, world).to(k.dtype)
    dv = torch.ops.mkernel.reduce_scatter.default(dv_all, ctx.group, world).to(v.dtype)
    return dq.to(q.dtype), dk, dv
