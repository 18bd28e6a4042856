"""python -m mkernel doctor: findings, exit status, fake machines."""

import ctypes.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

SYSFS = Path(__file__).resolve().parents[2] / "gocore" / "topology" / "testdata" / "sysfs"


def doctor(*args, **env):
    e = dict(os.environ)
    e.pop("NCCL_NVLS_ENABLE", None)
    e.update(env)
    return subprocess.run([sys.executable, "-m", "mkernel", "doctor", *args], capture_output=True,
                          text=True, timeout=120, env=e)


def test_healthy_machine_exits_zero():
    r = doctor(NCCL_NVLS_ENABLE="0")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "result: ok" in r.stdout


def test_nvls_on_is_broken():
    r = doctor("--json", NCCL_NVLS_ENABLE="1")
    assert r.returncode == 1
    rep = json.loads(r.stdout)
    bad = [f for f in rep["findings"] if f["status"] == "error"]
    assert any(f["check"] == "env.NCCL_NVLS_ENABLE" for f in bad), bad


def test_bad_log_level_is_broken():
    r = doctor("--json", NCCL_NVLS_ENABLE="0", MKERNEL_LOG_LEVEL="loud")
    assert r.returncode == 1
    assert any(f["check"] == "env.MKERNEL_LOG_LEVEL" for f in json.loads(r.stdout)["findings"])


@pytest.mark.parametrize("machine,gpus,nics", [("dgx-h200", 8, 8), ("p5-efa", 8, 16), ("laptop", 1, 0)])
def test_fake_machines(machine, gpus, nics):
    r = doctor("--json", "--sysfs", str(SYSFS / machine), NCCL_NVLS_ENABLE="0")
    rep = json.loads(r.stdout)
    topo = rep["topology"]
    assert len(topo["gpus"]) == gpus and len(topo["nics"]) == nics
    assert len(topo["placements"]) == gpus
    kinds = {n["kind"] for n in topo["nics"]}
    missing_lib = any(ctypes.util.find_library(k) is None for k in kinds)
    assert r.returncode == (1 if missing_lib else 0), r.stdout
    if missing_lib:
        assert any(f["check"].startswith("transport.") and f["status"] == "error" for f in rep["findings"])


def test_half_gemm_check_catches_a_wrong_matmul():
    """The torch.half_gemm finding's measure: right (bf16 rounding) for torch's own CPU matmul,
    far past the tolerance for a matmul that is wrong the way cuBLAS was on an MPS share (one
    row of the reduction dropped), and inf where it returns non-finite values."""
    import torch

    from mkernel._local_gemm import HALF_GEMM_TOL as _HALF_GEMM_TOL, half_gemm_errors

    right = half_gemm_errors("cpu")
    assert len(right) == 12 and max(right.values()) < _HALF_GEMM_TOL / 4, right
    assert min(right.values()) > 0  # half-precision rounding, not a float64 product

    dropped = half_gemm_errors("cpu", lambda a, b: torch.matmul(a[:, 1:], b[1:]))
    assert all(v > 2 * _HALF_GEMM_TOL for v in dropped.values()), dropped  # ~1/sqrt(C)

    def nan_corner(a, b):
        out = torch.matmul(a, b)
        out[0, 0] = float("nan")
        return out

    assert all(v == float("inf") for v in half_gemm_errors("cpu", nan_corner).values())
