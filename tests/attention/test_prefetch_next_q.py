"""Variant bit 13 (attn12): the load lane prefetches the next static tile's Q into L2 after the
current tile's last K/V load (AttnTraits::kPrefetchNextQ). 8201 = 9 + bit 13, 10376 = 2184 + bit
13. A prefetch moves no data the kernel reads through another path: the output must be the base
variant's bit for bit, and within the fp64 reference's tolerance (ragged shapes, several tiles
per CTA, the split tail, a next tile past the end)."""

from __future__ import annotations

import pytest
import torch

from .test_attention_engine import VARIANT_CASES, _check_variant_against_base

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")

PREFETCH = [(8201, True, "9"), (8201, False, "9"), (10376, False, "2184"), (10376, True, "136")]


@pytest.mark.parametrize("variant,causal,base", PREFETCH)
@pytest.mark.parametrize("case", VARIANT_CASES + [(2, 4096, 4096, 16, 16, 128)])
def test_prefetch_matches_reference_and_base(variant, causal, base, case, monkeypatch) -> None:
    _check_variant_against_base(variant, base, causal, case, monkeypatch)
