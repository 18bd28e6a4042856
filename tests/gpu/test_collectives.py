"""mkernel.all_gather / reduce_scatter / all_reduce on the GPU substrate, W rank processes on
one GPU under MPS (tests/gpu/rank_collectives.py holds what each rank checks): exact results
against a reference from every rank's inputs, 1000 calls without a host sync, a CUDA graph
replayed 100 times with new inputs, and the failures — a capture that would need to grow the
symmetric memory, mismatched shapes across ranks, a rank killed mid-op."""

from __future__ import annotations

import pytest

from tests.gpu.conftest import RANK_MAIN, check_killed_rank, check_ranks, needs_gpu, rank_env, records
from tests.launch import run_ranks

pytestmark = needs_gpu


@pytest.mark.parametrize("world", [2, 3, 4, 8])
def test_collectives_match_reference(mps, world):
    suites = ["matrix"]
    if world in (2, 4):
        suites += ["back_to_back", "graph", "two_groups", "capture_growth"]
    # A wait that never completes fails its rank after 20 s (with a record naming the flag).
    res = run_ranks(RANK_MAIN, world, timeout=150,
                    env=rank_env(mps, world, TEST_SUITE=",".join(suites), MKERNEL_OP_TIMEOUT="20"))
    cases = check_ranks(res)
    ops = {c["op"] for c in cases}
    assert {"all_gather", "reduce_scatter", "all_reduce"} <= ops, ops
    if world in (2, 4):
        assert {"back_to_back", "graph", "two_groups"} <= ops, ops
        for r in res:
            assert records(r, "ERR"), f"rank {r.rank}: capture_growth raised nothing"
    for c in cases:
        if c["op"] == "back_to_back":
            print(f"W={world} back_to_back: {c['us_per_call']:.1f} us per call "
                  f"(SMs seen by a rank: {c['sm_count']})")


@pytest.mark.parametrize("world, nodes", [(2, 2), (4, 2), (8, 2), (3, 3), (4, 4)])
def test_collectives_across_emulated_nodes(mps, world, nodes):
    """Ranks in several emulated nodes: other nodes' blocks travel FIFO -> Go proxy -> transport
    (host staging on tcp / loopback). Every op against the reference; at W = 2 and 4 over two
    nodes also 1000 calls without a host sync, a graph replayed 100 times across a growth of the
    inter-node path, a capture that would grow it (a clear error), and a second group. Skipped
    on builds without the GPU inter-node path."""
    full = world in (2, 4) and nodes == 2
    suites = ["multinode"]
    if full:
        suites += ["back_to_back", "graph", "capture_growth"]
    if full and world == 4:
        suites += ["two_groups"]
    res = run_ranks(RANK_MAIN, world, nodes=nodes, timeout=90,
                    env=rank_env(mps, world, TEST_SUITE=",".join(suites), MKERNEL_OP_TIMEOUT="20"))
    if any("NONET" in r.stdout for r in res):
        check_ranks(res, ok=False)
        pytest.skip("this build has no GPU inter-node path (csrc/comm/net_path)")
    cases = check_ranks(res)
    ops = {c["op"] for c in cases}
    assert {"multinode", "all_gather", "reduce_scatter", "all_reduce"} <= ops, ops
    if full:
        assert {"back_to_back", "graph"} <= ops, ops
        for r in res:
            errs = records(r, "ERR")
            assert errs and errs[0].get("names_reserve"), f"rank {r.rank}: {errs}"
    paths = {(c["net"], c.get("fifo"), c.get("stage"), c.get("overlap"), c.get("gdr"), c.get("copier"),
              c.get("loading")) for c in cases if c["op"] == "multinode"}
    print(f"W={world} nodes={nodes} inter-node path (transport, FIFO format, staging, overlap, gpu_direct, "
          f"copier, module loading): "
          f"{sorted(map(str, paths))}")
    for c in cases:
        if c["op"] == "back_to_back":
            print(f"W={world} nodes={nodes} back_to_back: {c['us_per_call']:.1f} us per call")


def test_symmetric_memory_takes_back_torch_cache(mps):
    """Each rank fills the device with torch tensors and frees them (cached by torch, not given
    back), then calls all_gather, which must grow the group's symmetric memory: it succeeds,
    exact, on every rank (comm/symmetric_group.cpp, comm/device_alloc.h)."""
    world = 2
    res = run_ranks(RANK_MAIN, world, timeout=150,
                    env=rank_env(mps, world, TEST_SUITE="cached_memory", MKERNEL_OP_TIMEOUT="20"))
    cases = check_ranks(res)
    got = [c for c in cases if c.get("suite") == "cached_memory"]
    assert len(got) == world, cases
    for c in got:
        print(f"cached_memory: {c['cached_mib']} MiB cached, {c['free_mib']} MiB free before the call")


def test_mismatched_shapes_fail_on_every_rank(mps):
    world = 4
    res = run_ranks(RANK_MAIN, world, timeout=120,
                    env=rank_env(mps, world, TEST_SUITE="mismatch", MKERNEL_OP_TIMEOUT="10"))
    check_ranks(res, ok=False)
    for r in res:
        errs = records(r, "ERR")
        assert errs, f"rank {r.rank} did not fail:\n{r.stdout[-2000:]}\n{r.stderr[-2000:]}"
        e = errs[0]
        print(f"rank {r.rank}: {e}")
        assert e["type"] == "MkernelError", e
        assert "different ops or shapes" in e["msg"], e


@pytest.mark.parametrize("nodes", [1, 2])
def test_killed_rank_fails_the_others_within_the_timeout(mps, nodes):
    """nodes=2: the victim's node-mate waits at the entry barrier, the other node's ranks for
    its inter-node data (or their proxy reports the lost peer): each names rank 3."""
    world, timeout_s = 4, 5
    res = run_ranks(RANK_MAIN, world, nodes=nodes, timeout=90,
                    env=rank_env(mps, world, TEST_SUITE="kill", MKERNEL_OP_TIMEOUT=str(timeout_s)))
    victim = world - 1
    errs = check_killed_rank(res, victim, timeout_s)
    assert all(e["type"] == "MkernelError" for e in errs), errs
    # this rank's own wait timed out: its record names the dead peer (check_killed_rank checks it)
    named = sum(e["record"] is not None for e in errs)
    # Under MPS the first trap ends every client of the GPU: a rank whose wait had not expired
    # yet has no record of its own (its error says so), but one rank at least has.
    assert named >= 1, "no survivor named the killed rank"
