"""Run a Python snippet as W local rank processes (torchrun-style env), for
multi-process tests. Every rank is gone when the call returns: ranks still
running at the deadline are killed, and ranks die with the launcher
(PR_SET_PDEATHSIG), so a killed test run leaves no orphan behind.

``fork=True`` starts the ranks from one helper process that has imported torch
already (a zygote, like a forkserver): each rank is a fork of it that runs the
snippet, so W ranks pay for one ``import torch`` instead of W — on a 2-core
machine that is most of a multi-process test's time. The Go runtime is never in
the helper (``import mkernel`` happens in the ranks), so forking it is safe. A
rank's atexit handlers run when the snippet ends, as at a normal exit. ``env``
goes into the helper's own environment: the Go runtime reads the environment
the process was started with, not later ``os.environ`` changes, so only the
per-rank variables (RANK, MKERNEL_EMULATED_NODE, ... read by Python and C++)
are set in each fork.
"""

from __future__ import annotations

import ctypes
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass

_PR_SET_PDEATHSIG = 1


@dataclass
class RankResult:
    rank: int
    returncode: int | None  # None: killed at the deadline
    stdout: str
    stderr: str


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _die_with_parent() -> None:
    """preexec_fn: SIGKILL this child when the launching thread exits."""
    ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


def _rank_env(rank: int, world: int, nodes: int, port: int, env: dict[str, str] | None) -> dict:
    per_node = max(1, world // nodes)
    e = dict(RANK=str(rank), WORLD_SIZE=str(world), LOCAL_RANK=str(rank % per_node),
             LOCAL_WORLD_SIZE=str(per_node), MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port),
             MKERNEL_EMULATED_NODE=str(rank // per_node), PYTHONUNBUFFERED="1")
    e.update(env or {})
    return e


def run_ranks(code: str, world: int, timeout: float = 120.0, nodes: int = 1,
              env: dict[str, str] | None = None, skip_ranks: tuple[int, ...] = (),
              fork: bool = False, passthrough: tuple[int, ...] = ()) -> list[RankResult]:
    """Start ``world`` processes running ``code`` (ranks in ``skip_ranks`` are
    never started, to emulate a rank that never comes). Ranks in ``passthrough``
    write straight to this process's stdout / stderr as they run (their
    RankResult holds empty text): what they print is in the caller's log even
    when the caller is killed before the ranks end (benchmarks' --stream)."""
    if fork:
        return _run_forked(code, world, timeout, nodes, env, skip_ranks)
    port = free_port()
    procs: dict[int, subprocess.Popen] = {}
    results = []
    try:
        for rank in range(world):
            if rank in skip_ranks:
                continue
            e = dict(os.environ, **_rank_env(rank, world, nodes, port, env))
            pipe = None if rank in passthrough else subprocess.PIPE
            if pipe is None:  # what is buffered here would land after the rank's own lines
                sys.stdout.flush()
                sys.stderr.flush()
            procs[rank] = subprocess.Popen([sys.executable, "-c", code], env=e, text=True,
                                           stdout=pipe, stderr=pipe,
                                           preexec_fn=_die_with_parent)
        deadline = time.monotonic() + timeout
        for rank, p in procs.items():
            try:
                out, err = p.communicate(timeout=max(0.1, deadline - time.monotonic()))
                results.append(RankResult(rank, p.returncode, out or "", err or ""))
            except subprocess.TimeoutExpired:
                p.kill()
                try:  # a killed CUDA process can take seconds to exit (context teardown)
                    out, err = p.communicate(timeout=5)
                except subprocess.TimeoutExpired:
                    out, err = "", f"(rank {rank}: still exiting 5 s after SIGKILL; output lost)"
                results.append(RankResult(rank, None, out or "", err or ""))
    finally:
        for p in procs.values():
            if p.poll() is None:
                p.kill()
                try:
                    p.wait(timeout=5)
                except subprocess.TimeoutExpired:
                    pass  # SIGKILLed; the kernel reaps it once its GPU context is gone
    return results


# The helper of fork=True. It reads {"code", "timeout", "ranks": [[rank, env, out, err]]} on
# stdin, forks one child per rank and prints {rank: exit code or null} when all are done.
_ZYGOTE = r"""
import atexit, ctypes, json, os, signal, sys, time, traceback
libc = ctypes.CDLL(None, use_errno=True)
libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG: die with the launcher
import torch, torch.distributed  # noqa: F401  (the expensive part, paid once)
spec = json.loads(sys.stdin.read())
code = compile(spec["code"], "<rank>", "exec")
children = {}
for rank, env, out, err in spec["ranks"]:
    pid = os.fork()
    if pid:
        children[pid] = rank
        continue
    rc = 1
    try:
        libc.prctl(1, signal.SIGKILL)
        os.environ.update(env)
        for fd, path in ((1, out), (2, err)):
            f = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            os.dup2(f, fd)
            os.close(f)
        try:
            exec(code, {"__name__": "__main__"})
            rc = 0
        except SystemExit as e:
            if e.code is None or isinstance(e.code, int):
                rc = e.code or 0
            else:
                print(e.code, file=sys.stderr)
                rc = 1
        except BaseException:
            traceback.print_exc()
        atexit._run_exitfuncs()
    finally:
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(rc)
codes = {}
deadline = time.monotonic() + spec["timeout"]
while children:
    pid, status = os.waitpid(-1, os.WNOHANG)
    if pid:
        codes[children.pop(pid)] = os.waitstatus_to_exitcode(status)
    elif time.monotonic() > deadline:
        for pid, rank in children.items():
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            codes[rank] = None
        children.clear()
    else:
        time.sleep(0.01)
print(json.dumps(codes))
"""


def _run_forked(code: str, world: int, timeout: float, nodes: int, env: dict[str, str] | None,
                skip_ranks: tuple[int, ...]) -> list[RankResult]:
    port = free_port()
    with tempfile.TemporaryDirectory(prefix="mkernel-ranks-") as tmp:
        ranks = [[r, _rank_env(r, world, nodes, port, None), os.path.join(tmp, f"{r}.out"),
                  os.path.join(tmp, f"{r}.err")] for r in range(world) if r not in skip_ranks]
        spec = json.dumps({"code": code, "timeout": timeout, "ranks": ranks})
        # A new session: when the helper is killed, its whole process group goes too.
        helper = subprocess.Popen([sys.executable, "-c", _ZYGOTE],
                                  env=dict(os.environ, PYTHONUNBUFFERED="1", **(env or {})),
                                  text=True, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, preexec_fn=_die_with_parent,
                                  start_new_session=True)
        try:
            out, err = helper.communicate(spec, timeout=timeout + 60)
        finally:
            try:
                os.killpg(helper.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            helper.wait()
        try:
            codes = {int(k): v for k, v in json.loads(out.strip().splitlines()[-1]).items()}
        except (ValueError, IndexError) as e:
            raise RuntimeError(f"the rank launcher failed (rc {helper.returncode}): {err[-3000:]}") from e

        def read(path: str) -> str:
            try:
                with open(path, errors="replace") as f:
                    return f.read()
            except FileNotFoundError:
                return ""

        return [RankResult(r, codes.get(r), read(o), read(e)) for r, _, o, e in ranks]
