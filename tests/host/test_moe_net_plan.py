"""kernels/moe/moe_net_plan.h (moe10): the pieces, landed rows and areas of the dispatch's headed
gather, and the piecewise row gather built on them, checked on the host by g++
(moe_net_plan_check.cpp; plain C++, no CUDA headers). Skipped without g++."""

from __future__ import annotations

from pathlib import Path

from tests.host_check import build_check, run_check


def test_headed_gather_plan(tmp_path: Path) -> None:
    exe = build_check(Path(__file__).parent / "moe_net_plan_check.cpp", tmp_path,
                      flags=("-O1", "-Wall", "-Werror"))
    run_check(exe)
