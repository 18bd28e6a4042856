"""kernels/moe/moe_net_plan.h (moe10): the pieces, landed rows and areas of the dispatch's headed
gather, and the piecewise row gather built on them, checked on the host by g++
(moe_net_plan_check.cpp; plain C++, no CUDA headers). Skipped without g++."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def test_headed_gather_plan(tmp_path: Path) -> None:
    gxx = shutil.which("g++")
    if gxx is None:
        pytest.skip("needs g++")
    exe = tmp_path / "moe_net_plan_check"
    subprocess.run([gxx, "-std=c++17", "-O1", "-Wall", "-Werror", f"-I{ROOT / 'csrc'}",
                    str(Path(__file__).parent / "moe_net_plan_check.cpp"), "-o", str(exe)],
                   check=True, capture_output=True, timeout=300)
    run = subprocess.run([str(exe)], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0 and run.stdout.strip() == "OK", run.stdout + run.stderr
