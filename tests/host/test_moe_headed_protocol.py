"""The pipelined dispatch's headed gather (csrc/moe_net.cpp gather_headed_start / _finish) as a
model of its streams' queues, on the CPU (moe12).

Each rank has a host that issues work into its streams (main, send, recv, hooks) in the order the
C++ issues it, and may stop to wait for its whole device (``sync``: what a lazily loaded kernel's
first launch, a cudaFree or a synchronize does) between the two halves. A stream runs its head
op when it can: a wait on an arrival flag needs the peer's signal, an event wait the event's
record. Signals travel at once (the transport does not depend on any host). The model reports a
deadlock when no host and no stream can move and work is left.

What it shows: with DONE queued by the second half (``"old"``, moe10's order) two ranks whose
hosts synchronize between the halves deadlock, each send stream's finish waiting for the other
rank's DONE, which neither host has queued (s13run2 / s14run1: rank 0 timed out on flag 2081 =
DONE from rank 1, the first headed call of the test, whose layout ATen kernels had not run in the
process yet). With every wait, unstage and DONE queued by the first half (``"new"``, moe12), no
choice of syncing ranks deadlocks; nor with moe16's launches (``"kernels"``: one send launch for
every piece, one receive launch for every piece and DONE queued by the first half, one gather
launch on the caller's stream in the second, the finish at the end of the receive stream: also
free of deadlock when every stream shares one hardware queue, CUDA_DEVICE_MAX_CONNECTIONS=1); nor
with session 21's default (``"join"``: moe12's order, the finish queued on the caller's stream at
the join, mode 1's row gathers on the caller's stream), in separate queues or one. This is a twin of
the issue order, not the code itself: a change of the order in moe_net.cpp must be mirrored here.

Also checked: the rank-check matrix that the GPU tests run has ranks with T = 0 beside ranks
with tokens at W = 2 and 4 (the case that first exercised the headed path's deadlock).

Session 19 ran both on the GPU with CUDA_DEVICE_MAX_CONNECTIONS=1 (two ranks under MPS): mode 4 passed
as the model predicts, and mode 3 passed too, where the model predicts a stall: the hardware does
not serialize every stream of a process into one queue in issue order under MPS the way the
one-queue model assumes. The model stays a conservative check (an order it finds stall-free is
stall-free in the stricter world), not a prediction of what a given machine does.
"""

from __future__ import annotations

import importlib.util
import itertools
import sys
import types
from collections import deque
from pathlib import Path

import pytest

STREAMS = ("main", "send", "recv", "hooks")


def issue_order(me: int, world: int, pieces: int, order: str, sync: bool) -> list[tuple]:
    """The host program of rank `me`: ("issue", stream, op) or ("sync",). Ops: ("signal", kind,
    idx) to every other rank, ("wait", kind, src, idx), ("record", ev), ("block", ev)."""
    others = [(me + j) % world for j in range(1, world)]
    prog: list[tuple] = []

    def put(stream: str, *op) -> None:
        prog.append(("issue", stream, op))

    # gather_headed_start
    put("main", "signal", "ready", 0)                       # begin: READY to every other rank
    put("main", "record", "forked")
    put("send", "block", "forked")
    put("recv", "block", "forked")
    for p in others:
        put("send", "wait", "ready", p, 0)
    put("send", "signal", "data", 0)                        # the head
    if order == "kernels":  # moe16: one launch stages and pushes every piece (no waits in it)
        put("send", "signals", [("data", 1 + c) for c in range(pieces)])
        put("send", "record", "pushed")
    for c in range(pieces):
        if order == "kernels":
            break
        put("send", "signal", "data", 1 + c)
    if order not in ("kernels", "join"):  # moe16: at the end of the receive stream; "join": at the join
        for p in others:                                    # finish: every peer's DONE
            put("send", "wait", "done", p, 0)
    put("send", "record", "sent")
    for p in others:
        put("recv", "wait", "data", p, 0)
    put("recv", "record", "head_ready")
    put("main", "block", "head_ready")
    if order == "kernels":
        # moe16: one launch waits for every piece of every other rank, releases the landed words
        # (flags of this rank) and signals DONE; it waits only on the network.
        put("recv", "kernel", [("data", p, 1 + c) for c in range(pieces) for p in others],
            [("landed", me, c) for c in range(pieces)], [("done", 0)])
        put("recv", "block", "pushed")                      # the finish, after this rank's pushes
        for p in others:
            put("recv", "wait", "done", p, 0)
        put("recv", "record", "received")
    if order in ("new", "join"):
        for c in range(pieces):
            for p in others:
                put("recv", "wait", "data", p, 1 + c)       # arrival, then the unstage
            put("recv", "record", f"piece{c}")
        put("recv", "signal", "done", 0)
        put("recv", "record", "received")
    # the caller's layout, on the host and the main stream
    put("main", "record", "layout_done")
    if sync:
        prog.append(("sync",))
    # gather_headed_finish
    if order == "kernels":
        # gather_headed_rows: one launch on the caller's stream, waiting on the landed words
        put("main", "kernel", [("landed", me, c) for c in range(pieces)], [], [])
    elif order == "old":
        put("recv", "block", "layout_done")
        for c in range(pieces):
            for p in others:
                put("recv", "wait", "data", p, 1 + c)
        put("recv", "signal", "done", 0)
        put("recv", "record", "received")
    elif order == "join":
        for c in range(pieces):  # session 21: mode 1's row gathers on the caller's stream itself
            put("main", "block", f"piece{c}")
    else:
        put("hooks", "block", "layout_done")
        for c in range(pieces):
            put("hooks", "block", f"piece{c}")
        put("hooks", "record", "gathered")
        put("main", "block", "gathered")
    # exchange_join, then the GEMM (whose host side may synchronize too)
    if order == "join":  # session 21: the finish queued on the caller's stream by exchange_join
        for p in others:
            put("main", "wait", "done", p, 0)
    put("main", "block", "sent")
    put("main", "block", "received")
    if sync:
        prog.append(("sync",))
    return prog


