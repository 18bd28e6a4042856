"""The forward's L2 section budget (tile_scheduler.hpp make_params; MKERNEL_ATTN_L2_SECTION_MB,
a measurement switch): it only reorders the tiles — which (batch, head) pairs run together — so
every budget gives the float64 reference's result on ragged shapes, GQA, causal and not, with
the outputs poisoned; a budget below one head's K/V makes one-head sections. Non-causal calls
without the split tail's pieces in play (tiles <= the grid, or the same tail tiles) would even
match bit for bit; the test holds every budget to the reference instead."""

from __future__ import annotations

import pytest
import torch

from .test_attention_engine import _check_against_reference
from .test_cross_tile import _inputs, _run

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")

# (b, s, s_kv, h, h_kv, d): many tiles per CTA over several heads (sections of 1 .. all heads).
CASES = [(2, 1800, 700, 24, 8, 128), (3, 1000, 1537, 16, 16, 128), (1, 2048, 2048, 40, 5, 64)]


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("budget_mb", [1, 8, 24, 1024])
@pytest.mark.parametrize("case", CASES)
def test_l2_section_budget_keeps_the_result(case, budget_mb, causal, monkeypatch) -> None:
    q, k, v = _inputs(case, hash((case, budget_mb)) % 2**31)
    monkeypatch.setenv("MKERNEL_ATTN_L2_SECTION_MB", str(budget_mb))
    out, lse = _run(0, q, k, v, monkeypatch, causal=causal)
    torch.cuda.synchronize()
    assert not out.isnan().any(), "an unwritten (poisoned) output"
    _check_against_reference(out, lse, q, k, v, causal)


@pytest.mark.parametrize("value", ["0", "-4", "lots"])
def test_l2_section_budget_refuses_a_bad_value(value, monkeypatch) -> None:
    q, k, v = _inputs((1, 256, 256, 2, 2, 128), 1)
    monkeypatch.setenv("MKERNEL_ATTN_L2_SECTION_MB", value)
    with pytest.raises(ValueError, match="MKERNEL_ATTN_L2_SECTION_MB"):
        _run(0, q, k, v, monkeypatch)
