"""The package imports, its two native parts are connected, one Go runtime."""

import subprocess
import sys

import torch

import mkernel
from mkernel import _native


def test_versions_and_abi():
    assert mkernel.__version__ == _native.core.Version()
    assert _native.API_VERSION == 3
    # The torch extension reads the version through the C table it was handed.
    assert torch.ops.mkernel.core_version() == _native.core.Version()


def test_ops_registered():
    for op in ("ag_gemm", "gemm_rs", "gemm_ar", "moe_dispatch_gemm", "moe_combine", "ring_attention"):
        assert hasattr(torch.ops.mkernel, op), op


def test_one_go_runtime_in_process():
    """libmkernel_core.so is mapped once: the gopy module and the torch
    extension share it (two Go runtimes in one process deadlock)."""
    maps = open("/proc/self/maps").read()
    paths = {line.split()[-1] for line in maps.splitlines() if "libmkernel_core" in line}
    assert len(paths) == 1, paths
    # The torch extension itself must not link a Go runtime.
    so = [line.split()[-1] for line in maps.splitlines() if "/_C" in line and line.endswith(".so")]
    assert so, "mkernel._C not mapped"
    out = subprocess.run(["ldd", so[0]], capture_output=True, text=True).stdout
    assert "libmkernel_core" not in out


def test_import_and_exit_clean_subprocess():
    """Import, init a world of one, and exit without calling shutdown: the
    atexit hook must close the session and the process must end promptly."""
    code = "import mkernel; c = mkernel.init(); assert c.world_size == 1; print('ok')"
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "ok"
