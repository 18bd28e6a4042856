"""mkernel's process state: :func:`init` joins the ranks of a process group
into a control-plane session (Go bootstrap), :func:`shutdown` leaves it.

Under ``torchrun`` the normal path reuses the running ``torch.distributed``
store: the group's first rank (its rank 0, which for a sub-group may live on
another node than the job's rank 0) opens the Go rendezvous on its own host's
address and publishes its id (root address + per-job secret) in the store
under a key unique to the group's member list; every rank joins with it. Without
``torch.distributed``, :func:`init` reads ``MKERNEL_RANK`` /
``MKERNEL_WORLD_SIZE`` / ``MKERNEL_BOOTSTRAP_ADDR`` / ``MKERNEL_JOB_SECRET``
(the Go core's standalone rendezvous), or runs as a world of one.
"""

from __future__ import annotations

import atexit
import base64
import hashlib
import json
import os
import socket
import threading
from datetime import timedelta
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.distributed as dist

from . import __version__, _env_knobs
from ._logging import get_logger
from ._native import core

_log = get_logger("runtime")
_lock = threading.RLock()
_contexts: dict[int, "Context"] = {}
_default: "Context | None" = None
_init_seq: dict[tuple[int, ...], int] = {}  # inits per member list: equal on every member

DEFAULT_TIMEOUT_S = 300.0


class MkernelError(RuntimeError):
    """A control-plane failure (timeout, dead peer, mismatched ranks, ...)."""


@dataclass(eq=False)
class Context:
    """One group's mkernel state; pass it as ``group=`` to the ops.

    Attributes:
        handle: the Go session's handle (also what the C++ ops receive).
        rank: this process's rank in the group.
        world_size: number of ranks in the group.
        peers: per-rank identity records gathered at init (host, pid, versions).
    """

    handle: int
    rank: int
    world_size: int
    pg: Any = None
    peers: list[dict] = field(default_factory=list)
    closed: bool = False

    def allgather_bytes(self, blob: bytes, timeout: float = DEFAULT_TIMEOUT_S) -> list[bytes]:
        """All-gather one opaque blob per rank through the Go session (rank order)."""
        self._check_open()
        text = core.SessionAllGather(self.handle, base64.b64encode(blob).decode(), int(timeout * 1000))
        return [base64.b64decode(x) for x in json.loads(text)]

    def barrier(self, timeout: float = DEFAULT_TIMEOUT_S) -> None:
        """Wait until every rank of the group reaches this barrier."""
        self._check_open()
        core.SessionBarrier(self.handle, int(timeout * 1000))

    def reserve(self, nbytes: int) -> None:
        """Pre-size the group's symmetric GPU memory to at least ``nbytes`` per rank, on the
        current CUDA device (a collective: every rank calls it with the same ``nbytes``).

        The collectives grow it on demand, but not while a CUDA graph is being captured: call
        this before capturing with the largest call's size (the capture error names it). When
        the group spans several (emulated) nodes it also sizes the inter-node staging areas for
        a collective of ``nbytes``.
        """
        self._check_open()
        torch.ops.mkernel._reserve(self.handle, self.world_size, int(nbytes))

    def close(self) -> None:
        """Leave the session (idempotent)."""
        global _default
        with _lock:
            if self.closed:
                return
            self.closed = True
            _contexts.pop(self.handle, None)
            if _default is self:
                _default = None
        _release_op_state(self.handle)
        core.SessionDestroy(self.handle)

    def _check_open(self) -> None:
        if self.closed:
            raise MkernelError("mkernel context is closed (shutdown() was called)")


def _release_op_state(handle: int) -> None:
    """Close the data paths the ops opened for this group (the host reference backend's, see
    csrc/host_reference.h). Waits (bounded) until the peers finished their in-flight commands."""
    try:
        torch.ops.mkernel._release_group(handle)
    except Exception as e:  # at interpreter exit peers may be gone already
        _log.debug(f"closing the ops' data paths of session {handle}: {e}")


def _route_address(peer: str) -> str | None:
    """This host's address on the route to ``peer`` (no packet is sent), or None."""
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.connect((socket.gethostbyname(peer), int(os.environ.get("MASTER_PORT") or 29500)))
            return s.getsockname()[0]
    except OSError:
        return None


def _rendezvous_host() -> str:
    """The address a group's first rank binds its rendezvous on: an interface of ITS OWN host,
    reachable by the group's other ranks.

    MKERNEL_BOOTSTRAP_HOST (per host) if set; else this host's address on the route to
    MASTER_ADDR (the interface the job's traffic uses; on a one-box job, loopback) — never
    MASTER_ADDR itself, which is the job's rank 0 and may be another node; else the address
    of this host's name; else loopback.
    """
    host = _env_knobs.get("MKERNEL_BOOTSTRAP_HOST")
    if host:
        try:
            return socket.gethostbyname(host)
        except OSError as e:
            raise MkernelError(f"mkernel.init: cannot resolve MKERNEL_BOOTSTRAP_HOST={host!r}: {e}") from e
    master = os.environ.get("MASTER_ADDR")
    if master:
        addr = _route_address(master)
        if addr:
            return addr
    try:
        return socket.gethostbyname(socket.gethostname())
    except OSError:
        return "127.0.0.1"


