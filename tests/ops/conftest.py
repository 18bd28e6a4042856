"""Loads mkernel's op layer for the tests in this folder, the way the package does.

``import mkernel`` loads the extension ``mkernel._C`` (``torch.ops.load_library``), which
registers ``torch.ops.mkernel.*``. Where the package is not built yet, or its Go half cannot load
on this machine, the extension's sources are JIT-built instead (same sources, same registrations)
and ``mkernel.ops`` is imported from its file. Neither path needs the Go library to run these
tests: the ops are checked through their schemas, validators and fake kernels.

``MKERNEL_TEST_JIT=1`` skips the package and always JIT-builds csrc/, to test edited sources
without reinstalling; an installed ``_C`` older than csrc/ gets a warning.
"""

from __future__ import annotations

import glob
import importlib
import importlib.util
import os
import sys
import warnings
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class Extension:
    """How the op layer was loaded for this test session."""

    ops: ModuleType  # mkernel.ops (the public wrappers)
    library: str  # path of the shared library that registered torch.ops.mkernel
    from_package: bool  # True: `import mkernel` loaded it; False: JIT-built from csrc/


def _ops_registered() -> bool:
    return hasattr(torch.ops.mkernel, "ag_gemm")


def _jit_build() -> None:
    from torch.utils.cpp_extension import load

    cflags = ["-O1"]
    if torch.cuda.is_available():
        cflags.append("-DMKERNEL_WITH_CUDA=1")
    load(
        name="mkernel_C_jit",
        sources=sorted(glob.glob(str(ROOT / "csrc" / "*.cpp")) + glob.glob(str(ROOT / "csrc" / "comm" / "*.cpp"))),
        extra_include_paths=[str(ROOT / "csrc"), str(ROOT / "csrc" / "include")],
        is_python_module=False,
        extra_cflags=cflags,
    )


def _import_ops_from_file() -> ModuleType:
    path = ROOT / "python" / "mkernel" / "ops.py"
    spec = importlib.util.spec_from_file_location("_mkernel_ops_standalone", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses/typing resolve names through sys.modules
    spec.loader.exec_module(module)
    # The MoE ops' fake kernel and autograd live in Python (mkernel/_moe_registry.py).
    reg = importlib.util.spec_from_file_location(
        "_mkernel_moe_registry_standalone", ROOT / "python" / "mkernel" / "_moe_registry.py")
    reg.loader.exec_module(importlib.util.module_from_spec(reg))
    return module


def _warn_if_stale(library: str) -> None:
    sources = glob.glob(str(ROOT / "csrc" / "*.cpp")) + glob.glob(str(ROOT / "csrc" / "*.h"))
    newest = max(sources, key=os.path.getmtime)
    if os.path.getmtime(newest) > os.path.getmtime(library):
        warnings.warn(
            f"{library} is older than {newest}: these tests run the installed build; "
            "rebuild it (make install) or set MKERNEL_TEST_JIT=1",
            stacklevel=1,
        )


def _load() -> Extension:
    python_dir = str(ROOT / "python")
    if python_dir not in sys.path:
        sys.path.insert(0, python_dir)
    from_package = False
    if os.environ.get("MKERNEL_TEST_JIT") != "1":
        try:
            import mkernel  # noqa: F401  (loads _C, then binds the Go core)

            from_package = True
        except Exception:  # not built yet, or the Go half is missing on this machine
            pass
    if not _ops_registered():
        from_package = False
        _jit_build()
    assert _ops_registered(), "torch.ops.mkernel.ag_gemm is not registered after loading"
    libraries = [
        p
        for p in torch.ops.loaded_libraries
        if "mkernel" in Path(p).name.lower() or "mkernel" in str(Path(p).parent)
    ]
    assert libraries, f"no mkernel library among {torch.ops.loaded_libraries}"
    if from_package:
        _warn_if_stale(libraries[0])
    ops = importlib.import_module("mkernel.ops") if from_package else _import_ops_from_file()
    return Extension(ops=ops, library=libraries[0], from_package=from_package)


@pytest.fixture(scope="session")
def ext() -> Extension:
    return _load()


@pytest.fixture(scope="session")
def ops(ext: Extension) -> ModuleType:
    """The public wrappers, mkernel.ops."""
    return ext.ops


@pytest.fixture(scope="session", autouse=True)
def _loaded(ext: Extension) -> None:
    """Every test here needs torch.ops.mkernel registered."""
