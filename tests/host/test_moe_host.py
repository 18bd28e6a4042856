"""moe_dispatch_gemm and moe_combine through the host reference backend across W local processes
in emulated nodes (data moves FIFO -> Go proxy -> loopback within a node, tcp across nodes):
forward values, routes and counts, and the gradients of x, w1 and topk_weights, against a float64
torch reference from every rank's inputs (tests/host/moe_rank_checks.py)."""

from __future__ import annotations

import pytest

from tests.host.conftest import check_ranks, records
from tests.launch import run_ranks
from tests.host.conftest import ROOT

RANK_MAIN = f"""
import sys
sys.path.insert(0, {str(ROOT)!r})
from tests.host.moe_rank_checks import main
main()
"""

# (world, nodes): W in {2, 3, 4, 8}, one or more emulated nodes.
CONFIGS = [(2, 1), (2, 2), (3, 1), (4, 2),
           pytest.param(8, 2, marks=pytest.mark.big)]


@pytest.mark.multiproc
@pytest.mark.parametrize("world, nodes", CONFIGS)
def test_moe_matches_reference(world, nodes):
    """The case table (ragged T with empty ranks, top-k 1/2/4/8, empty experts, skew, capacity
    drops, fp32/bf16/fp16), forward and backward; bit-identical repeats."""
    res = run_ranks(RANK_MAIN, world, nodes=nodes, timeout=240, fork=True,
                    env={"TEST_SUITE": "matrix,repeat"})
    cases = check_ranks(res)
    assert len(cases) == world * 8, len(cases)
    worst = max(c["err"] / c["bound"] for c in cases)
    assert worst <= 1, worst


@pytest.mark.multiproc
@pytest.mark.parametrize("world, nodes", [(2, 1), (3, 2)])
def test_moe_fuzz_matches_reference(world, nodes):
    """Random cases (the ``fuzz`` suite: MKERNEL_FUZZ_CASES from MKERNEL_FUZZ_SEED, 6 by default)
    through the host path, forward and backward, against the float64 reference."""
    from tests.fuzz.problems import rank_env

    fuzz = rank_env(6)
    n = fuzz["FUZZ_CASES"]
    res = run_ranks(RANK_MAIN, world, nodes=nodes, timeout=240, fork=True,
                    env={"TEST_SUITE": "fuzz", **fuzz})
    cases = check_ranks(res)
    assert len(cases) == world * int(n), len(cases)
    assert max(c["err"] / c["bound"] for c in cases) <= 1


@pytest.mark.multiproc
@pytest.mark.parametrize("world, nodes", [(2, 2), (3, 1)])
def test_moe_carried_weights_match_reference(world, nodes):
    """topk_weights given to the dispatch (as MoEMLP does): the host reference carries no routes
    ([0, 3k]), and the case table still matches the float64 reference, the combine bit for bit
    the one given a copy of the weights."""
    res = run_ranks(RANK_MAIN, world, nodes=nodes, timeout=240, fork=True,
                    env={"TEST_SUITE": "carried"})
    cases = check_ranks(res)
    assert len(cases) == world * 7, len(cases)
    assert max(c["err"] / c["bound"] for c in cases) <= 1


@pytest.mark.multiproc
@pytest.mark.parametrize("world, nodes", [(2, 1), (2, 2)])
def test_moe_mlp_matches_dense_reference(world, nodes):
    """mkernel.moe.MoEMLP on 2 ranks (one node, two emulated nodes) against a dense torch
    reference: output and every gradient, capacity-free and padded."""
    res = run_ranks(RANK_MAIN, world, nodes=nodes, timeout=180, fork=True,
                    env={"TEST_SUITE": "mlp"})
    cases = check_ranks(res)
    assert len(cases) == world * 2 and max(c["err"] / c["bound"] for c in cases) <= 1


@pytest.mark.multiproc
@pytest.mark.parametrize("world, nodes, weights", [(2, 1, "0"), (2, 2, "0"), (2, 2, "1")])
def test_moe_buffer_matches_the_ops(world, nodes, weights):
    """mkernel.moe.MoEBuffer (T changing per call and rank, T = 0 once, the same tensors call after
    call on some ranks, w1 swapped): the plain ops' results bit for bit and the float64
    reference; its argument errors raise."""
    res = run_ranks(RANK_MAIN, world, nodes=nodes, timeout=180, fork=True,
                    env={"TEST_SUITE": "buffer", "TEST_BUFFER_WEIGHTS": weights})
    cases = check_ranks(res)
    assert len(cases) == world * 10 and max(c["err"] / c["bound"] for c in cases) <= 1


@pytest.mark.multiproc
def test_moe_errors_raise_on_every_rank():
    """A mismatched H and an out-of-range expert id raise on every rank (naming the rank); the
    group then still runs a case."""
    res = run_ranks(RANK_MAIN, 3, nodes=1, timeout=120, fork=True, env={"TEST_SUITE": "errors"})
    check_ranks(res)
    for r in res:
        msgs = [e["msg"] for e in records(r, "ERR")]
        assert len(msgs) == 2, msgs


@pytest.mark.multiproc
def test_moe_killed_rank_fails_the_others_by_name():
    """Rank 1 is SIGKILLed while dispatch/combine calls run on 3 ranks in 2 emulated nodes: the
    others raise within the op timeout, naming rank 1, and then refuse calls."""
    timeout_s = 20.0
    res = run_ranks(RANK_MAIN, 3, nodes=2, timeout=90, fork=True,
                    env={"TEST_SUITE": "kill", "TEST_VICTIM": "1", "TEST_DIE_AFTER": "1.5",
                         "MKERNEL_OP_TIMEOUT": str(timeout_s)})
    for r in res:
        if r.rank == 1:
            assert r.returncode == -9, f"the victim: rc={r.returncode}\n{r.stderr[-2000:]}"
            continue
        assert r.returncode == 0, f"rank {r.rank}: rc={r.returncode}\n{r.stderr[-3000:]}"
        (err,) = records(r, "ERR")
        assert err["calls"] > 0, f"rank {r.rank} failed before the kill: {err['msg']}"
        assert "rank 1" in err["msg"], err["msg"]
        assert err["s"] < timeout_s / 2, err