def _store_key(ranks: list[int], seq: int) -> str:
    """The store key of a group's rendezvous id: every member rank (hashed), their count, and
    the group's init count. Two different member lists never share a key, whatever their size."""
    digest = hashlib.sha256(",".join(map(str, ranks)).encode()).hexdigest()[:24]
    return f"mkernel/bootstrap/{digest}x{len(ranks)}/{seq}"


def _store_for(pg) -> Any:
    from torch.distributed import distributed_c10d as c10d

    return c10d._get_default_store()


def _identity() -> dict:
    return {
        "host": socket.gethostname(),
        "pid": os.getpid(),
        "mkernel": __version__,
        "core": core.Version(),
        "torch": torch.__version__,
    }


def _check_peers(ctx: Context) -> None:
    """Every rank must run the same mkernel and torch builds."""
    mine = ctx.peers[ctx.rank]
    for r, p in enumerate(ctx.peers):
        for key in ("mkernel", "core", "torch"):
            if p.get(key) != mine.get(key):
                raise MkernelError(
                    f"mkernel.init: rank {r} on {p.get('host')} (pid {p.get('pid')}) runs {key} "
                    f"{p.get(key)!r} but rank {ctx.rank} runs {mine.get(key)!r}: mismatched ranks")


def init(group: Any = None, *, timeout: float = DEFAULT_TIMEOUT_S) -> Context:
    """Join the ranks of ``group`` into an mkernel control-plane session.

    Args:
        group: a ``torch.distributed`` process group; ``None`` means the default
            (WORLD) group when ``torch.distributed`` is initialized, else the
            standalone rendezvous from ``MKERNEL_*`` environment variables, else
            a world of one.
        timeout: seconds to wait for every rank; the error names missing ranks.

    Returns:
        The group's :class:`Context`. Calling ``init`` again for the default
        group returns the existing context (idempotent).
    """
    global _default
    with _lock:
        if group is None and _default is not None and not _default.closed:
            return _default
        timeout_ms = int(timeout * 1000)
        if dist.is_available() and dist.is_initialized():
            pg = group if group is not None else dist.group.WORLD
            rank, world = dist.get_rank(pg), dist.get_world_size(pg)
            ranks = dist.get_process_group_ranks(pg)
            # Counted per member list: ranks outside a sub-group do not count its inits, so a
            # process-wide counter would give the next common group different keys.
            seq = _init_seq[tuple(ranks)] = _init_seq.get(tuple(ranks), 0) + 1
            key = _store_key(ranks, seq)
            store = _store_for(pg)
            if rank == 0:  # the group's first rank (global rank ranks[0]), wherever it lives
                host = _rendezvous_host()
                job_id = core.BootstrapListen(host, world)
                _log.info(f"group {ranks[:8]}{'...' if len(ranks) > 8 else ''} ({world} ranks): "
                          f"rendezvous on {host}")
                store.set(key, job_id)
            else:
                store.wait([key], timedelta(seconds=timeout))
                job_id = store.get(key).decode()
            handle = core.SessionCreate(job_id, rank, world, timeout_ms)
        elif group is not None:
            raise ValueError("mkernel.init: group given but torch.distributed is not initialized")
        elif _env_knobs.get("MKERNEL_WORLD_SIZE"):
            pg = None
            handle = core.SessionCreateFromEnv(timeout_ms)
            rank, world = core.SessionRank(handle), core.SessionWorld(handle)
        else:
            pg, rank, world = None, 0, 1
            job_id = core.BootstrapListen("127.0.0.1", 1)
            handle = core.SessionCreate(job_id, 0, 1, timeout_ms)
        ctx = Context(handle=int(handle), rank=rank, world_size=world, pg=pg)
        _contexts[ctx.handle] = ctx
        try:
            blobs = ctx.allgather_bytes(json.dumps(_identity()).encode(), timeout)
            ctx.peers = [json.loads(b) for b in blobs]
            _check_peers(ctx)
        except Exception:
            ctx.close()
            raise
        if group is None:
            _default = ctx
        _log.info(f"joined session {ctx.handle}: rank {rank} of {world}")
        return ctx


def current_group() -> Context:
    """The default context, as set by :func:`init` without a group."""
    ctx = _default
    if ctx is None or ctx.closed:
        raise RuntimeError("mkernel.init() has not been called (or mkernel.shutdown() was)")
    return ctx


def shutdown() -> None:
    """Close every mkernel context of this process. Idempotent; runs at exit."""
    with _lock:
        ctxs = list(_contexts.values())
    for ctx in ctxs:
        try:
            ctx.close()
        except Exception as e:  # at interpreter exit peers may be gone already
            _log.debug(f"shutdown: closing session {ctx.handle}: {e}")


atexit.register(shutdown)
