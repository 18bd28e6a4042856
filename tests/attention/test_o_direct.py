"""Variant bit 14 (attn13): the epilogue stores O from registers straight to global
(AttnTraits::kODirect) instead of through the V stage of the tile's last block and a TMA store;
that stage goes back to the producer right after the tile's last PV GEMM. 18568 = 2184 + bit 14
(a causal call runs 136 + bit 14). The same bf16 values go to the same addresses: the output must
be the base variant's bit for bit, and within the fp64 reference's tolerance — ragged shapes
(rows past seq_q must stay unwritten: the poisoned allocator shows a stray or missing store),
GQA, several tiles per CTA, the split tail's pieces (they keep their fp32 workspace path), rows
that see no key (causal)."""

from __future__ import annotations

import pytest
import torch

import mkernel

from .test_attention_engine import (VARIANT_CASES, _check_against_reference,
                                    _check_variant_against_base, _poison_allocator)

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")

# 22664 = 6280 + bit 14: claimed tiles (the causal default's mainloop, 136 claimed, with bit 14);
# its base, 6280, is bit for bit 2184 / 136 (test_claimed_tiles.py).
O_DIRECT = [(18568, False, "2184"), (18568, True, "136"), (22664, True, "136"), (22664, False, "2184")]


@pytest.mark.parametrize("variant,causal,base", O_DIRECT)
@pytest.mark.parametrize("case", VARIANT_CASES + [(2, 4096, 4096, 16, 16, 128)])
def test_o_direct_matches_reference_and_base(variant, causal, base, case, monkeypatch) -> None:
    _check_variant_against_base(variant, base, causal, case, monkeypatch)


def test_o_direct_back_to_back_reuses_outputs(monkeypatch) -> None:
    """Two calls in a row into the poisoned, reused allocator blocks: the second call's output
    (fresh inputs) is its own, not the first call's left in place."""
    monkeypatch.setenv("MKERNEL_ATTN_VARIANT", "18568")
    gen = torch.Generator(device="cuda").manual_seed(1314)
    outs = []
    for _ in range(2):
        q, k, v = (torch.randn(2, 1800, 8, 128, device="cuda", dtype=torch.bfloat16, generator=gen)
                   for _ in range(3))
        _poison_allocator()
        out, lse = mkernel.attention(q, k, v, causal=False)
        _check_against_reference(out, lse, q, k, v, False)
        outs.append(out.clone())
        del out, lse
    assert not torch.equal(outs[0], outs[1])
