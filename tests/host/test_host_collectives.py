"""all_gather, reduce_scatter and all_reduce on CPU tensors (the host reference,
csrc/collectives_host.cpp) across W local processes in emulated nodes: data moves FIFO -> Go proxy
-> loopback (same node) or tcp (across nodes); results are checked against torch references from
every rank's inputs, bit-exact to the rank-order fp32 sums (tests/host/collective_checks.py)."""

from __future__ import annotations

import pytest
import torch

from tests.host.conftest import ROOT, check_ranks
from tests.launch import run_ranks

RANK_MAIN = f"""
import sys
sys.path.insert(0, {str(ROOT)!r})
from tests.host.collective_checks import main
main()
"""

# (world, nodes): emulated nodes that divide W and that do not (3 ranks in 2 nodes: 2 + 1).
CONFIGS = [(2, 1), (2, 2), (3, 2), (4, 2), (4, 4), pytest.param(8, 4, marks=pytest.mark.big)]


@pytest.mark.multiproc
@pytest.mark.parametrize("world, nodes", CONFIGS)
def test_collectives_match_reference(world, nodes):
    suites = ["matrix", "back_to_back"]
    if world == 4 and nodes == 2:
        suites += ["grow", "mismatch", "bad_input", "subgroup"]
    res = run_ranks(RANK_MAIN, world, nodes=nodes, timeout=180, fork=True,
                    env={"TEST_SUITE": ",".join(suites)})
    cases = check_ranks(res)
    assert {c["op"] for c in cases} == {"all_gather", "reduce_scatter", "all_reduce"}
    assert all(c["bits"] for c in cases)
    assert max(c["err"] / c["bound"] for c in cases) <= 1


def test_world_one_in_process():
    """W = 1: a copy (never an alias of x)."""
    import mkernel
    from mkernel import runtime

    had_default = runtime._default is not None and not runtime._default.closed
    ctx = mkernel.init()
    try:
        x = torch.randn(6, 5, dtype=torch.bfloat16)
        for op in ("all_gather", "reduce_scatter", "all_reduce"):
            out = getattr(torch.ops.mkernel, op)(x, ctx.handle, 1)
            assert torch.equal(out, x) and out.data_ptr() != x.data_ptr(), op
    finally:
        if not had_default:
            ctx.close()
