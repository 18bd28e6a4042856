"""Loads mkernel's two native parts, in order, and connects them.

1. ``mkernel._C`` (the torch extension) registers ``torch.ops.mkernel.*``.
2. ``mkernel._gocore`` (gopy bindings) brings in ``libmkernel_core.so``: the
   one Go runtime of the process.
3. The address of the Go library's C ABI table (``mk_api_v1``) is handed to the
   torch extension, which never links Go itself: two Go runtimes in one
   process would deadlock, so there must be exactly one path to Go.
"""

from __future__ import annotations

import glob
import os

import torch

_HERE = os.path.dirname(os.path.abspath(__file__))


def _load_torch_extension() -> None:
    candidates = sorted(glob.glob(os.path.join(_HERE, "_C*.so")))
    if not candidates:
        raise ImportError(
            f"mkernel: the torch extension mkernel._C is not built (no _C*.so in {_HERE}); "
            "run `make install` (or `pip install .`)")
    torch.ops.load_library(candidates[0])


def _load_core():
    try:
        from ._gocore import pyapi  # gopy-generated; imports _core and libmkernel_core.so
    except ImportError as e:  # pragma: no cover - exercised only on broken installs
        raise ImportError(
            "mkernel: the Go control plane (mkernel._gocore, libmkernel_core.so) failed to load: "
            f"{e}. Rebuild with `make install`; on a machine without Go, copy build/core from a "
            "machine with Go 1.26 first.") from e
    return pyapi


_load_torch_extension()
core = _load_core()
API_VERSION: int = int(torch.ops.mkernel._bind_core(int(core.CoreAPIAddress())))
