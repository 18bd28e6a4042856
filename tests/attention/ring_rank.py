"""The program of every rank of the ring attention host tests (test_ring_attention_host.py):
all ranks draw the same full q/k/v (seeded), take their shard (contiguous, or zigzag when
causal), call mkernel.ring_attention, and compare with a float64 reference of the full
sequence, sharded the same way."""

from __future__ import annotations

import os
import random

import torch
import torch.distributed as dist

import mkernel
from mkernel.ops import zigzag_shard
from tests.attention.reference import attention_ref

CASES = [  # (causal, b, local s, h, h_kv, d, dtype)
    (False, 2, 6, 4, 2, 16, torch.float32),
    (True, 1, 8, 4, 4, 32, torch.float32),
    (True, 2, 4, 6, 2, 16, torch.bfloat16),
    (False, 1, 5, 2, 1, 8, torch.float16),
]


def _shard(x: torch.Tensor, rank: int, world: int, causal: bool, dim: int = 1) -> torch.Tensor:
    if causal:
        return zigzag_shard(x, rank, world, dim=dim)
    return x.chunk(world, dim=dim)[rank].contiguous()


GRAD_CASES = [  # (causal, b, local s, h, h_kv, d[, local s_kv]), fp32
    (True, 2, 6, 4, 2, 8),
    (False, 1, 5, 2, 1, 8),
    # non-causal K/V shards longer and shorter than the queries'
    (False, 2, 4, 2, 2, 8, 7),
    (False, 1, 6, 4, 2, 8, 3),
]


def check_gradients(ctx, rank: int, world: int, i: int, causal: bool, b: int, s: int, h: int,
                    h_kv: int, d: int, s_kv: int | None = None, loss: str = "out") -> None:
    """dq/dk/dv of the local shards against float64 autograd through the full-sequence
    reference, sharded the same way (the backward gathers K/V and reduce-scatters dK/dV), for a
    loss that reads out ("out"), out and lse ("out+lse") or lse alone ("lse")."""
    gen = torch.Generator().manual_seed(2000 + i)
    s_kv = s if s_kv is None else s_kv
    full = [torch.randn(b, n * world, hh, d, generator=gen, dtype=torch.float64)
            for n, hh in ((s, h), (s_kv, h_kv), (s_kv, h_kv))]
    grad = torch.randn(b, s * world, h, d, generator=gen, dtype=torch.float64)
    grad_lse = torch.randn(b, h, s * world, generator=gen, dtype=torch.float64)
    refs = [x.clone().requires_grad_() for x in full]
    ref_out, ref_lse = attention_ref(*refs, causal)
    terms = {"out": [(ref_out, grad)], "out+lse": [(ref_out, grad), (ref_lse, grad_lse)],
             "lse": [(ref_lse, grad_lse)]}[loss]
    sum((t * g).sum() for t, g in terms).backward()
    mine = [_shard(x, rank, world, causal).float().requires_grad_() for x in full]
    out, lse = mkernel.ring_attention(*mine, causal=causal, group=ctx)
    terms = {"out": [(out, grad)], "out+lse": [(out, grad), (lse, grad_lse)], "lse": [(lse, grad_lse)]}[loss]
    sum((t * _shard(g, rank, world, causal, dim=1 if g is grad else 2).float()).sum() for t, g in terms).backward()
    for name, x, r in zip("qkv", mine, refs):
        if loss == "lse" and name == "v":  # lse does not depend on v
            assert r.grad is None and torch.count_nonzero(x.grad) == 0, ("grad", i, loss)
            continue
        want = _shard(r.grad, rank, world, causal)
        rel = ((x.grad.double() - want).norm() / want.norm()).item()
        assert rel <= 1e-5, ("grad", i, loss, name, rel)


def check_empty_batch(ctx) -> None:
    """b = 0 on every rank: empty out [0, s, h, d] / lse [0, h, s] and empty gradients, in the
    forward and the backward of both masks (no collective is needed, none may hang)."""
    for causal in (False, True):
        q, k, v = (torch.randn(0, 4, h, 8, requires_grad=True) for h in (4, 2, 2))
        out, lse = mkernel.ring_attention(q, k, v, causal=causal, group=ctx)
        assert out.shape == (0, 4, 4, 8) and lse.shape == (0, 4, 4), (out.shape, lse.shape)
        dq, dk, dv = torch.autograd.grad(out, (q, k, v), torch.ones_like(out))
        assert (dq.shape, dk.shape, dv.shape) == (q.shape, k.shape, v.shape)


