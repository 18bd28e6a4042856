"""Variant bits 19-20 (attn16): the narrow top block, on attn15's 128x144 tile. 690312 = 166024 + bit 19,
952456 = 690312 + bit 18, 1738888 = 690312 + bit 20. A tile's walk starts at the ragged last KV block;
when it holds at most 64 keys, its PV GEMM runs 4 k-steps instead of 9 (bit 19), and with bit 20 its S
GEMM runs as N = 64 wgmmas into an accumulator of its own, with the mask and the online softmax on those
64 columns only and P written into the first 32 values of the PV GEMM's operand. Every other block runs
166024's code.

Checked against the float64 reference with poisoned outputs on KV lengths whose top block is narrow
(remainders 1, 12, 64 of 144; a tile of one narrow block; pieces of the split tail that hold only
the narrow block, so the tile's *last* PV GEMM is the narrow one) and controls whose top block is not
(remainders 65, 113, 0), GQA / MQA, several tiles per CTA; within rounding of 166024 (expected bit
for bit: the dropped k-steps add exact zeros, an N = 64 wgmma computes its columns as the N = 144 one
does, and the narrow softmax's max and sum skip only -inf columns, which add nothing —
test_narrow_top_bit_for_bit_166024 records whether that holds). A causal call
runs 136, bit for bit."""

from __future__ import annotations

import pytest
import torch

import mkernel

from .test_attention_engine import VARIANT_CASES, _check_against_reference, _poison_allocator
from .test_lazy_rescale import _inputs

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")

BASE = 166024     # 34952 + bit 17: 128x144, K 2 + V 3, lazy O rescale, split tail
NARROW = 690312   # BASE + bit 19
NARROW_LEAD = 952456  # NARROW + bit 18 (only warpgroup 0 waits on K / V)
NARROW_S = 1738888    # NARROW + bit 20 (the top block's S GEMM and softmax on its 64 columns too)
VARIANTS = [NARROW, NARROW_LEAD, NARROW_S]
KEYS = 144

# (b, s, s_kv, h, h_kv, d); the comment gives s_kv's remainder mod 144 (<= 64: narrow top block).
NARROW_CASES = [
    (1, 4096, 4096, 8, 8, 128),     # 64: the bench's length
    (1, 1024, 2944, 36, 12, 128),   # 64: 288 tiles on 132 SMs: the split tail's top piece is narrow
    (1, 1024, 208, 36, 12, 128),    # 64: 2 blocks, tail pieces of 1 block: the last PV is narrow
    (2, 300, 145, 4, 2, 128),       # 1: one key in the top block
    (1, 200, 64, 4, 4, 128),        # 64: a single, narrow block (first and last PV the same)
    (2, 1800, 300, 24, 8, 128),     # 12: 720 tiles, several per CTA (the rings wrap)
    (1, 333, 1, 4, 1, 128),         # 1: MQA, one key
]
CONTROL_CASES = [
    (1, 1024, 4097, 8, 8, 128),     # 65: one key past the narrow bound
    (3, 255, 257, 6, 3, 128),       # 113
    (1, 512, 2880, 8, 4, 128),      # 0: every block whole
]


def _run(variant, q, k, v, monkeypatch, causal=False, poison=True):
    monkeypatch.setenv("MKERNEL_ATTN_VARIANT", str(variant))
    if poison:
        _poison_allocator()
    return mkernel.attention(q, k, v, causal=causal)


def _rel(a, b) -> float:
    return ((a.double() - b.double()).norm() / b.double().norm().clamp_min(1e-30)).item()


