"""The MKERNEL_* environment variables the Python package reads: each one declared and
documented in :data:`KNOBS` and read through :func:`get` (the mirror of csrc/env_knobs.cpp, which
holds the C++ side's; the Go core's are read in gocore). House style: env variables only for log
level, rendezvous address and documented debug overrides, read in one file.
tests/core/test_env_knobs.py checks that every MKERNEL_* literal of python/mkernel is registered
here or in the C++ table.

Plain Python without package imports: ``ops.py`` loads it as a lone file when it is itself
loaded as one.
"""

from __future__ import annotations

import os
from typing import Mapping, NamedTuple, Optional

DEBUG = "debug"  # a documented debug / measurement override
CONFIG = "config"  # user configuration (rendezvous, logging, paths, the emulated node)


class Knob(NamedTuple):
    name: str
    kind: str  # DEBUG or CONFIG
    values: str  # the allowed values or the value's syntax
    default: str  # what unset means
    doc: str  # one line: what it does


KNOBS: dict[str, Knob] = {k.name: k for k in (
    Knob("MKERNEL_ATTN_BWD", DEBUG, "auto|torch|flash|native", "ops.ATTENTION_BACKWARD (auto)",
         "mkernel.attention's backward on CUDA (ops.py, read at each backward call)"),
    Knob("MKERNEL_LOCAL_GEMM", DEBUG, "auto|torch|engine", "auto",
         "the fused ops' backward GEMMs: torch.matmul, or the engine where torch's half GEMM is wrong "
         "on this GPU share (_local_gemm.py)"),
    Knob("MKERNEL_RING_BWD_GROUPS", DEBUG, "0|1", "1",
         "0: the ring backward runs one call per (query, key) block, not per group (_ring_backward.py)"),
    Knob("MKERNEL_BOOTSTRAP_HOST", CONFIG, "host name or address",
         "this host's address on the route to MASTER_ADDR",
         "where a group's first rank binds its rendezvous (runtime.py)"),
    Knob("MKERNEL_DEMO_REQUIRE_ALL", DEBUG, "0|1", "0",
         "the demo's workers fail where an op was skipped (set by `mkernel demo --require-all`)"),
    Knob("MKERNEL_EMULATED_NODE", CONFIG, "node id", "0",
         "this rank's emulated node (set per rank by `mkernel launch`; demo.py reports it)"),
    Knob("MKERNEL_LOG_FORMAT", CONFIG, "console|json", "console",
         "the log format (read by the Go core; doctor.py reports it)"),
    Knob("MKERNEL_LOG_LEVEL", CONFIG, "debug|info|warn|error", "warn",
         "the log level (read by the Go core; doctor.py checks it)"),
    Knob("MKERNEL_NET_GDR", CONFIG, "0|1", "1 (GDR_BY_DEFAULT)",
         "the loopback transport's GPU-direct emulation (_module_loading.py, as net_path.cpp)"),
    Knob("MKERNEL_NET_GDR_COPIER", CONFIG, "thread|process", "process",
         "where the GPU-direct emulation's copies are submitted (_module_loading.py)"),
    Knob("MKERNEL_PYTHON", CONFIG, "path", "set to this interpreter under MKERNEL_NET_GDR",
         "the interpreter of the Python fallback copier helper (_module_loading.py)"),
    Knob("MKERNEL_WORLD_SIZE", CONFIG, "integer >= 1", "unset: torch.distributed, else one rank",
         "set: mkernel.init's standalone rendezvous from the MKERNEL_* variables (runtime.py)"),
)}


def get(name: str, default: Optional[str] = None,
        environ: Optional[Mapping[str, str]] = None) -> Optional[str]:
    """``environ.get(name, default)`` (``os.environ`` unless given) for a registered name.

    Raises:
        ValueError: ``name`` is not in :data:`KNOBS` (a programming error).
    """
    if name not in KNOBS:
        raise ValueError(f"mkernel: env variable {name} is read but not registered in "
                         "python/mkernel/_env_knobs.py")
    return (os.environ if environ is None else environ).get(name, default)