def fuzz(ctx, rank: int, world: int) -> None:
    """FUZZ_CASES random cases from FUZZ_SEED (the same on every rank; tests/fuzz's variables):
    the forward against the float64 reference (fp32, bf16, fp16) and, in fp32, dq / dk / dv
    (non-causal shards with K/V lengths of their own too)."""
    r = random.Random(f"ring-host-{os.environ.get('FUZZ_SEED', '0')}-{world}")
    for i in range(int(os.environ.get("FUZZ_CASES", "6"))):
        causal = r.random() < 0.5
        s = r.randint(1, 12)
        s += s % 2 if causal else 0
        h_kv = r.choice((1, 2))
        h, d, b = h_kv * r.choice((1, 2, 3)), r.choice((8, 16, 24)), r.choice((1, 2))
        dtype = r.choice((torch.float32, torch.float32, torch.bfloat16, torch.float16))
        case = (causal, b, s, h, h_kv, d, dtype)
        print("FUZZ", i, case, flush=True)
        _check_forward(ctx, rank, world, 3000 + i, case)
        if dtype == torch.float32:
            s_kv = s if causal or r.random() < 0.6 else r.randint(1, 12)
            check_gradients(ctx, rank, world, 3000 + i, causal, b, s, h, h_kv, d, s_kv)


def _check_forward(ctx, rank: int, world: int, seed: int, case) -> None:
    causal, b, s, h, h_kv, d, dtype = case
    gen = torch.Generator().manual_seed(seed)
    full_s = s * world
    q = torch.randn(b, full_s, h, d, generator=gen).to(dtype)
    k = torch.randn(b, full_s, h_kv, d, generator=gen).to(dtype)
    v = torch.randn(b, full_s, h_kv, d, generator=gen).to(dtype)
    out, lse = mkernel.ring_attention(_shard(q, rank, world, causal), _shard(k, rank, world, causal),
                                      _shard(v, rank, world, causal), causal=causal, group=ctx)
    ref, ref_lse = attention_ref(q, k, v, causal)
    ref, ref_lse = _shard(ref, rank, world, causal), _shard(ref_lse, rank, world, causal, dim=2)
    rel = ((out.double() - ref).norm() / ref.norm()).item()
    bound = 1e-5 if dtype == torch.float32 else 1e-2
    assert out.dtype == dtype and rel <= bound, (seed, case, rel)
    assert torch.allclose(lse.double(), ref_lse, rtol=1e-5, atol=1e-5), (seed, case)


def main() -> None:
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    ctx = mkernel.init()
    rank, world = dist.get_rank(), dist.get_world_size()
    if os.environ.get("RING_SUITE") == "fuzz":
        fuzz(ctx, rank, world)
        ctx.barrier()
        mkernel.shutdown()
        dist.destroy_process_group()
        print("OK", rank, flush=True)
        return
    for i, case in enumerate(CASES):
        _check_forward(ctx, rank, world, 1000 + i, case)
    for i, case in enumerate(GRAD_CASES):
        check_gradients(ctx, rank, world, i, *case)
    # A loss that reads lse too (ring-attention recipes that merge in torch): its gradient runs a
    # ring forward with v := k and a second backward; alone, no gradient through out at all.
    check_gradients(ctx, rank, world, 0, *GRAD_CASES[0], loss="out+lse")
    check_gradients(ctx, rank, world, 2, *GRAD_CASES[2], loss="out+lse")
    check_gradients(ctx, rank, world, 1, *GRAD_CASES[1], loss="lse")
    check_empty_batch(ctx)
    # The per-block backward pinned (MKERNEL_RING_BWD_GROUPS=0, read at each backward call): the
    # same gradients through one call per (query, key) block instead of the grouped calls.
    os.environ["MKERNEL_RING_BWD_GROUPS"] = "0"
    try:
        for i, case in enumerate(GRAD_CASES):
            check_gradients(ctx, rank, world, i, *case)
    finally:
        del os.environ["MKERNEL_RING_BWD_GROUPS"]
    ctx.barrier()
    mkernel.shutdown()
    dist.destroy_process_group()
    print("OK", rank, flush=True)


if __name__ == "__main__":
    main()
