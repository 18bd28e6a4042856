"""The machine as the Go core sees it: GPUs, NVLink, RDMA NICs, NUMA nodes,
and the NIC / proxy CPUs chosen for each GPU (``gocore/topology``)."""

from __future__ import annotations

import json
from typing import Any

from ._native import core


def topology(sysfs_root: str | None = None) -> dict[str, Any]:
    """Discover this machine's topology.

    Args:
        sysfs_root: read a sysfs tree other than ``/sys`` (tests use fake trees).

    Returns:
        A dict with ``gpus``, ``nics``, ``numa_nodes``, ``placements`` (one per
        GPU: its NIC(s) and proxy CPU cores) and more; see gocore/topology.
    """
    return json.loads(core.TopologyJSON(sysfs_root or ""))
