"""Plain float64 torch references of the ops whose kernels have not landed, and the checks the
strict-xfail tests run against them: the day a kernel lands its xfail turns into a failure
(XPASS, strict) and the test becomes a real check by deleting the mark."""

from __future__ import annotations

import torch

from .helpers import group

WORLD_ONE = group(1, handle=0)  # world size one: no session, no communication


def rel_err(out: torch.Tensor, ref: torch.Tensor) -> float:
    out64, ref64 = out.double().cpu(), ref.double().cpu()
    assert torch.isfinite(out64).all(), "non-finite output"
    return ((out64 - ref64).norm() / ref64.norm().clamp_min(1e-30)).item()


def tolerance(dtype: torch.dtype) -> float:
    return 1e-5 if dtype == torch.float32 else 1e-2


def attention_reference(q, k, v, *, causal: bool, scale: float):
    """(out [b, s, h, d], lse [b, h, s]) of softmax(scale * q k^T) v in float64, one shard (W = 1);
    GQA: query head i reads kv head i // (h / h_kv)."""
    h, h_kv = q.shape[2], k.shape[2]
    qd = q.double().cpu()
    kd = k.double().cpu().repeat_interleave(h // h_kv, dim=2)
    vd = v.double().cpu().repeat_interleave(h // h_kv, dim=2)
    scores = torch.einsum("bshd,bthd->bhst", qd, kd) * scale
    if causal:
        s, t = scores.shape[-2:]
        scores = scores.masked_fill(torch.ones(s, t, dtype=torch.bool).triu(1 + t - s), float("-inf"))
    lse = torch.logsumexp(scores, dim=-1)
    out = torch.einsum("bhst,bthd->bshd", torch.softmax(scores, dim=-1), vd)
    return out, lse


def check_ring_attention_world_one(ops, device: str, dtype: torch.dtype, causal: bool,
                                   head_dim: int = 16) -> None:
    """W = 1, GQA (4 query heads on 2 kv heads), a ragged 37-token sequence. The CUDA engine
    takes head dims 64 and 128 (other multiples of 8 up to 256 through torch's FA2 kernel); the
    CPU kernel any."""
    g = torch.Generator().manual_seed(17)
    q = torch.randn(2, 37, 4, head_dim, generator=g).to(device, dtype)
    k = torch.randn(2, 37, 2, head_dim, generator=g).to(device, dtype)
    v = torch.randn(2, 37, 2, head_dim, generator=g).to(device, dtype)
    out, lse = ops.ring_attention(q, k, v, causal=causal, softmax_scale=0.3, group=WORLD_ONE)
    ref_out, ref_lse = attention_reference(q, k, v, causal=causal, scale=0.3)
    assert rel_err(out, ref_out) < tolerance(dtype)
    assert rel_err(lse, ref_lse) < 1e-5


def moe_inputs(device: str, dtype: torch.dtype, tokens=37, hidden=32, k=2, experts=4):
    """x [T, H], topk_idx [T, k] (distinct experts per token), w1 [E, H, H] (F = H so the
    dispatch output can go straight back through combine), topk_weights [T, k] fp32."""
    g = torch.Generator().manual_seed(23)
    x = torch.randn(tokens, hidden, generator=g).to(device, dtype)
    idx = torch.rand(tokens, experts, generator=g).argsort(dim=1)[:, :k].contiguous().to(device)
    w1 = (torch.randn(experts, hidden, hidden, generator=g) / hidden ** 0.5).to(device, dtype)
    weights = torch.rand(tokens, k, generator=g).to(device)
    return x, idx, w1, weights


def check_moe_round_trip_world_one(ops, device: str, dtype: torch.dtype) -> None:
    """dispatch + combine at W = 1: out[t] = sum_j weights[t, j] * x[t] @ w1[idx[t, j]].T, and
    counts[e] = the number of choices of expert e (capacity holds every token)."""
    x, idx, w1, weights = moe_inputs(device, dtype)
    experts, tokens, k = w1.shape[0], x.shape[0], idx.shape[1]
    res = ops.moe_dispatch_gemm(x, idx, w1, num_experts=experts, capacity=tokens * k, group=WORLD_ONE)
    want = torch.bincount(idx.flatten().cpu(), minlength=experts).to(torch.int32)
    assert torch.equal(res.counts.cpu(), want), (res.counts, want)
    out = ops.moe_combine(res.out.contiguous(), res.handle, weights, group=WORLD_ONE)
    assert rel_err(out, moe_reference(x, idx, w1, weights)) < tolerance(dtype)


def moe_reference(x, idx, w1, weights) -> torch.Tensor:
    """[T, F] float64: sum_j weights[t, j] * x[t] @ w1[idx[t, j]].T."""
    xd, wd, idx = x.double().cpu(), w1.double().cpu(), idx.cpu()
    return sum(weights[:, j, None].double().cpu() * torch.einsum("th,tfh->tf", xd, wd[idx[:, j]])
               for j in range(idx.shape[1]))