def run(world: int, pieces: int, order: str, syncing: set[int], program=None,
        one_queue: bool = False) -> list[str]:
    """Runs the model; returns what is stuck ([] when every rank finished). program: the host
    program (issue_order's signature; issue_order itself by default). one_queue: every stream of
    a rank feeds one hardware queue in issue order (CUDA_DEVICE_MAX_CONNECTIONS=1, Megatron's
    setting): an op runs only once every op issued before it on any stream has."""
    program = program or issue_order
    progs = [deque(program(r, world, pieces, order, r in syncing)) for r in range(world)]
    queues = [{s: deque() for s in STREAMS} for _ in range(world)]
    shared = [deque() for _ in range(world)]  # one_queue: (stream) in issue order
    flags = [set() for _ in range(world)]     # (kind, src, idx) arrived at this rank
    events = [set() for _ in range(world)]    # recorded events of this rank

    def step_stream(r: int, s: str) -> bool:
        q = queues[r][s]
        if not q:
            return False
        if one_queue and shared[r][0] != s:
            return False
        op = q[0]
        if op[0] == "wait" and (op[1], op[2], op[3]) not in flags[r]:
            return False
        if op[0] == "kernel":  # ("kernel", waits, local flags it sets, signals to the others)
            if any(w not in flags[r] for w in op[1]):
                return False
            flags[r].update(op[2])
            for p in range(world):
                if p != r:
                    flags[p].update((kind, r, idx) for kind, idx in op[3])
        if op[0] == "signals":
            for p in range(world):
                if p != r:
                    flags[p].update((kind, r, idx) for kind, idx in op[1])
        if op[0] == "block" and op[1] not in events[r]:
            return False
        if op[0] == "signal":
            for p in range(world):
                if p != r:
                    flags[p].add((op[1], r, op[2]))
        if op[0] == "record":
            events[r].add(op[1])
        q.popleft()
        if one_queue:
            shared[r].popleft()
        return True

    def step_host(r: int) -> bool:
        if not progs[r]:
            return False
        act = progs[r][0]
        if act[0] == "sync" and any(queues[r][s] for s in STREAMS):
            return False
        if act[0] == "issue":
            queues[r][act[1]].append(act[2])
            shared[r].append(act[1])
        progs[r].popleft()
        return True

    moved = True
    while moved:
        moved = False
        for r in range(world):
            moved |= step_host(r)
            for s in STREAMS:
                while step_stream(r, s):
                    moved = True
    stuck = []
    for r in range(world):
        if progs[r]:
            stuck.append(f"rank {r} host at {progs[r][0]}")
        for s in STREAMS:
            if queues[r][s]:
                stuck.append(f"rank {r} {s} at {queues[r][s][0]}")
    return stuck


@pytest.mark.parametrize("world", [2, 3, 4])
@pytest.mark.parametrize("pieces", [1, 3, 15])
def test_new_order_never_deadlocks(world: int, pieces: int) -> None:
    for n in range(world + 1):
        for syncing in itertools.combinations(range(world), n):
            stuck = run(world, pieces, "new", set(syncing))
            assert not stuck, (world, pieces, syncing, stuck)