def test_cases_cover_narrow_and_whole_top_blocks() -> None:
    """The case lists hold what their comments claim (no GPU arithmetic needed for this)."""
    assert all(0 < c[2] % KEYS <= 64 for c in NARROW_CASES)
    assert all(c[2] % KEYS > 64 or c[2] % KEYS == 0 for c in CONTROL_CASES)


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("case", NARROW_CASES + CONTROL_CASES + VARIANT_CASES)
def test_narrow_top_matches_reference(variant, case, monkeypatch) -> None:
    q, k, v = _inputs(case, hash((case, variant, 16)) % 2**31)
    base, base_lse = _run(BASE, q, k, v, monkeypatch, poison=False)
    out, lse = _run(variant, q, k, v, monkeypatch)
    assert not out.isnan().any() and not lse.isnan().any(), "an unwritten (poisoned) output"
    _check_against_reference(out, lse, q, k, v, False)
    rel = _rel(out, base)
    assert rel < 1e-3, f"relative difference to {BASE}: {rel}"
    assert torch.allclose(lse, base_lse, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("case", NARROW_CASES[:3] + CONTROL_CASES[:1])
def test_narrow_top_bit_for_bit_166024(case, monkeypatch) -> None:
    """Expected, not required by the decision rule: the narrow GEMMs compute the same values (an
    N = 64 wgmma's columns as the N = 144 one's, the PV k-steps dropped add exact zeros), so the
    output is 166024's bit for bit; 952456 (bit 18 changes no arithmetic) equals 690312."""
    q, k, v = _inputs(case, hash((case, 1600)) % 2**31)
    base, base_lse = _run(BASE, q, k, v, monkeypatch, poison=False)
    outs = {var: _run(var, q, k, v, monkeypatch) for var in VARIANTS}
    lead, lead_lse = outs[NARROW_LEAD]
    out, lse = outs[NARROW]
    assert torch.equal(lead, out) and torch.equal(lead_lse, lse), "bit 18 changed arithmetic"
    for var, (o, l) in outs.items():
        assert torch.equal(o, base) and torch.equal(l, base_lse), (
            f"{var} not bit for bit {BASE}: rel {_rel(o, base):.3e}, lse max diff "
            f"{(l - base_lse).abs().max().item():.3e}")


@pytest.mark.parametrize("q_gain,k_ramp", [(4.0, 0.0), (1.0, 60.0)])
def test_narrow_top_with_climbing_maxima(q_gain, k_ramp, monkeypatch) -> None:
    """Peaked scores, and the largest scores at the keys met last (the narrow top block is met
    first: its max is stale for the rest of the walk, the lazy rescale's branch taken later)."""
    case = (2, 1024, 2944, 8, 4, 128)
    q, k, v = _inputs(case, 1900 + int(q_gain * 10 + k_ramp), q_gain, k_ramp)
    base, base_lse = _run(BASE, q, k, v, monkeypatch, poison=False)
    for variant in VARIANTS:
        out, lse = _run(variant, q, k, v, monkeypatch)
        _check_against_reference(out, lse, q, k, v, False)
        assert _rel(out, base) < 1e-3
        assert torch.allclose(lse, base_lse, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("variant", VARIANTS)
def test_narrow_top_causal_runs_136(variant, monkeypatch) -> None:
    """Bit 19 is built non-causal: a causal call runs 136 (128x128), bit for bit."""
    q, k, v = _inputs((2, 1800, 700, 24, 8, 128), 2000 + variant % 97)
    want, want_lse = _run(136, q, k, v, monkeypatch, causal=True, poison=False)
    out, lse = _run(variant, q, k, v, monkeypatch, causal=True)
    assert torch.equal(out, want) and torch.equal(lse, want_lse)


def test_narrow_top_back_to_back_reuses_outputs(monkeypatch) -> None:
    """Two calls in a row into the poisoned, reused allocator blocks (fresh inputs each): the
    second call's output is its own."""
    outs = []
    for seed in range(2):
        q, k, v = _inputs((2, 1800, 2944, 8, 8, 128), 2100 + seed)
        out, lse = _run(NARROW_S if seed else NARROW, q, k, v, monkeypatch)
        _check_against_reference(out, lse, q, k, v, False)
        outs.append(out.clone())
        del out, lse
    assert not torch.equal(outs[0], outs[1])
