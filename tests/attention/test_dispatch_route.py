"""attention_dispatch.cu's routing on the host (attn12): compiled by g++ with stub kernel entries
(dispatch_route_check.cpp). A default with claimed tiles (variant bit 12, attention_api.h) must
reach the claimed variant with its counter and the static kernel without one (ring attention's
per-step engine calls pass none), hooked calls and other dtypes / head dims / tiles never claim,
and uses_tile_counter (the glue's allocation) agrees. Skipped without g++ or the CUDA headers."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from .test_attention_bwd_layouts import CCCL, ROOT


def test_dispatch_routes_claimed_defaults(tmp_path: Path) -> None:
    gxx = shutil.which("g++")
    if gxx is None or not (CCCL / "cuda_runtime.h").exists():
        pytest.skip("needs g++ and build/cuda-toolchain's CUDA headers")
    exe = tmp_path / "dispatch_route_check"
    subprocess.run([gxx, "-std=c++17", "-O1", f"-I{CCCL / 'cccl'}", f"-I{CCCL}", f"-I{ROOT / 'csrc'}",
                    str(Path(__file__).parent / "dispatch_route_check.cpp"), "-o", str(exe)],
                   check=True, capture_output=True, timeout=300)
    run = subprocess.run([str(exe)], capture_output=True, text=True, timeout=60)
    assert run.returncode == 0 and run.stdout.strip() == "OK", run.stdout + run.stderr
