"""moe14: the several-node dispatch's layout by kernels (MKERNEL_MOE_LAYOUT=kernel, csrc/moe_nodes.cpp
layout_by_kernel = moe_routing.cu route() + nodes_layout_kernel) equals the ATen sequence it
replaces (route, counts, recv_counts and the counted rows), on CPU twins of both
(moe_nodes_layout.py): ragged T with padding, empty ranks, k 1/2/8, E_local below k, repeated
experts in a token's choices (rows past the static bound dropped), every rank as `me`, several
grid shapes of the kernel. The ATen twin is also checked against tests/moe_reference.py."""

from __future__ import annotations

import pytest
import torch

from tests.host.moe_nodes_layout import aten_layout, kernel_layout
from tests.moe_reference import layouts, routing

CASES = [  # world, tokens per rank, k, experts, kind
    (2, [5, 3], 2, 4, "uniform"),
    (2, [7, 0], 1, 2, "skewed"),
    (2, [0, 0], 2, 4, "uniform"),
    (2, [9, 11], 8, 16, "uniform"),
    (2, [4, 6], 8, 8, "skewed"),      # E_local 4 < k
    (3, [6, 0, 5], 2, 6, "empty"),
    (4, [3, 8, 1, 5], 2, 8, "uniform"),
    (4, [10, 10, 10, 10], 8, 32, "skewed"),
    (2, [6, 6], 4, 4, "dup"),         # every choice expert 0: owner 0's rows pass the bound
    (2, [5, 2], 3, 4, "holes"),       # -1 choices (out of range ids) between valid ones
]


def _idx(kind: str, t: int, k: int, e: int, gen: torch.Generator) -> torch.Tensor:
    if kind == "dup":
        return torch.zeros(t, k, dtype=torch.int64)
    if kind == "holes":
        i = torch.randint(0, e, (t, k), generator=gen)
        return torch.where(torch.rand(t, k, generator=gen) < 0.3, torch.full_like(i, -1), i)
    return routing(kind, t, k, e, gen)


def _case(case: int):
    world, tokens, k, e, kind = CASES[case]
    gen = torch.Generator().manual_seed(300 + case)
    idxs = [_idx(kind, t, k, e, gen) for t in tokens]
    tm = max(tokens)
    pad = [torch.cat([i, torch.full((tm - i.shape[0], k), -1, dtype=torch.int64)]) for i in idxs]
    idx_all = torch.cat(pad).int() if tm > 0 else torch.empty(0, k, dtype=torch.int32)
    rows_out = world * tm * min(k, e // world)
    return world, tokens, k, e, kind, idxs, tm, idx_all, rows_out


@pytest.mark.parametrize("case", range(len(CASES)))
def test_kernel_layout_equals_the_aten_layout(case: int) -> None:
    world, tokens, k, e, kind, idxs, tm, idx_all, rows_out = _case(case)
    if tm == 0:
        pytest.skip("n == 0: dispatch_nodes returns before the layout on every rank")
    for me in range(world):
        want = aten_layout(idx_all, tm, tokens[me], k, e, world, me, rows_out)
        for grid, threads in ((1, 1), (3, 4), (2, 64)):
            got = kernel_layout(idx_all, tm, tokens[me], k, e, world, me, rows_out, grid, threads)
            for name in ("route", "counts", "recv_counts", "token_live"):
                assert torch.equal(got[name], want[name]), (case, me, grid, threads, name)
    if kind == "dup":  # the case is meant to drop rows past the bound
        assert (aten_layout(idx_all, tm, tokens[1], k, e, world, 1, rows_out)["route"] == -1).all()


@pytest.mark.parametrize("case", [c for c, v in enumerate(CASES) if v[4] not in ("dup", "holes")])
def test_aten_layout_matches_the_reference(case: int) -> None:
    world, tokens, k, e, kind, idxs, tm, idx_all, rows_out = _case(case)
    if tm == 0:
        pytest.skip("no tokens")
    routes, outs = layouts(idxs, e, 0)
    for me in range(world):
        lay = aten_layout(idx_all, tm, tokens[me], k, e, world, me, rows_out)
        assert torch.equal(lay["route"], routes[me]), (case, me)
        assert torch.equal(lay["recv_counts"], outs[me].recv_counts), (case, me)
        # Counted rows: row q holds token t of source s (index s * Tm + t of idx_all's rows).
        rows = int(lay["counts"].sum())
        want = [o[0] * tm + o[1] for o in outs[me].origin[:rows]]
        assert lay["token_live"][:rows].tolist() == want, (case, me)
        assert (lay["token_live"][rows:] == -1).all()


def test_a_mutated_kernel_fails() -> None:
    """The check has teeth: a layout whose pos ignores the stable order differs."""
    world, tokens, k, e, kind, idxs, tm, idx_all, rows_out = _case(3)
    want = aten_layout(idx_all, tm, tokens[0], k, e, world, 0, rows_out)
    flipped = idx_all.flip(0)  # the same multiset of choices, another order
    got = kernel_layout(flipped, tm, tokens[0], k, e, world, 0, rows_out)
    assert not all(torch.equal(got[n], want[n]) for n in ("route", "token_live"))


@pytest.mark.parametrize("dtype", [torch.int64, torch.int32])
@pytest.mark.parametrize("t,tm", [(0, 3), (5, 5), (4, 9)])
def test_kernel_head_equals_the_aten_head(dtype: torch.dtype, t: int, tm: int) -> None:
    """pad_ids (MKERNEL_MOE_LAYOUT=kernel's routing head) = the ATen where / cast / pad."""
    from tests.host.moe_nodes_layout import aten_head, kernel_head

    gen = torch.Generator().manual_seed(7 + t + tm)
    idx = torch.randint(-3, 11, (t, 4), generator=gen).to(dtype)  # E = 8: some out of range
    assert torch.equal(kernel_head(idx, tm, 8), aten_head(idx, tm, 8))
