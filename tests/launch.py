"""Run a Python snippet as W local rank processes (torchrun-style env), for
multi-process tests. Every rank is killed when the call returns."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from dataclasses import dataclass


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


def run_ranks(code: str, world: int, timeout: float = 120.0, nodes: int = 1,
              env: dict[str, str] | None = None, skip_ranks: tuple[int, ...] = ()) -> list[RankResult]:
    """Start ``world`` processes running ``code`` (ranks in ``skip_ranks`` are
    never started, to emulate a rank that never comes)."""
    port = free_port()
    per_node = max(1, world // nodes)
    procs: dict[int, subprocess.Popen] = {}
    for rank in range(world):
        if rank in skip_ranks:
            continue
        e = dict(os.environ, RANK=str(rank), WORLD_SIZE=str(world), LOCAL_RANK=str(rank % per_node),
                 LOCAL_WORLD_SIZE=str(per_node), MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port),
                 MKERNEL_EMULATED_NODE=str(rank // per_node), PYTHONUNBUFFERED="1")
        e.update(env or {})
        procs[rank] = subprocess.Popen([sys.executable, "-c", code], env=e, text=True,
                                       stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    deadline = time.monotonic() + timeout
    results = []
    for rank, p in procs.items():
        try:
            out, err = p.communicate(timeout=max(0.1, deadline - time.monotonic()))
            results.append(RankResult(rank, p.returncode, out, err))
        except subprocess.TimeoutExpired:
            p.kill()
            out, err = p.communicate()
            results.append(RankResult(rank, None, out, err))
    return results
