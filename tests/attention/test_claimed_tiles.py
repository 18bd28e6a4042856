"""Variant bit 12 (attn12): the plain bf16 d=128 kernel with claimed tiles (each CTA claims its
next tile from a per-call counter once its load lane has issued the current tile's last load;
attention_api.h kClaimTilesBit, ClaimTilesHooks). 4105 = 9 + bit 12, 6280 = 2184 + bit 12.

The tiles and their arithmetic are the base variant's, only their CTA changes: the output must be
the base variant's bit for bit (which also shows every tile ran exactly once: a skipped tile
leaves the poisoned NaN, a tile run twice by two CTAs writes the same bits), and within the fp64
reference's tolerance. The counter is zeroed by the launch itself: back-to-back calls (the
caching allocator hands back the same counter, left at its past-the-end value) and CUDA graph
replays must give the same result again."""

from __future__ import annotations

import pytest
import torch

import mkernel

from .reference import attention_ref
from .test_attention_engine import VARIANT_CASES, _check_against_reference, _poison_allocator

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")

# (claimed variant, causal, base variant it must equal bit for bit)
CLAIMED = [(4105, True, "9"), (4105, False, "9"), (6280, False, "2184"), (6280, True, "136")]


def _inputs(b, s, s_kv, h, h_kv, seed):
    gen = torch.Generator(device="cuda").manual_seed(seed)
    return tuple(torch.randn(b, n, hh, 128, device="cuda", dtype=torch.bfloat16, generator=gen)
                 for n, hh in ((s, h), (s_kv, h_kv), (s_kv, h_kv)))


@pytest.mark.parametrize("variant,causal,base", CLAIMED)
@pytest.mark.parametrize("case", VARIANT_CASES)
def test_claimed_matches_reference_and_base(variant, causal, base, case, monkeypatch) -> None:
    """Ragged shapes, GQA/MQA, s != s_kv both ways, rows that see no key, 720 tiles (several per
    CTA; causal: empty tiles between full ones): fp64 reference, and the base variant bit for bit."""
    b, s, s_kv, h, h_kv, _ = case
    q, k, v = _inputs(b, s, s_kv, h, h_kv, hash((case, causal, variant)) % 2**31)
    monkeypatch.setenv("MKERNEL_ATTN_VARIANT", base)
    want, want_lse = mkernel.attention(q, k, v, causal=causal)
    monkeypatch.setenv("MKERNEL_ATTN_VARIANT", str(variant))
    _poison_allocator()
    out, lse = mkernel.attention(q, k, v, causal=causal)
    _check_against_reference(out, lse, q, k, v, causal)
    assert torch.equal(out, want) and torch.equal(lse, want_lse)


@pytest.mark.parametrize("variant,causal,base", CLAIMED)
def test_claimed_long_schedules_bit_for_bit(variant, causal, base, monkeypatch) -> None:
    """The bench's kind of schedule (thousands of tiles of unequal length when causal, L2
    sections, the split tail non-causal) and a GQA one, three calls in a row on the reused
    counter: each the base variant's output bit for bit, outputs poisoned before each call."""
    for seed, (b, s, h, h_kv) in enumerate([(2, 4096, 16, 16), (1, 8192, 4, 1), (1, 3000, 33, 11)]):
        q, k, v = _inputs(b, s, s, h, h_kv, 500 + seed)
        monkeypatch.setenv("MKERNEL_ATTN_VARIANT", base)
        want, want_lse = mkernel.attention(q, k, v, causal=causal)
        monkeypatch.setenv("MKERNEL_ATTN_VARIANT", str(variant))
        for _ in range(3):
            _poison_allocator()
            out, lse = mkernel.attention(q, k, v, causal=causal)
            assert torch.equal(out, want) and torch.equal(lse, want_lse), (b, s, h, h_kv)
            del out, lse


@pytest.mark.parametrize("variant,causal", [(4105, True), (6280, False)])
def test_claimed_cuda_graph_replay(variant, causal, monkeypatch) -> None:
    """Captured with its counter memset: every replay starts the claims from zero again."""
    monkeypatch.setenv("MKERNEL_ATTN_VARIANT", str(variant))
    q, k, v = _inputs(1, 1800, 1800, 24, 8, 77)  # 360 tiles: several per CTA, a split tail
    mkernel.attention(q, k, v, causal=causal)  # warm-up outside the capture
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out, lse = mkernel.attention(q, k, v, causal=causal)
    gen = torch.Generator(device="cuda").manual_seed(78)
    for _ in range(3):  # new inputs in the captured buffers, then replay
        for x in (q, k, v):
            x.copy_(torch.randn(x.shape, device="cuda", dtype=x.dtype, generator=gen))
        out.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        ref, ref_lse = attention_ref(q, k, v, causal)
        assert not torch.isnan(out).any(), "a tile did not run in the replay"
        assert ((out.double() - ref).norm() / ref.norm()).item() < 1e-2
        assert torch.allclose(lse.double(), ref_lse, rtol=1e-3, atol=1e-3)


def test_claimed_variant_refused_where_not_built(monkeypatch) -> None:
    """The claimed variants are bf16 d=128 128x128 plain kernels like every variant: other calls
    ignore the switch (fp16 here), and an unbuilt bit-12 number is refused."""
    q = torch.randn(1, 256, 2, 128, device="cuda", dtype=torch.bfloat16)
    monkeypatch.setenv("MKERNEL_ATTN_VARIANT", "4104")
    with pytest.raises(ValueError, match="variant"):
        mkernel.attention(q, q, q)
    monkeypatch.setenv("MKERNEL_ATTN_VARIANT", "4105")
    out, _ = mkernel.attention(q.half(), q.half(), q.half(), causal=True)
    ref, _ = attention_ref(q.half(), q.half(), q.half(), True)
    assert ((out.double() - ref).norm() / ref.norm()).item() < 1e-2
