"""The load-balance model behind variant bit 12 (claim_schedule.py; NOTES attn12), CPU only: at
the bench's causal shapes (b*S = 16k, 32 heads, 132 CTAs) the static list leaves the busiest CTA
well above the mean at S >= 8192, a claim made late in each tile (the load lane's last load, a
few KV blocks before the end) brings it under 0.5%, and a claim made at the tile's start (the
hooked kernels' handoff) would be worse than the static list."""

from __future__ import annotations

import math

import pytest

from .claim_schedule import causal_costs, excess, makespan_claimed, makespan_static

GRID = 132


@pytest.mark.parametrize("b,s,static_min", [(2, 8192, 0.012), (1, 16384, 0.018)])
def test_static_list_is_unbalanced_at_long_causal(b: int, s: int, static_min: float) -> None:
    costs = causal_costs(b, s, 32)
    assert excess(makespan_static(costs, GRID), costs, GRID) > static_min


@pytest.mark.parametrize("b,s", [(4, 4096), (2, 8192), (1, 16384)])
@pytest.mark.parametrize("overhead", [0.0, 1.0])
def test_late_claim_balances(b: int, s: int, overhead: float) -> None:
    costs = causal_costs(b, s, 32, overhead=overhead)
    late = excess(makespan_claimed(costs, GRID, lead=3.0), costs, GRID)
    early = excess(makespan_claimed(costs, GRID, lead=math.inf), costs, GRID)
    assert late < 0.005
    assert early > late


def test_claim_model_equals_static_for_equal_tiles() -> None:
    """Equal tiles (non-causal): claiming cannot beat whole rounds; the model gives ceil(n/G)."""
    costs = [32.0] * 4096
    assert makespan_claimed(costs, GRID, lead=3.0) == makespan_static(costs, GRID) == 32.0 * 32
