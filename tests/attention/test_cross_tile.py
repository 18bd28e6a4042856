"""Variant bits 21-22 (attn17): cross-tile overlap on 395400's mainloop (128x128, O in a V stage,
the split tail, bits 17-18), non-causal: 2492552 (Q double-buffered: K 2 + V 3 stages) and 6686856
(+ bit 22: one Q stage, released in the tile's last block step; K 3 + V 3), and both with bit 14
(O from registers, no meet in the epilogue): 2508936, 6703240. At a tile's end the
next tile's first S GEMM is issued in the turn of this tile's last PV GEMM and its softmax runs
under it (a second softmax state); the consumers walk the CTA's whole static tile sequence in one
call (mainloop mma_stream).

The same blocks in the same order with the same arithmetic as 395400: bit for bit its output, on
one tile per CTA and on many (the boundary carried tile after tile, the rings wrapping across
tiles), ragged KV tails (a carried first block that masks), a single KV block per tile (every
turn is a boundary), GQA / MQA, the split tail's pieces (pieces carried into pieces), rows past
seq_q; and against the float64 reference with poisoned outputs. A causal call with the bit runs
136."""

from __future__ import annotations

import pytest
import torch

import mkernel

from .test_attention_engine import VARIANT_CASES, _check_against_reference, _poison_allocator

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")

CROSS = 2492552  # 395400 + bit 21
CROSS_ONE_Q = 6686856  # CROSS + bit 22
CROSS_ODIRECT = 2508936  # CROSS + bit 14 (O from registers)
CROSS_ONE_Q_ODIRECT = 6703240  # CROSS_ONE_Q + bit 14
CROSS_ALL = [CROSS, CROSS_ONE_Q, CROSS_ODIRECT, CROSS_ONE_Q_ODIRECT]
BASE = 395400
# Beside VARIANT_CASES: 4096 keys (32 KV blocks a tile; the bench's b = 4, h = 32 would need a
# 16 GiB float64 reference), one KV block per tile over many tiles per CTA (every turn a
# boundary), a ragged one-block walk, the split tail's pieces of a 3000-key range, and MQA with a
# 1-key tail block.
EXTRA = [(1, 4096, 4096, 8, 8, 128), (2, 2000, 128, 64, 8, 128), (3, 1500, 77, 40, 40, 128),
         (1, 1024, 3000, 36, 12, 128), (1, 1000, 4097, 17, 1, 128)]


def _inputs(case, seed):
    b, s, s_kv, h, h_kv, d = case
    gen = torch.Generator(device="cuda").manual_seed(seed)
    return tuple(torch.randn(b, n, hh, d, device="cuda", dtype=torch.bfloat16, generator=gen)
                 for n, hh in ((s, h), (s_kv, h_kv), (s_kv, h_kv)))


def _run(variant, q, k, v, monkeypatch, causal=False):
    monkeypatch.setenv("MKERNEL_ATTN_VARIANT", str(variant))
    _poison_allocator()
    return mkernel.attention(q, k, v, causal=causal)


@pytest.mark.parametrize("variant", CROSS_ALL)
@pytest.mark.parametrize("case", VARIANT_CASES + EXTRA)
def test_cross_tile_is_the_base_bit_for_bit(case, variant, monkeypatch) -> None:
    q, k, v = _inputs(case, hash(case) % 2**31)
    want, want_lse = _run(BASE, q, k, v, monkeypatch)
    out, lse = _run(variant, q, k, v, monkeypatch)
    assert not out.isnan().any() and not lse.isnan().any(), "an unwritten (poisoned) output"
    _check_against_reference(out, lse, q, k, v, False)
    assert torch.equal(out, want) and torch.equal(lse, want_lse), case


def test_cross_tile_back_to_back_and_after_other_kernels(monkeypatch) -> None:
    """Calls in a row on one stream (the launch's barriers and Q stages start fresh each time),
    with another variant's launch between them: the same output each time."""
    q, k, v = _inputs((2, 1800, 700, 24, 8, 128), 5)
    first, first_lse = _run(CROSS, q, k, v, monkeypatch)
    for variant in (BASE, *CROSS_ALL, BASE, *reversed(CROSS_ALL)):
        out, lse = _run(variant, q, k, v, monkeypatch)
        assert torch.equal(out, first) and torch.equal(lse, first_lse), variant


@pytest.mark.parametrize("variant", CROSS_ALL)
def test_cross_tile_causal_runs_136(variant, monkeypatch) -> None:
    q, k, v = _inputs((1, 1000, 300, 4, 4, 128), 11)
    want, want_lse = _run(136, q, k, v, monkeypatch, causal=True)
    out, lse = _run(variant, q, k, v, monkeypatch, causal=True)
    assert torch.equal(out, want) and torch.equal(lse, want_lse)
