"""Eager CUDA module loading under the loopback transport's GPU-direct emulation with the
in-process copier (``MKERNEL_NET_GDR_COPIER=thread``; the copier process needs none).

``MKERNEL_NET_GDR=1`` on emulated nodes moves each inter-node op's bytes with a copy that the
Go proxy thread submits to the rank's own CUDA context when the emulated link delivers them
(csrc/comm/net_path.cpp ``NetCopier``), while the rank's kernels wait for those bytes. Under lazy
module loading (``CUDA_MODULE_LOADING=LAZY``, CUDA's default) a kernel is loaded at its first
launch, and the load may synchronize the context: a first-time kernel queued behind a waiting
one then holds back every later copy of the proxy, and the waiting kernel never finishes (a stall
until ``MKERNEL_OP_TIMEOUT``; session 11 run 1's graph suite). A real NIC's DMA is no CUDA work,
so only the emulation needs this. Eager loading loads every registered kernel when the context is
created, before anything can wait.

CUDA reads ``CUDA_MODULE_LOADING`` when it initializes, so ``mkernel/__init__`` calls
:func:`eager_loading_for_gdr` before anything of mkernel touches CUDA. A value the user set is
kept (``net_path.cpp`` warns at the path's opening when loading is lazy).
"""

from __future__ import annotations

import os
import sys
from typing import MutableMapping

from . import _env_knobs

ENV = "CUDA_MODULE_LOADING"
GDR_ENV = "MKERNEL_NET_GDR"
COPIER_ENV = "MKERNEL_NET_GDR_COPIER"
PYTHON_ENV = "MKERNEL_PYTHON"
# Where the emulation's copies are submitted when MKERNEL_NET_GDR_COPIER is unset, and whether
# the emulation is on when MKERNEL_NET_GDR is unset (net_path.cpp kCopierProcessByDefault and
# kGpuDirectByDefault say the same).
DEFAULT_COPIER = "process"
GDR_BY_DEFAULT = True


def gdr_requested(environ: MutableMapping[str, str]) -> bool:
    """Whether the GPU-direct emulation is asked for (``MKERNEL_NET_GDR=1``, spaces ignored;
    the same rule as ``net_path.cpp gpu_direct_env``)."""
    v = _env_knobs.get(GDR_ENV, "", environ).strip()
    return GDR_BY_DEFAULT if v == "" else v == "1"


def copier(environ: MutableMapping[str, str]) -> str:
    """Where the emulation's copies are submitted: ``"thread"`` (the proxy thread, into the rank's
    own CUDA context) or ``"process"`` (a helper process per path, another CUDA client)."""
    return _env_knobs.get(COPIER_ENV, "", environ).strip() or DEFAULT_COPIER


def eager_loading_for_gdr(environ: MutableMapping[str, str] | None = None) -> bool:
    """Set ``CUDA_MODULE_LOADING=EAGER`` in ``environ`` (default ``os.environ``) when the
    GPU-direct emulation is asked for with the in-process copier (``copier(environ) ==
    "thread"``) and the variable is unset or empty.

    The copier process needs no eager loading: its copies are work of another CUDA client, so a
    load that synchronizes the rank's context waits for the rank's kernels, which wait for
    copies nothing of the rank holds back; and eager loading of every torch kernel costs each
    rank seconds at start (s11run2: the collectives across nodes took 10.2 s under it, 5.3 s
    staged).

    Returns:
        True when it set the variable, False when it left ``environ`` unchanged.
    """
    env = os.environ if environ is None else environ
    if not gdr_requested(env) or copier(env) != "thread" or env.get(ENV, "").strip():
        return False
    env[ENV] = "EAGER"
    return True


def interpreter_for_gdr(environ: MutableMapping[str, str] | None = None) -> bool:
    """Export this interpreter as ``MKERNEL_PYTHON`` when the GPU-direct emulation is asked for
    and the variable is unset: ``MKERNEL_NET_GDR_COPIER=process`` starts the copier process with
    it (csrc/comm/gdr_copier_process.cpp; a venv's interpreter, which ``/proc/self/exe`` is not).

    Returns:
        True when it set the variable.
    """
    env = os.environ if environ is None else environ
    if not gdr_requested(env) or _env_knobs.get(PYTHON_ENV, "", env).strip() or not sys.executable:
        return False
    env[PYTHON_ENV] = sys.executable
    return True
