"""Host checks of device-side headers: a plain C++ program (tests/**/*_check.cpp) that includes a
csrc header, exercises it and prints "OK", compiled by g++ and run. Shared by the tests that
check a kernel's plan, route or protocol logic on a machine without a GPU; skips without g++."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# The CUDA toolchain's headers (cccl) that CuTe includes, where `make cuda-check` unpacked them.
CCCL = ROOT / "build" / "cuda-toolchain" / "nvidia" / "cu13" / "include"


def cutlass_include() -> Path | None:
    """The nvidia-cutlass wheel's include folder (CuTe), or None where it is not installed."""
    try:
        import cutlass_library
    except ImportError:
        return None
    inc = Path(cutlass_library.__file__).parent / "source" / "include"
    return inc if (inc / "cute" / "tensor.hpp").exists() else None


def build_check(source: Path, out_dir: Path, *, includes: tuple[Path, ...] = (),
                flags: tuple[str, ...] = ("-O1",)) -> Path:
    """Compile ``source`` (C++17, csrc/ and ``includes`` on the include path) into ``out_dir``;
    the executable's path. Skips the calling test where g++ is missing."""
    gxx = shutil.which("g++")
    if gxx is None:
        pytest.skip("needs g++")
    exe = out_dir / source.stem
    cmd = [gxx, "-std=c++17", *flags, *(f"-I{p}" for p in (*includes, ROOT / "csrc")), str(source),
           "-o", str(exe)]
    built = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert built.returncode == 0, f"{source.name} did not compile:\n{built.stderr[-4000:]}"
    return exe


def run_check(exe: Path, *, timeout: float = 120) -> None:
    """Run a built check; it must exit 0 and print exactly "OK"."""
    run = subprocess.run([str(exe)], capture_output=True, text=True, timeout=timeout)
    assert run.returncode == 0 and run.stdout.strip() == "OK", run.stdout[-3000:] + run.stderr
