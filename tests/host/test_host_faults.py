"""Faults at the op level of the host reference backend: a rank killed mid-op, a rank that never
calls, and transports that reorder and delay (MKERNEL_NET_FAULTS, tests only)."""

from __future__ import annotations

import os
import time

import pytest

from tests.host.conftest import RANK_MAIN, check_ranks, records
from tests.launch import run_ranks

OP_TIMEOUT_S = 20.0


def alive(pid: int) -> bool:
    """Whether pid is a live process (not gone, not a zombie)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return False


@pytest.mark.multiproc
@pytest.mark.parametrize("fork", [True, False], ids=["forked", "spawned"])
def test_killed_rank_fails_every_other_rank(fork):
    """Rank 1 is SIGKILLed while calls run; rank 0 shares its emulated node (loopback notices),
    ranks 2 and 3 do not (tcp notices). Each raises RuntimeError naming rank 1 well within the op
    timeout, the group then refuses calls, and no rank process is left behind."""
    t0 = time.monotonic()
    res = run_ranks(RANK_MAIN, 4, nodes=2, timeout=90, fork=fork,
                    env={"TEST_SUITE": "loop", "TEST_VICTIM": "1", "TEST_DIE_AFTER": "1.5",
                         "MKERNEL_OP_TIMEOUT": str(OP_TIMEOUT_S)})
    wall = time.monotonic() - t0
    pids = [int(line.split()[1]) for r in res for line in r.stdout.splitlines()
            if line.startswith("PID ")]
    assert len(pids) == 4, [r.stdout[-500:] for r in res]
    for r in res:
        if r.rank == 1:
            assert r.returncode == -9, f"the victim: rc={r.returncode}\n{r.stderr[-2000:]}"
            continue
        assert r.returncode == 0, f"rank {r.rank}: rc={r.returncode}\n{r.stdout[-2000:]}\n{r.stderr[-3000:]}"
        (err,) = records(r, "ERR")
        assert err["calls"] > 0, f"rank {r.rank} failed before the kill: {err['msg']}"
        assert "rank 1" in err["msg"], f"rank {r.rank}: the error does not name rank 1: {err['msg']}"
        assert err["s"] < OP_TIMEOUT_S / 2, f"rank {r.rank}: noticed after {err['s']:.1f} s: {err['msg']}"
    assert wall < 60, wall
    time.sleep(0.2)
    assert not [p for p in pids if alive(p)], "rank processes outlived the launcher"


@pytest.mark.multiproc
def test_rank_that_skips_a_call_times_out_by_name():
    """Rank 2 skips the second call: the others give up after MKERNEL_OP_TIMEOUT, naming it."""
    res = run_ranks(RANK_MAIN, 3, nodes=1, timeout=60, fork=True,
                    env={"TEST_SUITE": "skip_call", "TEST_VICTIM": "2", "TEST_SLEEP_S": "4",
                         "MKERNEL_OP_TIMEOUT": "2"})
    for r in res:
        assert r.returncode == 0, f"rank {r.rank}: rc={r.returncode}\n{r.stdout[-2000:]}\n{r.stderr[-3000:]}"
        if r.rank == 2:
            assert "SKIPPED" in r.stdout
            continue
        (err,) = records(r, "ERR")
        assert "timed out after" in err["msg"] and "the call header from rank 2" in err["msg"], err
        assert "MKERNEL_OP_TIMEOUT" in err["msg"], err
        assert 1.9 < err["s"] < 4, err


def fault_injection_built() -> bool:
    """Whether the loaded control plane is the test build that honours MKERNEL_NET_FAULTS."""
    from mkernel._native import core

    return bool(getattr(core, "FaultInjectionBuilt", lambda: False)())


@pytest.mark.multiproc
@pytest.mark.skipif(not fault_injection_built(),
                    reason="SKIPPED: the control plane is a production build, which refuses MKERNEL_NET_FAULTS; "
                           "build its test variant (make core CORE_TAGS=mkernel_faults; `make test` does)")
@pytest.mark.parametrize("world, nodes", [(4, 2), pytest.param(8, 4, marks=pytest.mark.big)])
def test_reordering_transports_give_exact_results(world, nodes):
    """loopback and tcp hold every op back up to 300 us and apply them in random order (the
    proxy must fence before each signal): results stay within the same bounds, bit-identical
    across ranks for gemm_ar, reproducible for gemm_rs."""
    env = {"TEST_SUITE": "matrix,paths,back_to_back,grow", "TEST_NODES": str(nodes),
           "MKERNEL_NET_FAULTS": "11:300us"}
    res = run_ranks(RANK_MAIN, world, nodes=nodes, timeout=150, fork=True, env=env)
    cases = check_ranks(res)
    assert len(cases) > 20 * world
    assert max(c["err"] / c["bound"] for c in cases) <= 1
    stalls = [rec for r in res for rec in records(r, "STALLS")]
    assert len(stalls) == world and {"tcp", "loopback"} <= set(stalls[0]), stalls
    assert sum(s["tcp"]["fence"] for s in stalls) > 0, f"no reordering seen: {stalls}"


def test_faults_env_is_checked():
    """A malformed MKERNEL_NET_FAULTS fails the data path's creation with a clear message."""
    code = RANK_MAIN.replace("main()", """
import torch, torch.distributed as dist, mkernel
dist.init_process_group("gloo")
ctx = mkernel.init()
try:
    mkernel.gemm_ar(torch.ones(2, 3), torch.ones(4, 3), group=ctx)
except Exception as e:
    print("ERR", type(e).__name__, str(e).replace(chr(10), " "))
""")
    res = run_ranks(code, 2, nodes=2, timeout=60, fork=True, env={"MKERNEL_NET_FAULTS": "soon"})
    for r in res:
        assert r.returncode == 0, r.stderr[-3000:]
        assert "ERR" in r.stdout and "MKERNEL_NET_FAULTS" in r.stdout, r.stdout
        # A production build refuses even a well-formed value, naming the test build tag.
        assert fault_injection_built() or "mkernel_faults" in r.stdout, r.stdout
    assert not os.environ.get("MKERNEL_NET_FAULTS")
