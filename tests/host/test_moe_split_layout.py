"""The overlapped dispatch's own / rem split (moe10, MKERNEL_MOE_DISPATCH_PIPELINE=2;
csrc/moe_nodes.cpp, twin in moe_split_layout.py) against tests/moe_reference.py's layout on the
CPU: ragged T with padding tokens, empty ranks, k 1/2/8, E_local below and above k, skewed and
empty experts, every rank as `me`; then the two grouped GEMMs (per expert, float64) put back in
the packed order equal the reference dispatch output on every counted row."""

from __future__ import annotations

import pytest
import torch

from tests.host.moe_split_layout import dispatch_layout, split_layout
from tests.moe_reference import layouts, routing

CASES = [  # world, tokens per rank, k, experts, kind
    (2, [5, 3], 2, 4, "uniform"),
    (2, [7, 0], 1, 2, "skewed"),
    (2, [9, 11], 8, 16, "uniform"),
    (2, [4, 6], 8, 8, "skewed"),      # E_local 4 < k: min(k, E_local) bounds the rows
    (3, [6, 0, 5], 2, 6, "empty"),
    (4, [3, 8, 1, 5], 2, 8, "uniform"),
    (4, [10, 10, 10, 10], 8, 32, "skewed"),
]


def _ranges(offs: torch.Tensor) -> list[tuple[int, int]]:
    ends = offs.tolist()
    return [(0 if i == 0 else ends[i - 1], ends[i]) for i in range(len(ends))]


@pytest.mark.parametrize("case", range(len(CASES)))
def test_split_layout_matches_the_reference(case: int) -> None:
    world, tokens, k, e, kind = CASES[case]
    el = e // world
    gen = torch.Generator().manual_seed(100 + case)
    idxs = [routing(kind, t, k, e, gen) for t in tokens]
    tm = max(tokens)
    pad = [torch.cat([i, torch.full((tm - i.shape[0], k), -1, dtype=torch.int64)]) for i in idxs]
    idx_all = torch.cat(pad).int()
    rows_out = world * tm * min(k, el)
    _, refs = layouts(idxs, e, 0)
    x_all = torch.randn(world * tm, 5, dtype=torch.float64, generator=gen)
    w1 = torch.randn(e, 3, 5, dtype=torch.float64, generator=gen)
    for me in range(world):
        ref = refs[me]
        lay = dispatch_layout(idx_all, tm, k, e, world, me, rows_out)
        assert torch.equal(lay["counts"], ref.counts) and torch.equal(lay["recv_counts"], ref.recv_counts)
        sp = split_layout(lay, tm, k, e, world, me, rows_out)
        assert sp["bound_own"] + sp["bound_rem"] == rows_out
        own_r, rem_r = _ranges(sp["offs_own"]), _ranges(sp["offs_rem"])
        assert int(sp["offs_own"][-1]) <= sp["bound_own"] and int(sp["offs_rem"][-1]) <= sp["bound_rem"]
        seen_own, seen_rem = set(), set()
        last = {}
        for q in range(rows_out):
            mo, mr = int(sp["map_own"][q]), int(sp["map_rem"][q])
            if q >= ref.rows:
                assert mo == -1 and mr == -1 and int(lay["token_live"][q]) == -1, q
                continue
            s, t, _, ex = ref.origin[q]
            assert int(lay["token_live"][q]) == s * tm + t, q
            which, m, rng, tok = (("own", mo, own_r, sp["tok_own"]) if s == me else
                                  ("rem", mr, rem_r, sp["tok_rem"]))
            assert (mr if s == me else mo) == -1, q
            assert rng[ex][0] <= m < rng[ex][1], (q, which, m, rng[ex])
            assert int(tok[m]) == s * tm + t, (q, which)
            assert m > last.get((which, ex), -1), (q, which)  # order kept inside an expert
            last[(which, ex)] = m
            (seen_own if s == me else seen_rem).add(m)
        assert seen_own == set(range(int(sp["offs_own"][-1])))
        assert seen_rem == set(range(int(sp["offs_rem"][-1])))
        assert bool((sp["tok_own"][int(sp["offs_own"][-1]):] == -1).all())
        assert bool((sp["tok_rem"][int(sp["offs_rem"][-1]):] == -1).all())
        # The two GEMMs (per expert, on rows gathered by tok_*), put back by map_*.
        def gemm(tok, ranges):
            a = x_all.index_select(0, tok.clamp_min(0))
            y = torch.full((tok.shape[0], 3), float("nan"), dtype=torch.float64)
            for ex, (b, f) in enumerate(ranges):
                y[b:f] = a[b:f] @ w1[me * el + ex].T
            return y
        y_own, y_rem = gemm(sp["tok_own"], own_r), gemm(sp["tok_rem"], rem_r)
        out = torch.full((rows_out, 3), float("nan"), dtype=torch.float64)
        for m, y in ((sp["map_own"], y_own), (sp["map_rem"], y_rem)):
            rows = (m >= 0).nonzero().flatten()
            out[rows] = y[m[rows]]
        for q in range(ref.rows):
            s, t, _, ex = ref.origin[q]
            torch.testing.assert_close(out[q], x_all[s * tm + t] @ w1[me * el + ex].T, rtol=0, atol=1e-12)