@pytest.mark.parametrize("world", [2, 3, 4])
@pytest.mark.parametrize("pieces", [1, 3, 15])
def test_kernel_order_never_deadlocks(world: int, pieces: int) -> None:
    """moe16 (MKERNEL_MOE_DISPATCH_PIPELINE=4): the pieces staged and pushed by one send launch,
    unstaged (and DONE) by one receive launch queued in the first half, gathered by one launch on
    the caller's stream in the second: no choice of syncing hosts deadlocks."""
    for n in range(world + 1):
        for syncing in itertools.combinations(range(world), n):
            stuck = run(world, pieces, "kernels", set(syncing))
            assert not stuck, (world, pieces, syncing, stuck)


@pytest.mark.parametrize("world", [2, 3, 4])
@pytest.mark.parametrize("pieces", [1, 3, 15])
def test_join_order_never_deadlocks(world: int, pieces: int) -> None:
    """Session 21's default (``"join"``): moe12's order with the finish (every peer's DONE) queued
    on the caller's stream at the join and mode 1's row gathers on the caller's stream: no choice
    of syncing hosts deadlocks, with the streams on separate queues or all in one."""
    for n in range(world + 1):
        for syncing in itertools.combinations(range(world), n):
            for one_queue in (False, True):
                stuck = run(world, pieces, "join", set(syncing), one_queue=one_queue)
                assert not stuck, (world, pieces, syncing, one_queue, stuck)


@pytest.mark.parametrize("world", [2, 3, 4])
def test_one_hardware_queue(world: int) -> None:
    """CUDA_DEVICE_MAX_CONNECTIONS=1 (every stream of a rank in one hardware queue, in issue order):
    mode 3's order deadlocks (the send stream's finish waits for the peers' DONE, queued behind it
    on the receive stream); moe16's, whose finish ends the receive stream, does not."""
    for n in range(world + 1):
        for syncing in itertools.combinations(range(world), n):
            assert run(world, 3, "new", set(syncing), one_queue=True)
            stuck = run(world, 3, "kernels", set(syncing), one_queue=True)
            assert not stuck, (world, syncing, stuck)


def test_kernel_order_needs_its_finish_on_the_receive_stream() -> None:
    """The model is sharp for moe16's finish placement: the same launches with the finish on the
    send stream (mode 3's place) deadlock in one hardware queue."""
    def finish_on_send(me: int, world: int, pieces: int, order: str, sync: bool) -> list[tuple]:
        prog = issue_order(me, world, pieces, order, sync)
        finish = [a for a in prog if a[0] == "issue" and a[1] == "recv" and
                  (a[2][:2] == ("wait", "done") or a[2] == ("block", "pushed"))]
        for a in finish:
            prog.remove(a)
        at = next(i for i, a in enumerate(prog) if a[0] == "issue" and a[2] == ("record", "sent"))
        prog[at:at] = [("issue", "send", a[2]) for a in finish if a[2] != ("block", "pushed")]
        return prog

    assert run(2, 3, "kernels", set(), program=finish_on_send, one_queue=True)
    assert not run(2, 3, "kernels", set(), program=finish_on_send)


@pytest.mark.parametrize("world", [2, 3, 4])
def test_old_order_deadlocks_when_two_hosts_sync(world: int) -> None:
    """The model reproduces the failure: moe10's order deadlocks at DONE iff at least two ranks'
    hosts wait for their device between the halves (a mutated model that never deadlocks fails
    here)."""
    for n in range(world + 1):
        for syncing in itertools.combinations(range(world), n):
            stuck = run(world, 2, "old", set(syncing))
            if n >= 2:
                assert stuck, (world, syncing)
                # every syncing rank's send stream sits at a peer's DONE
                for r in syncing:
                    assert any(f"rank {r} send at ('wait', 'done'" in s for s in stuck), stuck
            else:
                assert not stuck, (world, syncing, stuck)


@pytest.mark.parametrize("world", [2, 4])
def test_matrix_has_empty_ranks_beside_full_ones(world: int, monkeypatch) -> None:
    """The GPU tests' matrix (moe_rank_checks.cases) covers T = 0 on some ranks while others
    have tokens, and T = 0 everywhere, at W = 2 and 4."""
    # moe_rank_checks imports mkernel (the built extension) for its rank programs; the table
    # itself is plain Python: load a private copy of the module beside a stand-in when the
    # extension is not installed (this CPU machine's shared venv).
    try:
        import mkernel  # noqa: F401  (only whether it imports)
    except ImportError:
        monkeypatch.setitem(sys.modules, "mkernel", types.ModuleType("mkernel"))
    spec = importlib.util.spec_from_file_location(
        "_moe_rank_checks_table", Path(__file__).with_name("moe_rank_checks.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    tokens = [c["tokens"] for c in mod.cases(world)]
    assert any(0 in t and any(t) for t in tokens), tokens
    assert any(not any(t) for t in tokens), tokens
    # the headed path's first call of the matrix is case 2: empty ranks beside full ones
    assert 0 in tokens[1] and any(tokens[1]), tokens[1]
