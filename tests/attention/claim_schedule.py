"""Makespan model of the causal tile schedule (attn12, variant bit 12): the static list of
tile_scheduler.hpp (CTA c runs linear tiles c, c + G, c + 2G, ...) against claimed tiles
(ClaimTilesHooks: each CTA claims its next tile `lead` KV blocks before it finishes the current
one) and the hooked kernels' early claim (at the start of the current tile). A tile of query
block m (bottom-right causal, s == s_kv, 128x128) costs m + 1 KV blocks plus `overhead`. The
linear order is split_tail_plan.get_linear's, query blocks last to first (kLongestFirst)."""

from __future__ import annotations

import heapq

from .split_tail_plan import L2_BUDGET_WIDE, get_linear, section_bh


def causal_costs(b: int, s: int, h: int, d: int = 128, overhead: float = 0.0) -> list[float]:
    """Cost (in KV blocks) of each tile of the linear longest-first order."""
    m_blocks = -(-s // 128)
    sec = section_bh(h, b, s, d, budget=L2_BUDGET_WIDE)  # causal: the wide sections
    costs = []
    for t in range(m_blocks * h * b):
        m, _, _ = get_linear(t, m_blocks, h, b, sec)
        costs.append(m_blocks - 1 - m + 1 + overhead)  # kLongestFirst: m -> m_blocks - 1 - m
    return costs


def makespan_static(costs: list[float], grid: int) -> float:
    return max(sum(costs[c::grid]) for c in range(grid))


def makespan_claimed(costs: list[float], grid: int, lead: float) -> float:
    """Claims in time order: a CTA claims its next tile `lead` blocks before its current tile
    ends (lead >= the tile: at its start; lead = inf: the early claim of the hooked kernels)."""
    nxt = min(grid, len(costs))
    finish = {c: costs[c] for c in range(nxt)}
    events = [(max(0.0, costs[c] - lead), c) for c in range(nxt)]
    heapq.heapify(events)
    while events and nxt < len(costs):
        _, c = heapq.heappop(events)
        w = costs[nxt]
        nxt += 1
        start = finish[c]
        finish[c] = start + w
        heapq.heappush(events, (start + max(0.0, w - lead), c))
    return max(finish.values())


def excess(makespan: float, costs: list[float], grid: int) -> float:
    """Makespan over the perfectly balanced one (sum / grid), minus 1."""
    return makespan / (sum(costs) / grid) - 1.0
