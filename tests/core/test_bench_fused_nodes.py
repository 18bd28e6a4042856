"""bench_fused.py's across-nodes timing mode (--nodes-lean, --stream) on a machine without a GPU:
which rows a run keeps and in which order, the row's figures, and the launcher's pass-through of
rank 0's output (what makes a row land in the log the moment it is measured, even when an outer
timeout kills the bench before its ranks end: s11run2 / s12run1 left empty logs)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests import source_module

ROOT = Path(__file__).resolve().parents[2]


def bench_fused():
    """The module without running it (its rank / parent code runs only as __main__ / __rank__)."""
    return source_module.load("benchmarks/bench_fused.py", "bench_fused_nodes_under_test")


def test_select_rows_keeps_the_asked_rows_in_ops_order():
    bf = bench_fused()
    for world in (2, 4):
        rows = bf.shapes(world, full=False)
        only = ["1024x8192x3584", "4096x1024x8192"]
        ops = ["ag_gemm", "gemm_rs", "gemm_ar"]
        got = [(op, label) for op, label, *_ in bf.select_rows(rows, only, ops, by_ops_order=True)]
        assert got == [("ag_gemm", "smoke 1024x8192x3584"), ("gemm_rs", "smoke 4096x1024x8192"),
                       ("gemm_ar", "smoke 4096x1024x8192")]
        # Without the ops order (every other mode): the set's own order, the same rows.
        plain = [(op, label) for op, label, *_ in bf.select_rows(rows, only, ops)]
        assert plain == [("gemm_rs", "smoke 4096x1024x8192"), ("gemm_ar", "smoke 4096x1024x8192"),
                         ("ag_gemm", "smoke 1024x8192x3584")]
        # The per-rank dims pass through untouched (ag: x [1024, 8192], w [3584, 8192]).
        ag = bf.select_rows(rows, only, ["ag_gemm"], by_ops_order=True)
        assert [r[2:] for r in ag] == [(1024, 8192, 3584)]
        # No filter: every row, the set's order.
        assert bf.select_rows(rows, [], [], by_ops_order=True) == rows


def test_nodes_lean_figures():
    bf = bench_fused()
    assert bf.nodes_lean_figures(True) == ["fused_ms", "fused_kernel_ms", "gemm_ms", "comm_ms",
                                           "unfused_ms"]
    assert bf.nodes_lean_figures(False) == ["fused_ms", "fused_kernel_ms", "gemm_ms"]


def test_run_ranks_passthrough_writes_rank0_into_the_callers_output():
    # Rank 0 inherits the launcher's stdout / stderr (lines appear as they are printed); rank 1
    # is captured as before. The launcher runs in a child so its stdout is a pipe we can read.
    snippet = (
        "import sys; sys.path.insert(0, %r)\n"
        "from tests.launch import run_ranks\n"
        "code = 'import os, sys; r = os.environ[\"RANK\"]; print(\"out\", r, flush=True); "
        "print(\"err\", r, file=sys.stderr, flush=True)'\n"
        "res = run_ranks(code, 2, timeout=60, passthrough=(0,))\n"
        "print('captured', sorted((x.rank, x.stdout.strip(), x.returncode) for x in res), flush=True)\n"
    ) % str(ROOT)
    p = subprocess.run([sys.executable, "-c", snippet], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    assert "out 0" in p.stdout and "err 0" in p.stderr
    assert "out 1" not in p.stdout.replace("'out 1'", "")  # rank 1's line only in its result
    assert "captured [(0, '', 0), (1, 'out 1', 0)]" in p.stdout


def verdict_module():
    return source_module.load("benchmarks/fused_nodes_verdict.py", "fused_nodes_verdict_under_test")


def _row(op, world, fused, kernel, unfused, path="fused coop_128x256_c2x1 order 0/0 grid 24",
         rel=2e-3, k_al=None, u_al=None):
    r = {"op": op, "world": world, "path": path, "fused_ms": fused, "fused_kernel_ms": kernel,
         "unfused_ms": unfused, "kernel_rel_vs_unfused": rel,
         "fused_by_prev_r0": {"fused": kernel, "other": fused}}
    if k_al is not None:
        r.update(fused_kernel_aligned_ms=k_al, unfused_aligned_ms=u_al)
    return "ROW " + json.dumps(r)


def test_verdict_rules():
    v = verdict_module()
    log4 = "\n".join([
        "bench_fused +9.0 s: ...",
        _row("ag_gemm", 4, 12.0, 11.0, 30.0),
        _row("gemm_rs", 4, 31.0, 25.0, 30.0),               # T1 holds (1.033), no gain here
        _row("gemm_ar", 4, 40.0, 30.0, 35.0, path="unfused: measured not faster"),  # T1 fails
        "GATE " + json.dumps({"world": 4, "kernel_gpugate_over_kernel_paired": 0.7,
                              "gpugate_same_bits": True, "fused_kernel_ms": 11.0,
                              "fused_kernel_gpugate_ms": 7.0}),
    ])
    log2 = "\n".join([
        _row("ag_gemm", 2, 9.0, 8.0, 10.5, k_al=6.0, u_al=9.0),  # gain only aligned
        _row("gemm_rs", 2, 20.0, 19.0, 20.5, rel="RuntimeError: boom"),  # C fails
        "GATE " + json.dumps({"world": 2, "kernel_gpugate_over_kernel_paired": 1.01,
                              "gpugate_same_bits": True, "fused_kernel_ms": 8.0,
                              "fused_kernel_gpugate_ms": 8.1}),
    ])
    rows, gates, wait = v.parse([log4, log2])
    assert len(rows) == 5 and len(gates) == 2 and not wait
    assert v.op_verdict("ag_gemm", rows)[0] is True
    flip, why = v.op_verdict("gemm_rs", rows)
    assert not flip and any("C fails" in w for w in why) and any("T2 fails" in w for w in why)
    flip, why = v.op_verdict("gemm_ar", rows)
    assert not flip and why == ["no row at W=2"]
    assert v.gate_verdict(gates, wait)[0] is True
    assert v.gate_verdict(gates, True)[0] is False  # a peer-exit wait record anywhere: no flip
    assert v.gate_verdict(gates[:1], False)[0] is False  # a missing GATE line: no flip
    _, _, wait = v.parse(["mkernel: ... waiting for the peer's previous fused kernel to exit ..."])
    assert wait
    assert "co-tenancy" not in v.gap_reading(json.loads(_row("ag_gemm", 4, 30, 27, 60)[4:]), None)


def test_capture_fd2_keeps_what_a_failing_call_wrote(capfd):
    """s14run1 (xn5_B, xn3_w2): a first call that raised took the lines it had written to fd 2
    (a stuck GPU-direct copy, the proxy's error) with it. capture_fd2 writes them, and the
    on_failure text, before the exception propagates; a call that succeeds returns its text."""
    import os

    import pytest

    bf = bench_fused()

    def failing():
        os.write(2, b"mkernel: GPU-direct copy 7 submitted 5.0 s ago is not done\n")
        raise RuntimeError("CUDA error: unspecified launch failure")

    with pytest.raises(RuntimeError, match="unspecified launch failure"):
        bf.capture_fd2(failing, None, lambda: "inter-node path after the failure: {}\n")
    err = capfd.readouterr().err
    assert "GPU-direct copy 7 submitted 5.0 s ago is not done" in err
    assert "inter-node path after the failure" in err

    def after():
        raise RuntimeError("the sync failed")

    with pytest.raises(RuntimeError, match="the sync failed"):
        bf.capture_fd2(lambda: os.write(2, b"warn line\n"), after, None)
    assert "warn line" in capfd.readouterr().err

    text = bf.capture_fd2(lambda: os.write(2, b"fine\n"), None, None)
    assert text == "fine\n" and "fine" in capfd.readouterr().err
