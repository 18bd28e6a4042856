"""The fused ops on CUDA across W rank processes sharing one GPU under MPS (each rank gets
100/W % of the SMs): tests/gpu/fused_ranks.py runs in every rank against a float64 reference.

Skips without a GPU, and without an MPS control daemon (spinning kernels of processes that
time-slice are correct but take ~5 ms per flag round trip; set MKERNEL_GPU_RANKS_NO_MPS=1 to
run them anyway).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import torch

from tests.launch import run_ranks

RANKS = Path(__file__).with_name("fused_ranks.py")


def mps_running() -> bool:
    pipe = os.environ.get("CUDA_MPS_PIPE_DIRECTORY", "/tmp/nvidia-mps")
    return os.path.exists(os.path.join(pipe, "control"))


needs_gpu_ranks = pytest.mark.skipif(
    not torch.cuda.is_available()
    or not (mps_running() or os.environ.get("MKERNEL_GPU_RANKS_NO_MPS") == "1"),
    reason="needs a CUDA GPU shared by the ranks under MPS",
)


def run(world: int, suite: str, timeout: float = 240.0) -> list[dict]:
    env = {"FUSED_SUITE": suite, "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": str(100 // world)}
    results = run_ranks(RANKS.read_text(), world, timeout=timeout, env=env, fork=False)
    cases = []
    for r in results:
        detail = f"rank {r.rank} (rc {r.returncode}):\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}"
        assert r.returncode == 0, detail
        assert f"OK {r.rank}" in r.stdout, detail
        cases += [json.loads(line.split(" ", 1)[1]) for line in r.stdout.splitlines()
                  if line.startswith(("CASE ", "TIME "))]
    return cases


@needs_gpu_ranks
@pytest.mark.parametrize("world", [2, 4, 8])
def test_ag_gemm(world):
    cases = run(world, "ag")
    assert len(cases) == world * 2 * 5 * 2  # ranks x dtypes x shapes x (out, out_only)


@needs_gpu_ranks
@pytest.mark.parametrize("world", [2, 4, 8])
@pytest.mark.parametrize("op", ["rs", "ar"])
def test_reduce_ops(op, world):
    cases = run(world, op)
    assert len(cases) == world * 2 * 5  # ranks x dtypes x shapes


@needs_gpu_ranks
@pytest.mark.parametrize("world", [2, 4])
def test_graph_replay(world):
    cases = run(world, "graph")
    assert len(cases) == world * (3 + 2 * 2)
