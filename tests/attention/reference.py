"""Independent float64 attention reference for the attention tests (direct softmax, no
log-sum-exp tricks beyond max subtraction), shapes as mkernel.attention."""

from __future__ import annotations

import torch
from torch import Tensor


def attention_ref(q: Tensor, k: Tensor, v: Tensor, causal: bool, scale: float | None = None,
                  dtype: torch.dtype = torch.float64) -> tuple[Tensor, Tensor]:
    """q [b, s, h, d], k/v [b, s_kv, h_kv, d] -> (out [b, s, h, d] in `dtype`, lse [b, h, s]).

    Causal is bottom-right aligned (query i sees keys j <= i + s_kv - s); rows that see no key
    get out 0 and lse -inf."""
    h, h_kv = q.shape[2], k.shape[2]
    p, lse = softmax_ref(q, k, causal, scale, dtype)
    vd = v.to(dtype).permute(0, 2, 1, 3).repeat_interleave(h // h_kv, dim=1)
    return (p @ vd).permute(0, 2, 1, 3), lse


def softmax_ref(q: Tensor, k: Tensor, causal: bool, scale: float | None = None,
                dtype: torch.dtype = torch.float64) -> tuple[Tensor, Tensor]:
    """The attention probabilities P [b, h, s, s_kv] = softmax(scale * q k^T) (GQA: k's heads
    repeated) and lse [b, h, s], in `dtype`; rows that see no key get P 0 and lse -inf."""
    s, h, d = q.shape[1], q.shape[2], q.shape[3]
    s_kv, h_kv = k.shape[1], k.shape[2]
    scale = d ** -0.5 if scale is None else scale
    qd = q.to(dtype).permute(0, 2, 1, 3)
    kd = k.to(dtype).permute(0, 2, 1, 3).repeat_interleave(h // h_kv, dim=1)
    scores = qd @ kd.transpose(-2, -1) * scale
    if causal:
        i = torch.arange(s, device=q.device).unsqueeze(1)
        j = torch.arange(s_kv, device=q.device).unsqueeze(0)
        scores = scores.masked_fill(j > i + (s_kv - s), float("-inf"))
    m = scores.amax(-1, keepdim=True)
    m_safe = torch.where(torch.isneginf(m), torch.zeros_like(m), m)
    e = torch.exp(scores - m_safe)
    z = e.sum(-1, keepdim=True)
    p = torch.where(z > 0, e / z, torch.zeros_like(e))
    lse = torch.where(z.squeeze(-1) > 0, (m_safe + torch.log(z)).squeeze(-1),
                      torch.full_like(z.squeeze(-1), float("-inf")))
    return p, lse


def lse_ref(q: Tensor, k: Tensor, causal: bool, scale: float | None = None) -> Tensor:
    """lse [b, h, s] in q's dtype whose gradient is finite everywhere (attention_ref's is NaN on
    rows that see no key): those rows get a stand-in, which the tests weigh 0 (the op's lse
    there is -inf and has no gradient)."""
    b, s, h, d = q.shape
    s_kv, h_kv = k.shape[1], k.shape[2]
    qd = q.permute(0, 2, 1, 3)
    kd = k.permute(0, 2, 1, 3).repeat_interleave(h // h_kv, dim=1)
    scores = qd @ kd.transpose(-2, -1) * (d ** -0.5 if scale is None else scale)
    if causal:
        i = torch.arange(s, device=q.device).unsqueeze(1)
        j = torch.arange(s_kv, device=q.device).unsqueeze(0)
        seen = (j <= i + (s_kv - s)).expand_as(scores)
        scores = torch.where(seen.any(-1, keepdim=True), scores.masked_fill(~seen, float("-inf")),
                             torch.zeros_like(scores))
    return torch.logsumexp(scores, -1)
