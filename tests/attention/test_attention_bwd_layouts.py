"""The native backward's smem views and fragment assumptions, checked on the host (CPU): compiles
bwd_layouts_check.cpp / bwd_sm90_layouts_check.cpp (the mma.sync / wgmma kernels) against the
CuTe headers with g++ and runs it. Skipped where g++, the nvidia-cutlass headers or the CUDA
toolchain's cccl headers (build/cuda-toolchain) are missing."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CCCL = ROOT / "build" / "cuda-toolchain" / "nvidia" / "cu13" / "include"


def _cutlass_include() -> Path | None:
    try:
        import cutlass_library
    except ImportError:
        return None
    inc = Path(cutlass_library.__file__).parent / "source" / "include"
    return inc if (inc / "cute" / "tensor.hpp").exists() else None


@pytest.mark.parametrize("check", ["bwd_layouts_check", "bwd_sm90_layouts_check"])
def test_bwd_smem_views_and_fragments(check: str, tmp_path: Path) -> None:
    """bwd_layouts_check: the mma.sync kernel's; bwd_sm90_layouts_check: the wgmma kernel's."""
    cutlass = _cutlass_include()
    gxx = shutil.which("g++")
    if cutlass is None or gxx is None or not (CCCL / "cccl").is_dir():
        pytest.skip("needs g++, the nvidia-cutlass headers and build/cuda-toolchain's cccl")
    exe = tmp_path / check
    subprocess.run([gxx, "-std=c++17", "-O1", f"-I{cutlass}", f"-I{CCCL / 'cccl'}", f"-I{CCCL}",
                    f"-I{ROOT / 'csrc'}", str(Path(__file__).parent / f"{check}.cpp"),
                    "-o", str(exe)], check=True, capture_output=True, timeout=300)
    run = subprocess.run([str(exe)], capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stdout + run.stderr
