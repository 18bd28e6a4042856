"""ag_gemm, gemm_rs and gemm_ar through the host reference backend (csrc/host_reference.h) across
W local processes in emulated nodes: data moves FIFO -> Go proxy -> loopback (same node) or tcp
(across nodes), results are checked against a float64 torch reference from every rank's inputs
(tests/host/rank_checks.py)."""

from __future__ import annotations

import json

import pytest
import torch

import mkernel
from tests.host.conftest import RANK_MAIN, check_ranks
from tests.launch import run_ranks

# (world, nodes): W in {2, 3, 4, 8}, emulated nodes in {1, 2, 4} where they divide W.
CONFIGS = [(2, 1), (2, 2), (3, 1), (4, 1), (4, 2), (4, 4),
           pytest.param(8, 1, marks=pytest.mark.big), pytest.param(8, 2, marks=pytest.mark.big),
           pytest.param(8, 4, marks=pytest.mark.big)]


@pytest.mark.multiproc
@pytest.mark.parametrize("world, nodes", CONFIGS)
def test_ops_match_reference(world, nodes):
    """Every op, fp32/bf16/fp16, ragged shapes, five calls in a row, buffer growth, the data
    path per peer; and on W=4: shape mismatches, two groups interleaved and from two threads."""
    suites = ["matrix", "paths", "back_to_back", "grow"]
    if world == 4:
        suites += ["mismatch", "two_groups", "threads"]
    res = run_ranks(RANK_MAIN, world, nodes=nodes, timeout=150, fork=True,
                    env={"TEST_SUITE": ",".join(suites), "TEST_NODES": str(nodes)})
    cases = check_ranks(res)
    ops = {c["op"] for c in cases}
    assert ops == {"ag_gemm", "gemm_rs", "gemm_ar"}, ops
    worst = max(c["err"] / c["bound"] for c in cases)
    assert worst <= 1, worst


def test_world_one_in_process():
    """W = 1: no data path, the op is a GEMM (and a copy of x)."""
    from mkernel import runtime

    had_default = runtime._default is not None and not runtime._default.closed
    ctx = mkernel.init()
    try:
        x, w = torch.randn(9, 13, dtype=torch.float64).float(), torch.randn(5, 13).float()
        out, gathered = mkernel.ag_gemm(x, w, group=ctx, return_gathered=True)
        ref = x.double() @ w.double().T
        assert torch.equal(gathered, x) and gathered.data_ptr() != x.data_ptr()
        for got in (out, mkernel.gemm_rs(x, w, group=ctx), mkernel.gemm_ar(x, w, group=ctx)):
            assert ((got.double() - ref).norm() / ref.norm()).item() <= 1e-5
        assert json.loads(torch.ops.mkernel._group_info(ctx.handle)) == {}
    finally:
        if not had_default:
            ctx.close()


@pytest.mark.multiproc
def test_mkernel_net_picks_the_inter_node_transport():
    """MKERNEL_NET chooses the transport between nodes (here loopback for both kinds of peer)."""
    res = run_ranks(RANK_MAIN, 4, nodes=2, timeout=120, fork=True,
                    env={"TEST_SUITE": "back_to_back,paths", "TEST_NODES": "2",
                         "MKERNEL_NET": "loopback"})
    assert check_ranks(res)
