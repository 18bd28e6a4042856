"""Variant bits 15-16 (attn14): the non-causal kernel on longer KV blocks — 2184's mainloop (O in
the V stage of the tile's last block, the split tail) on 128x144 (34952, K 2 + V 3 stages),
128x160 (67720, K 2 + V 2) and 128x176 (100488, K 2 + V 2; FA3's d = 128 non-causal tile), each
with one S-GEMM wgmma of N = kBlockN per k-step (CuTe's extended shapes). Another block partition
than 2184's, so another summation order: checked against the float64 reference (poisoned
outputs, ragged KV tails that end inside a block, GQA, several tiles per CTA, a split tail whose
pieces start inside the key range), and within rounding of 2184. A causal call runs 136 on the
128x128 tile: bit for bit that variant."""

from __future__ import annotations

import pytest
import torch

import mkernel

from .test_attention_engine import (VARIANT_CASES, _check_against_reference, _poison_allocator)

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")

WIDE = [34952, 67720, 100488]  # 128x144, 128x160, 128x176
# Beside VARIANT_CASES: the bench shape's KV length (4096 = 23.3 blocks of 176: a ragged top
# block), and 288 tiles on 132 SMs (2 rounds + 24 tiles: the split tail cuts each of the 24
# into 5 pieces of a 3000-key range that ends inside a block; GQA 36 / 12).
EXTRA = [(1, 4096, 4096, 8, 8, 128), (1, 1024, 3000, 36, 12, 128)]


def _inputs(case, seed):
    b, s, s_kv, h, h_kv, _ = case
    gen = torch.Generator(device="cuda").manual_seed(seed)
    return tuple(torch.randn(b, n, hh, 128, device="cuda", dtype=torch.bfloat16, generator=gen)
                 for n, hh in ((s, h), (s_kv, h_kv), (s_kv, h_kv)))


@pytest.mark.parametrize("variant", WIDE)
@pytest.mark.parametrize("case", VARIANT_CASES + EXTRA)
def test_wide_kv_matches_reference(variant, case, monkeypatch) -> None:
    q, k, v = _inputs(case, hash((case, variant)) % 2**31)
    monkeypatch.setenv("MKERNEL_ATTN_VARIANT", "2184")
    base, base_lse = mkernel.attention(q, k, v, causal=False)
    monkeypatch.setenv("MKERNEL_ATTN_VARIANT", str(variant))
    _poison_allocator()
    out, lse = mkernel.attention(q, k, v, causal=False)
    assert not out.isnan().any() and not lse.isnan().any(), "an unwritten (poisoned) output"
    _check_against_reference(out, lse, q, k, v, False)
    # Within bf16 rounding of 2184 (the same math, blocks summed in another grouping).
    rel = ((out.double() - base.double()).norm() / base.double().norm().clamp_min(1e-30)).item()
    assert rel < 1e-2, f"relative difference to 2184: {rel}"
    assert torch.allclose(lse, base_lse, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("variant", WIDE)
def test_wide_kv_causal_runs_136(variant, monkeypatch) -> None:
    """The bits are non-causal only: a causal call runs 136 (128x128), bit for bit."""
    q, k, v = _inputs((2, 1800, 700, 24, 8, 128), 1400 + variant % 97)
    monkeypatch.setenv("MKERNEL_ATTN_VARIANT", "136")
    want, want_lse = mkernel.attention(q, k, v, causal=True)
    monkeypatch.setenv("MKERNEL_ATTN_VARIANT", str(variant))
    _poison_allocator()
    out, lse = mkernel.attention(q, k, v, causal=True)
    assert torch.equal(out, want) and torch.equal(lse, want_lse)


def test_wide_kv_back_to_back_reuses_outputs(monkeypatch) -> None:
    """Two calls in a row into the poisoned, reused allocator blocks: the second call's output
    (fresh inputs) is its own, not the first call's left in place."""
    monkeypatch.setenv("MKERNEL_ATTN_VARIANT", "100488")
    outs = []
    for seed in range(2):
        q, k, v = _inputs((2, 1800, 1800, 8, 8, 128), 1414 + seed)
        _poison_allocator()
        out, lse = mkernel.attention(q, k, v, causal=False)
        _check_against_reference(out, lse, q, k, v, False)
        outs.append(out.clone())
        del out, lse
    assert not torch.equal(outs[0], outs[1])


def _wide_default() -> tuple[int, int]:
    """(kDefaultWideKvNonCausal, kDefaultWideKvMinSeqKv) as attention_api.h sets them (a flip is
    one line there; this test follows it)."""
    import re
    from pathlib import Path
    text = (Path(__file__).resolve().parents[2] / "csrc" / "kernels" / "attention" / "attention_api.h").read_text()
    var = int(re.search(r"kDefaultWideKvNonCausal = (\d+);", text).group(1))
    min_kv = int(re.search(r"kDefaultWideKvMinSeqKv = (\d+);", text).group(1))
    return var, min_kv


def test_default_route_from_the_threshold(monkeypatch) -> None:
    """kDefaultWideKvNonCausal (1738888 since session 17, attention_api.h; read from the header): a
    default bf16 d=128 non-causal call with >= kDefaultWideKvMinSeqKv keys (4096 since session 17;
    ragged: the top block ends inside) runs that variant — the same bits as the variant forced —
    and matches the float64 reference; a call below the threshold stays on 2184."""
    wide, min_kv = _wide_default()
    assert wide != 0, "no wide default set: this test checks its route"
    case = (1, 640, min_kv + 40, 8, 8, 128)
    q, k, v = _inputs(case, 8233)
    monkeypatch.setenv("MKERNEL_ATTN_VARIANT", str(wide))
    forced, forced_lse = mkernel.attention(q, k, v, causal=False)
    monkeypatch.delenv("MKERNEL_ATTN_VARIANT", raising=False)
    _poison_allocator()
    out, lse = mkernel.attention(q, k, v, causal=False)
    assert not out.isnan().any() and not lse.isnan().any(), "an unwritten (poisoned) output"
    _check_against_reference(out, lse, q, k, v, False)
    assert torch.equal(out, forced) and torch.equal(lse, forced_lse), f"the default route is not {wide}"
    short = (1, 640, min_kv // 2 + 40, 8, 8, 128)  # below the threshold: 2184
    q, k, v = _inputs(short, 4137)
    monkeypatch.setenv("MKERNEL_ATTN_VARIANT", "2184")
    want, want_lse = mkernel.attention(q, k, v, causal=False)
    monkeypatch.delenv("MKERNEL_ATTN_VARIANT", raising=False)
    got, got_lse = mkernel.attention(q, k, v, causal=False)
    assert torch.equal(got, want) and torch.equal(got_lse, want_lse), f"below {min_kv} keys the default is not 2184"
