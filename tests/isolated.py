"""`@isolated`: run a test in a child process of its own.

For the GPU tests whose kernel may trap. A bounded device wait that times out (by design, or
because what should have released it never ran) ends in a trap, and a trap kills the process's
CUDA context: every later CUDA call of that process fails, so one trapped test would turn the
rest of the suite into errors (device run s6run1: one trap, 119 errors). In a child the trap
costs that one test.

The child is `python -m pytest <the same node id>` from the repository root with
MKERNEL_TEST_ISOLATED=1, where the decorated function simply runs; its outcome becomes the
parent's: passed, failed (with the child's report), skipped (with the child's reason). A child
that exits by a signal, or passes and then aborts on a dead context, fails the test.

The child never joins an MPS server (trap_safe_env): under MPS a fatal fault of one client ends
every client of the GPU, other jobs' processes included (device run s6run2 ran tests/gemm, whose
deliberate-timeout test traps, beside MPS jobs that lost their contexts); a process with a
context of its own takes only itself down.
"""

from __future__ import annotations

import contextlib
import functools
import os
import re
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

CHILD_ENV = "MKERNEL_TEST_ISOLATED"
ROOT = Path(__file__).resolve().parents[1]  # pytest's rootdir: node ids are relative to it
_SKIP_REASON = re.compile(r"^SKIPPED \[\d+\] \S+?:\d+: (.*)$", re.MULTILINE)
_TAIL_CHARS = 6000


def in_child() -> bool:
    return os.environ.get(CHILD_ENV) == "1"


def current_node_id() -> str:
    """The running test's node id ("tests/x.py::test_y[param]"), from pytest's own
    PYTEST_CURRENT_TEST ("<node id> (call)")."""
    current = os.environ.get("PYTEST_CURRENT_TEST")
    if not current:
        raise RuntimeError("@isolated: not running under pytest (no PYTEST_CURRENT_TEST)")
    return current.rsplit(" ", 1)[0]


@contextlib.contextmanager
def trap_safe_env(extra: dict[str, str] | None = None) -> Iterator[dict[str, str]]:
    """The environment for a child process that may trap: this one's, with CUDA_MPS_PIPE_DIRECTORY
    at an empty directory of its own, where no MPS control daemon listens, so the child's CUDA
    context is a plain one even while an MPS server runs (the GPU's compute mode is left as it
    is: several contexts share it by time slicing)."""
    with tempfile.TemporaryDirectory(prefix="mkernel-no-mps-") as empty:
        yield {**os.environ, "CUDA_MPS_PIPE_DIRECTORY": empty, **(extra or {})}


def run_in_child(node_id: str, timeout_s: float, extra_env: dict[str, str] | None = None) -> None:
    """Runs `node_id` in a fresh interpreter (trap_safe_env) and re-raises its outcome here
    (pytest.fail or pytest.skip; returns when it passed)."""
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--tb=short", "-rs",
           node_id]
    try:
        with trap_safe_env({CHILD_ENV: "1", **(extra_env or {})}) as env:
            r = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True,
                               timeout=timeout_s)
    except subprocess.TimeoutExpired as e:
        out = e.stdout.decode(errors="replace") if isinstance(e.stdout, bytes) else (e.stdout or "")
        pytest.fail(f"isolated child ran past {timeout_s:.0f} s (killed): {node_id}\n"
                    f"{out[-_TAIL_CHARS:]}", pytrace=False)
    output = r.stdout + r.stderr
    lines = r.stdout.strip().splitlines()
    summary = lines[-1] if lines else ""  # pytest -q's last line: "1 passed in 3.1s"
    if r.returncode == 0 and re.search(r"\b1 skipped\b", summary) and "passed" not in summary:
        reasons = _SKIP_REASON.findall(output)
        pytest.skip(f"(isolated child) {reasons[0] if reasons else summary}")
    if r.returncode == 0 and re.search(r"\b1 passed\b", summary):
        return
    how = f"exit status {r.returncode}" if r.returncode >= 0 else f"signal {-r.returncode}"
    pytest.fail(f"isolated child failed ({how}): {node_id}\n{output[-_TAIL_CHARS:]}", pytrace=False)


def isolated(timeout_s: float = 120.0):
    """Decorator: the test runs in a child process (see the module docstring). timeout_s bounds
    the child, start-up included; keep it above the longest device wait the test arms, so a trap
    is reported by the child rather than cut short by the parent."""

    def decorate(test):
        @functools.wraps(test)  # keeps the signature: pytest still resolves params and fixtures
        def run(*args, **kwargs):
            if in_child():
                return test(*args, **kwargs)
            run_in_child(current_node_id(), timeout_s)
            return None

        return run

    return decorate
