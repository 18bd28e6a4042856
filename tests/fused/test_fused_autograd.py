"""Autograd of the fused ops and the mkernel.nn layers, on CPU through the host reference
kernels at W = 2 and 4 rank processes (tests/fused/autograd_ranks.py), against torch autograd of
the unfused model."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.launch import run_ranks

RANKS = Path(__file__).with_name("autograd_ranks.py")


@pytest.mark.parametrize("world", [2, 4])
@pytest.mark.parametrize("suite", ["ops", "mlp", "compile"])
def test_autograd_matches_unfused(suite, world):
    results = run_ranks(RANKS.read_text(), world, timeout=180, fork=True,
                        env={"AUTOGRAD_SUITE": suite})
    for r in results:
        detail = f"rank {r.rank} (rc {r.returncode}):\n{r.stdout[-2000:]}\n{r.stderr[-4000:]}"
        assert r.returncode == 0 and f"OK {r.rank}" in r.stdout, detail
