"""Differential fuzz of mkernel.attention (forward, backward, and lse's gradient) against a
float64 reference, on problems drawn from a seed (problems.py): ragged and tile-edge lengths,
s != s_kv (causal rows that see no key), GQA / MQA, every head dim the op takes, both dtypes,
softmax scales and input magnitudes away from 1. Outputs are poisoned first (the caching
allocator's free blocks filled with NaN).

Criteria, those of tests/attention (proven on the engine's fixed cases), per problem:
- out: max error within 2x the low-precision reference's (the same math in q's dtype) + 1e-3,
  relative error < 1e-2 overall and < 3e-2 in every (batch, head) slice (a wrong head or batch
  shows up even when the whole tensor's norm hides it), rows with no key exactly 0;
- lse: the same -inf rows, values within 1e-3 (relative and absolute);
- dq / dk / dv for the loss <out, dO> (+ <lse, dlse> for ``lse_grad`` problems) against float64
  autograd: relative error < 2e-2 overall and < 5e-2 in every (batch, head) slice with a
  reference norm above 1e-3 of the tensor's largest slice.
"""

from __future__ import annotations

import pytest
import torch

import mkernel
from tests.attention.reference import attention_ref, lse_ref, softmax_ref

from .conftest import DEVICE, SEED, poison as _poison
from .problems import AttentionProblem, attention_problems, fuzz_count

DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}
PROBLEMS = attention_problems(SEED, fuzz_count(DEVICE, 48, 6), DEVICE)


def _inputs(p: AttentionProblem, idx: int):
    gen = torch.Generator(device=DEVICE).manual_seed(SEED * 100_003 + idx)
    dt = DTYPES[p.dtype]

    def draw(*shape):
        return (torch.randn(*shape, device=DEVICE, generator=gen) * p.amp).to(dt)

    q, k, v = draw(p.b, p.s, p.h, p.d), draw(p.b, p.s_kv, p.h_kv, p.d), draw(p.b, p.s_kv, p.h_kv, p.d)
    dout = torch.randn(p.b, p.s, p.h, p.d, device=DEVICE, generator=gen).to(dt)
    dlse = torch.randn(p.b, p.h, p.s, device=DEVICE, generator=gen) if p.lse_grad else None
    return q, k, v, dout, dlse


def _slice_rel(err: torch.Tensor, ref: torch.Tensor, heads_dim: int) -> tuple[float, tuple]:
    """The worst relative error over (batch, head) slices whose reference norm is above 1e-3 of
    the largest slice's (a slice that is ~0 in the reference is checked by the overall bound)."""
    e = err.movedim(heads_dim, 1).flatten(2).norm(dim=2)
    r = ref.movedim(heads_dim, 1).flatten(2).norm(dim=2)
    live = r > 1e-3 * r.max().clamp_min(1e-300)
    rel = torch.where(live, e / r.clamp_min(1e-300), torch.zeros_like(e))
    worst = int(rel.argmax())
    return rel.flatten()[worst].item(), divmod(worst, rel.shape[1])


@pytest.mark.parametrize("idx", range(len(PROBLEMS)), ids=[p.id for p in PROBLEMS])
def test_attention_fuzz(idx: int) -> None:
    p = PROBLEMS[idx]
    scale = p.scale if p.scale is not None else p.d ** -0.5
    q, k, v, dout, dlse = _inputs(p, idx)
    qg, kg, vg = (x.clone().requires_grad_() for x in (q, k, v))
    _poison()
    out, lse = mkernel.attention(qg, kg, vg, causal=p.causal, softmax_scale=p.scale)
    assert out.shape == q.shape and out.dtype == q.dtype and lse.shape == (p.b, p.h, p.s)
    assert lse.dtype == torch.float32

    # Forward against float64 and the low-precision reference's own error.
    ref, ref_lse = attention_ref(q, k, v, p.causal, scale)
    o = out.detach().double()
    assert not torch.isnan(o).any(), "NaN in out (an unwritten tile?)"
    err = (o - ref).abs().max().item()
    if q.dtype != torch.float32:
        lowp, _ = attention_ref(q, k, v, p.causal, scale, dtype=q.dtype)
        lowp_err = (lowp.double() - ref).abs().max().item()
        assert err <= 2 * lowp_err + 1e-3, f"out: max error {err:.3g} vs low precision {lowp_err:.3g}"
    rel = ((o - ref).norm() / ref.norm().clamp_min(1e-30)).item()
    assert rel < 1e-2, f"out: relative error {rel:.3g}"
    worst, where = _slice_rel(o - ref, ref, 2)
    assert worst < 3e-2, f"out: relative error {worst:.3g} in (batch, head) {where}"
    finite = torch.isfinite(ref_lse)
    assert torch.equal(torch.isfinite(lse.detach()), finite), "lse: the -inf rows differ"
    assert torch.equal(o[~finite.transpose(1, 2)], torch.zeros_like(o[~finite.transpose(1, 2)])), \
        "out: rows that see no key are not 0"
    lse_err = (lse.detach().double()[finite] - ref_lse[finite]).abs()
    assert bool((lse_err <= 1e-3 + 1e-3 * ref_lse[finite].abs()).all()), \
        f"lse: max error {lse_err.max().item():.3g}"

    # Backward against float64: the exact gradients, and the same formulas with delta =
    # rowsum(dO ∘ O) read from out rounded to q's dtype, which is what every flash-style backward
    # reads: with a peaked softmax (dP_j ≈ delta for the dominant key) that rounding alone moves
    # dq / dk by far more than 2e-2, so the bound grows by twice that inherent error.
    w = dlse.masked_fill(~finite, 0.0) if dlse is not None else None
    total = (out.float() * dout.float()).sum()
    if w is not None:
        total = total + (lse * w).sum()
    grads = torch.autograd.grad(total, (qg, kg, vg))
    exact = _grads64(q, k, v, dout, w, p.causal, scale, ref)
    rounded = _grads64(q, k, v, dout, w, p.causal, scale, ref.to(q.dtype).double())
    # The formulas on absolute values: the size of the terms that cancel. Where the exact gradient
    # is ~0 by cancellation (a row with one visible key has dS = 0), any kernel's rounding is a few
    # ulps of these, not of the gradient.
    magnitude = _grads64(q, k, v, dout, w, p.causal, scale, ref, absolute=True)
    eps = torch.finfo(q.dtype).eps
    for name, g, r, rr, mag in zip("qkv", grads, exact, rounded, magnitude):
        gd = g.double()
        assert not torch.isnan(gd).any(), f"d{name}: NaN"
        err = _slices(gd - r, 2)
        ref_n, inh, floor = _slices(r, 2), _slices(rr - r, 2), 4 * eps * _slices(mag, 2)
        total_ok = err.norm() <= (2e-2 * ref_n.norm() + 2 * inh.norm() + floor.norm())
        assert total_ok, (f"d{name}: error {err.norm():.3g} vs reference {ref_n.norm():.3g} "
                          f"(inherent {inh.norm():.3g}, rounding floor {floor.norm():.3g})")
        bound = 5e-2 * ref_n + 2 * inh + floor
        bad = err > bound
        if bad.any():
            i = int((err - bound).argmax())
            where = divmod(i, err.shape[1])
            pytest.fail(f"d{name}: (batch, head) {where}: error {err.flatten()[i]:.3g} > bound "
                        f"{bound.flatten()[i]:.3g} (reference {ref_n.flatten()[i]:.3g})")


