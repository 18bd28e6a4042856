"""Variant bit 23 (AttnTraits kTimeline, a measurement build): the per-tile phase cycle sums
(benchmarks/attention_timeline.py reads the lines its print kernel writes). The sums are taken
with clock reads and local-memory adds outside the block loop: the output must stay the base
variant's bit for bit — 8784008 = 395400 + bit 23 (128x128), 10127496 = 1738888 + bit 23 (the
128x144 default mainloop with the narrow top block), and the cross-tile walks 10897544 =
2508936 + bit 23, 15075464 = 6686856 + bit 23 (both bit for bit 395400); and bit 24 (the next
tile's coordinates before the epilogue: 17172616, 18516104, and with bit 23 25561224, 26904712),
bit 25 (the static tiles handed to the consumers decoded, through shared memory: 33949832,
35293320, and with bit 23 42338440, 43681928) —
on ragged shapes, GQA and split tails, and
against the float64 reference with poisoned outputs. A causal call with the bit runs 136."""

from __future__ import annotations

import pytest
import torch

from .test_attention_engine import VARIANT_CASES, _check_against_reference
from .test_cross_tile import _inputs, _run

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")

PAIRS = [(8784008, 395400), (10127496, 1738888), (10897544, 395400), (15075464, 395400),
         (17172616, 395400), (18516104, 1738888), (25561224, 395400), (26904712, 1738888),
         (33949832, 395400), (35293320, 1738888), (42338440, 395400), (43681928, 1738888)]
# Beside VARIANT_CASES: 4096 keys (the narrow top block of 64 keys on the 144-key tile), a
# one-block tile walk, and the split tail's pieces of a 3000-key range with GQA.
EXTRA = [(1, 4096, 4096, 8, 8, 128), (2, 1500, 77, 40, 40, 128), (1, 1024, 3000, 36, 12, 128)]


@pytest.mark.parametrize("variant,base", PAIRS)
@pytest.mark.parametrize("case", VARIANT_CASES + EXTRA)
def test_timeline_build_is_its_base_bit_for_bit(case, variant, base, monkeypatch) -> None:
    q, k, v = _inputs(case, hash(case) % 2**31)
    want, want_lse = _run(base, q, k, v, monkeypatch)
    out, lse = _run(variant, q, k, v, monkeypatch)
    torch.cuda.synchronize()
    assert not out.isnan().any() and not lse.isnan().any(), "an unwritten (poisoned) output"
    _check_against_reference(out, lse, q, k, v, False)
    assert torch.equal(out, want) and torch.equal(lse, want_lse), case


@pytest.mark.parametrize("variant", [v for v, _ in PAIRS])
def test_timeline_causal_runs_136(variant, monkeypatch) -> None:
    q, k, v = _inputs((1, 1000, 300, 4, 4, 128), 3)
    want, want_lse = _run(136, q, k, v, monkeypatch, causal=True)
    out, lse = _run(variant, q, k, v, monkeypatch, causal=True)
    assert torch.equal(out, want) and torch.equal(lse, want_lse)
