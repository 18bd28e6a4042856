"""kernels/moe/moe_fused_tiles.h (session 28): the M-tile numbering the MoE fused dispatch's side
warps walk (each tile's expansion and flag) against the packed scheduler's own Work::tile (the
flag its producer waits for), over random row segments and both cluster shapes, checked on the
host by g++ (moe_fused_tiles_check.cpp, with the CuTe headers the scheduler includes). A
mismatch would leave a producer waiting for a flag no warp sets. Skipped where g++, the
nvidia-cutlass headers or the CUDA toolchain's cccl headers (build/cuda-toolchain) are missing."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.host_check import CCCL, build_check, cutlass_include, run_check


def test_side_walk_numbers_tiles_as_the_scheduler(tmp_path: Path) -> None:
    cutlass = cutlass_include()
    if cutlass is None or not (CCCL / "cccl").is_dir():
        pytest.skip("needs the nvidia-cutlass headers and build/cuda-toolchain's cccl")
    exe = build_check(Path(__file__).parent / "moe_fused_tiles_check.cpp", tmp_path,
                      includes=(cutlass, CCCL / "cccl", CCCL), flags=("-O1", "-Wall"))
    run_check(exe)
