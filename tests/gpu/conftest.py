"""Multi-rank GPU tests: W rank processes sharing the GPU(s) under MPS.

Without MPS, spinning kernels of different processes on one GPU time-slice (~5 ms per flag round
trip): correct but far too slow for these tests, so they need the MPS control daemon. The
``mps`` fixture reuses a running daemon when CUDA_MPS_PIPE_DIRECTORY names one, else starts its
own with pipe and log directories under /tmp and stops it at the end of the session. Each rank
gets CUDA_MPS_ACTIVE_THREAD_PERCENTAGE = 100 / W (its share of the SMs).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import pytest
import torch

from tests.host.conftest import check_ranks, records  # noqa: F401  (shared by the GPU suites)

ROOT = Path(__file__).resolve().parents[2]

RANK_MAIN = f"""
import sys
sys.path.insert(0, {str(ROOT)!r})
from tests.gpu.rank_collectives import main
main()
"""

needs_gpu = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


@pytest.fixture(scope="session")
def mps():
    """The environment that makes a rank process an MPS client: {CUDA_MPS_PIPE_DIRECTORY, ...}."""
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    running = os.environ.get("CUDA_MPS_PIPE_DIRECTORY")
    if running and Path(running, "control").exists():
        yield {"CUDA_MPS_PIPE_DIRECTORY": running,
               "CUDA_MPS_LOG_DIRECTORY": os.environ.get("CUDA_MPS_LOG_DIRECTORY", running)}
        return
    control = shutil.which("nvidia-cuda-mps-control")
    if control is None:
        pytest.skip("needs MPS (nvidia-cuda-mps-control not found)")
    base = tempfile.mkdtemp(prefix="mkernel-mps-")
    env = {"CUDA_MPS_PIPE_DIRECTORY": f"{base}/pipe", "CUDA_MPS_LOG_DIRECTORY": f"{base}/log"}
    for d in env.values():
        os.makedirs(d, exist_ok=True)
    full = dict(os.environ, **env)
    r = subprocess.run([control, "-d"], env=full, capture_output=True, text=True, timeout=30)
    if r.returncode != 0:
        pytest.skip(f"cannot start the MPS daemon: {r.stdout}{r.stderr}")
    for _ in range(100):  # the daemon creates its control pipe asynchronously
        if Path(env["CUDA_MPS_PIPE_DIRECTORY"], "control").exists():
            break
        time.sleep(0.05)
    try:
        yield env
    finally:
        subprocess.run([control], input="quit\n", env=full, capture_output=True, text=True,
                       timeout=60)
        keep = os.environ.get("MKERNEL_TEST_MPS_LOGS")  # a folder to copy the MPS logs into
        if keep:
            shutil.copytree(env["CUDA_MPS_LOG_DIRECTORY"], keep, dirs_exist_ok=True)
        shutil.rmtree(base, ignore_errors=True)


def rank_env(mps_env: dict, world: int, **extra: str) -> dict:
    return dict(mps_env, CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=str(max(1, 100 // world)),
                NCCL_NVLS_ENABLE="0", **extra)




def check_killed_rank(results, victim: int, timeout_s: float) -> list[dict]:
    """The checks of a killed-rank test (rank `victim` SIGKILLed itself mid-op; every other rank
    printed ``ERR {json}`` with "s" (seconds to fail) and "record" (its wait record or None)):
    the victim died by SIGKILL, every survivor exited 0 after failing within the op timeout
    (+ slack), and a record, where present, names the victim. Returns the survivors' first ERR."""
    errs = []
    for r in results:
        if r.rank == victim:
            assert r.returncode == -9, f"victim rc {r.returncode}\n{r.stderr[-3000:]}"
            continue
        assert r.returncode == 0, (f"rank {r.rank}: rc={r.returncode}\n{r.stdout[-2000:]}\n"
                                   f"{r.stderr[-3000:]}")
        found = records(r, "ERR")
        assert found, f"rank {r.rank} did not fail:\n{r.stdout[-2000:]}"
        e = found[0]
        print(f"rank {r.rank}: {e}")
        assert e["s"] < timeout_s + 30, e
        if e["record"] is not None:
            assert f"peer rank {victim}" in e["record"], e
        errs.append(e)
    return errs
