"""benchmarks/common.py's MPS helper (start_mps / mps_daemon), which the multi-rank benchmarks
share, against test_launch's stand-in nvidia-cuda-mps-control (the real one needs a GPU)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
from test_launch import _FAKE_MPS  # tests/core is on sys.path (pytest's rootdir-relative import)

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
import common  # noqa: E402


@pytest.fixture
def fake_control(tmp_path, monkeypatch):
    bindir = tmp_path / "bin"
    bindir.mkdir()
    exe = bindir / "nvidia-cuda-mps-control"
    exe.write_text(_FAKE_MPS.format(python=sys.executable))
    exe.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bindir}:{os.environ['PATH']}")
    monkeypatch.delenv("CUDA_MPS_PIPE_DIRECTORY", raising=False)
    monkeypatch.delenv("CUDA_MPS_LOG_DIRECTORY", raising=False)


def test_a_private_daemon_is_started_and_stopped(fake_control):
    with common.mps_daemon("bench_x") as env:
        pipe = Path(env["CUDA_MPS_PIPE_DIRECTORY"])
        assert (pipe / "control").exists()
        assert pipe.parent.name.startswith("mkernel-mps-")  # never the default /tmp/nvidia-mps
        assert Path(env["CUDA_MPS_LOG_DIRECTORY"], "calls").read_text().splitlines() == ["-d"]
    assert not pipe.parent.exists()  # quit, and its folder removed


def test_a_running_daemon_is_reused_and_left_running(fake_control, tmp_path, monkeypatch):
    pipe = tmp_path / "pipe"
    pipe.mkdir()
    (pipe / "control").touch()
    monkeypatch.setenv("CUDA_MPS_PIPE_DIRECTORY", str(pipe))
    env, stop = common.start_mps("bench_x")
    assert env == {"CUDA_MPS_PIPE_DIRECTORY": str(pipe)}
    stop()
    assert (pipe / "control").exists()


def test_no_mps_names_the_benchmark(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))  # no nvidia-cuda-mps-control anywhere
    monkeypatch.delenv("CUDA_MPS_PIPE_DIRECTORY", raising=False)
    with pytest.raises(SystemExit, match="bench_x: ranks sharing a GPU need MPS"):
        common.start_mps("bench_x")