def _slices(x: torch.Tensor, heads_dim: int) -> torch.Tensor:
    """[b, heads]: the norm of each (batch, head) slice."""
    return x.movedim(heads_dim, 1).flatten(2).norm(dim=2)


def _grads64(q, k, v, dout, w, causal: bool, scale: float, o_used: torch.Tensor,
             absolute: bool = False):
    """dq, dk, dv of <out, dO> + <lse, w> in float64 by the attention backward's formulas: P =
    softmax(scale·QKᵀ), dV = Pᵀ·dO, dS = P ∘ (dO·Vᵀ − rowsum(dO ∘ o_used) + w), dQ = scale·dS·K,
    dK = scale·dSᵀ·Q (``∂lse/∂S = P``); GQA gradients summed over each kv head's query heads.
    With o_used the exact output these are the exact gradients (test_grads64_is_autograd).
    ``absolute``: every operand and term by its absolute value (no cancellation)."""
    h, h_kv = q.shape[2], k.shape[2]
    g = h // h_kv
    pm, _ = softmax_ref(q, k, causal, scale)
    qd, kd, vd = (x.double().permute(0, 2, 1, 3) for x in (q, k, v))
    kd, vd = kd.repeat_interleave(g, dim=1), vd.repeat_interleave(g, dim=1)
    do, od = dout.double().permute(0, 2, 1, 3), o_used.double().permute(0, 2, 1, 3)
    if absolute:
        qd, kd, vd, do, od = (x.abs() for x in (qd, kd, vd, do, od))
    delta = (do * od).sum(-1, keepdim=True)
    if w is not None:
        delta = delta + w.double().abs().unsqueeze(-1) if absolute else delta - w.double().unsqueeze(-1)
    ds = pm * (do @ vd.transpose(-2, -1) + delta if absolute else do @ vd.transpose(-2, -1) - delta)
    dq = (ds @ kd) * scale
    dk = (ds.transpose(-2, -1) @ qd) * scale
    dv = pm.transpose(-2, -1) @ do
    dk, dv = (x.unflatten(1, (h_kv, g)).sum(2) for x in (dk, dv))
    return tuple(x.permute(0, 2, 1, 3) for x in (dq, dk, dv))


def test_grads64_is_autograd() -> None:
    """The fuzz's gradient formulas against float64 autograd through attention_ref (GQA, causal
    with rows that see no key, an lse term)."""
    gen = torch.Generator().manual_seed(3)
    q, dout = torch.randn(2, 9, 4, 8, generator=gen), torch.randn(2, 9, 4, 8, generator=gen)
    k, v = torch.randn(2, 5, 2, 8, generator=gen), torch.randn(2, 5, 2, 8, generator=gen)
    w = torch.randn(2, 4, 9, generator=gen)
    q64, k64, v64 = (x.double().requires_grad_() for x in (q, k, v))
    out, lse = attention_ref(q64, k64, v64, True, 0.3)
    w = w.masked_fill(torch.isneginf(lse.detach()), 0.0)
    total = (out * dout.double()).sum() + (lse_ref(q64, k64, True, 0.3) * w.double()).sum()
    want = torch.autograd.grad(total, (q64, k64, v64))
    got = _grads64(q, k, v, dout, w, True, 0.3, out.detach())
    for a, b in zip(got, want):
        assert torch.allclose(a, b, rtol=1e-10, atol=1e-12)
