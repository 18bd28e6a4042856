"""``python -m mkernel launch``: W rank processes of one script on this machine.

    python -m mkernel launch --world 4 --nodes 2 --mps script.py args...

Each rank gets the environment ``torchrun`` gives (``RANK``, ``WORLD_SIZE``,
``LOCAL_RANK``, ``LOCAL_WORLD_SIZE``, ``GROUP_RANK``, ``MASTER_ADDR``,
``MASTER_PORT``) plus ``MKERNEL_EMULATED_NODE``: the ranks are split into
``nodes`` contiguous blocks (sizes differ by at most one), and mkernel treats
every block as a node of its own (the inter-node path — FIFO, Go proxy,
transport — runs between blocks). ``NCCL_NVLS_ENABLE=0`` is set for every rank.

With ``--mps`` the ranks share the GPU(s) through the CUDA MPS daemon: the
launcher starts one (pipe and log directories under /tmp) unless one is
already answering on ``CUDA_MPS_PIPE_DIRECTORY`` (or its default), gives each
rank ``CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=100/W`` and stops the daemon at the
end if it started it. Without MPS, spinning kernels of different processes
time-slice (milliseconds per flag round trip).

The launcher forwards SIGINT/SIGTERM/SIGHUP to every rank; when one rank exits
with a non-zero status it terminates the others (SIGTERM, then SIGKILL after
``--grace`` seconds) and returns the first non-zero status (128 + signal for a
rank killed by a signal). Ranks die with the launcher (PR_SET_PDEATHSIG).
"""

from __future__ import annotations

import ctypes
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field

_PR_SET_PDEATHSIG = 1
_DEFAULT_MPS_PIPE = "/tmp/nvidia-mps"
_FORWARDED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


def node_of(rank: int, world: int, nodes: int) -> int:
    """The emulated node of ``rank``: ``nodes`` contiguous blocks of ranks whose sizes
    differ by at most one (the first ``world % nodes`` blocks are one larger)."""
    base, extra = divmod(world, nodes)
    big = extra * (base + 1)  # ranks in the larger blocks
    return rank // (base + 1) if rank < big else extra + (rank - big) // base


def rank_env(rank: int, world: int, nodes: int, master_port: int,
             master_addr: str = "127.0.0.1", mps: bool = False) -> dict[str, str]:
    """The environment variables launch() sets for ``rank`` (on top of its own)."""
    node = node_of(rank, world, nodes)
    members = [r for r in range(world) if node_of(r, world, nodes) == node]
    env = {
        "RANK": str(rank),
        "WORLD_SIZE": str(world),
        "LOCAL_RANK": str(members.index(rank)),
        "LOCAL_WORLD_SIZE": str(len(members)),
        "GROUP_RANK": str(node),
        "MASTER_ADDR": master_addr,
        "MASTER_PORT": str(master_port),
        "MKERNEL_EMULATED_NODE": str(node),
        "NCCL_NVLS_ENABLE": "0",
        "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1",
        "PYTHONUNBUFFERED": "1",
    }
    if mps:
        env["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] = str(max(1, 100 // world))
    return env


def free_port() -> int:
    """A TCP port that was free a moment ago (the rendezvous binds it soon after)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class LaunchError(RuntimeError):
    """The launcher could not start what it was asked to (bad arguments, no MPS)."""


@dataclass
class MpsDaemon:
    """The MPS control daemon the ranks use. ``started``: this launcher started it (and
    stops it at the end); otherwise one was already running on ``pipe_dir``."""

    pipe_dir: str
    log_dir: str
    started: bool = False
    env: dict[str, str] = field(default_factory=dict)

    @staticmethod
    def _control() -> str:
        exe = shutil.which("nvidia-cuda-mps-control")
        if exe is None:
            raise LaunchError("--mps: nvidia-cuda-mps-control is not on PATH (is the NVIDIA driver "
                              "installed? MPS needs a GPU machine)")
        return exe

    def _run(self, command: str, timeout: float = 10.0) -> subprocess.CompletedProcess:
        return subprocess.run([self._control()], input=command + "\n", text=True, env=self.env,
                              capture_output=True, timeout=timeout)

    def answering(self) -> bool:
        """A daemon answers on pipe_dir."""
        if not os.path.exists(os.path.join(self.pipe_dir, "control")):
            return False
        try:
            return self._run("get_server_list", timeout=5.0).returncode == 0
        except (subprocess.TimeoutExpired, OSError):
            return False

    @classmethod
    def ensure(cls, base_env: dict[str, str]) -> "MpsDaemon":
        """Use the daemon of CUDA_MPS_PIPE_DIRECTORY (or /tmp/nvidia-mps) if one answers,
        else start one with pipe/log directories under /tmp/mkernel-mps-<uid>/."""
        root = f"/tmp/mkernel-mps-{os.getuid()}"
        pipe = base_env.get("CUDA_MPS_PIPE_DIRECTORY") or _DEFAULT_MPS_PIPE
        log = base_env.get("CUDA_MPS_LOG_DIRECTORY") or os.path.join(root, "log")
        d = cls(pipe, log, env=dict(base_env, CUDA_MPS_PIPE_DIRECTORY=pipe, CUDA_MPS_LOG_DIRECTORY=log))
        cls._control()
        if d.answering():
            return d
        if not base_env.get("CUDA_MPS_PIPE_DIRECTORY"):
            # Ours, under /tmp (the caller who set the directory gets the daemon there).
            pipe = os.path.join(root, "pipe")
            d = cls(pipe, log, env=dict(base_env, CUDA_MPS_PIPE_DIRECTORY=pipe,
                                        CUDA_MPS_LOG_DIRECTORY=log))
            if d.answering():  # an earlier launch left ours running
                return d
        os.makedirs(d.pipe_dir, mode=0o700, exist_ok=True)
        os.makedirs(d.log_dir, mode=0o700, exist_ok=True)
        r = subprocess.run([cls._control(), "-d"], env=d.env, capture_output=True, text=True, timeout=30)
        if r.returncode != 0:
            raise LaunchError(f"--mps: nvidia-cuda-mps-control -d failed (status {r.returncode}): "
                              f"{(r.stderr or r.stdout).strip()} (log: {d.log_dir})")
        deadline = time.monotonic() + 10.0
        while not d.answering():
            if time.monotonic() > deadline:
                raise LaunchError(f"--mps: the MPS daemon started but does not answer on {d.pipe_dir} "
                                  f"after 10 s (log: {d.log_dir}/control.log)")
            time.sleep(0.1)
        d.started = True
        return d

    def stop(self) -> None:
        """Quit the daemon if this launcher started it (bounded; never raises)."""
        if not self.started:
            return
        self.started = False
        try:
            self._run("quit", timeout=10.0)
            deadline = time.monotonic() + 10.0
            while os.path.exists(os.path.join(self.pipe_dir, "control")) and time.monotonic() < deadline:
                time.sleep(0.1)
        except (subprocess.TimeoutExpired, OSError, LaunchError) as e:
            print(f"mkernel launch: stopping the MPS daemon on {self.pipe_dir}: {e}", file=sys.stderr)


def _die_with_parent() -> None:
    """preexec_fn: the rank gets SIGKILL when the launcher dies."""
    ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


def _status(returncode: int) -> int:
    """A shell-style exit status: 128 + signal for a process killed by one."""
    return 128 - returncode if returncode < 0 else returncode


def _command(argv: list[str]) -> list[str]:
    """``script.py args`` or ``-m module args`` run by this Python; anything else as is
    (an executable)."""
    if not argv:
        raise LaunchError("launch: no script given (python -m mkernel launch [options] script.py args...)")
    if argv[0] == "-m" or argv[0].endswith(".py"):
        return [sys.executable, *argv]
    return list(argv)


def launch(argv: list[str], world: int, nodes: int = 1, mps: bool = False, grace: float = 5.0,
           master_addr: str = "127.0.0.1", master_port: int | None = None,
           env: dict[str, str] | None = None, quiet: bool = False,
           timeout: float | None = None) -> int:
    """Run ``argv`` (``script.py args``, ``-m module args`` or an executable) as ``world``
    ranks split into ``nodes`` emulated nodes; returns 0 or the first non-zero exit status.

    Args:
        argv: what each rank runs.
        world: number of ranks (>= 1).
        nodes: emulated nodes, 1 <= nodes <= world.
        mps: share the GPU(s) through MPS (starting the daemon if none answers).
        grace: seconds between SIGTERM and SIGKILL when stopping the ranks.
        master_addr, master_port: the torch.distributed rendezvous (port: a free one).
        env: extra variables for every rank (on top of this process's environment).
        quiet: no messages of the launcher's own on stderr.
        timeout: seconds after which every rank is stopped and 124 returned (None: none).
    """
    if world < 1:
        raise LaunchError(f"launch: --world must be >= 1, got {world}")
    if not 1 <= nodes <= world:
        raise LaunchError(f"launch: --nodes must be between 1 and --world ({world}), got {nodes}")
    cmd = _command(argv)
    base = dict(os.environ, **(env or {}))
    port = master_port or free_port()

    def say(msg: str) -> None:
        if not quiet:
            print(f"mkernel launch: {msg}", file=sys.stderr, flush=True)

    daemon = MpsDaemon.ensure(base) if mps else None
    if daemon is not None:
        base.update(CUDA_MPS_PIPE_DIRECTORY=daemon.pipe_dir, CUDA_MPS_LOG_DIRECTORY=daemon.log_dir)
        say(f"MPS daemon on {daemon.pipe_dir} ({'started' if daemon.started else 'already running'}), "
            f"{max(1, 100 // world)}% of the SMs per rank")

    procs: dict[int, subprocess.Popen] = {}
    pending: list[int] = []  # signals received, forwarded by the loop below
    old_handlers = {}

    def on_signal(signum, _frame) -> None:
        pending.append(signum)

    first_failure = 0
    try:
        for s in _FORWARDED:
            old_handlers[s] = signal.signal(s, on_signal)
        for rank in range(world):
            e = dict(base, **rank_env(rank, world, nodes, port, master_addr, mps))
            # Own process group: a terminal's Ctrl-C reaches the launcher only, which
            # forwards it once to every rank.
            try:
                procs[rank] = subprocess.Popen(cmd, env=e, preexec_fn=_die_with_parent,
                                               start_new_session=True)
            except OSError as err:
                raise LaunchError(f"launch: cannot start rank {rank} ({' '.join(cmd)}): {err}") from err
        running = dict(procs)
        stopping_since = None
        deadline = None if timeout is None else time.monotonic() + timeout
        while running:
            if deadline is not None and time.monotonic() > deadline and stopping_since is None:
                say(f"timed out after {timeout:.0f} s; stopping {len(running)} rank(s)")
                for p in running.values():
                    _send(p, signal.SIGTERM)
                first_failure = first_failure or 124
                stopping_since = time.monotonic()
            while pending:
                signum = pending.pop(0)
                say(f"forwarding {signal.Signals(signum).name} to {len(running)} rank(s)")
                for p in running.values():
                    _send(p, signum)
                if first_failure == 0:
                    first_failure = 128 + signum
                stopping_since = stopping_since or time.monotonic()
            for rank, p in list(running.items()):
                rc = p.poll()
                if rc is None:
                    continue
                del running[rank]
                if rc != 0 and first_failure == 0:
                    first_failure = _status(rc)
                    say(f"rank {rank} exited with status {_status(rc)}; stopping the other ranks")
                    for q in running.values():
                        _send(q, signal.SIGTERM)
                    stopping_since = time.monotonic()
            if running and stopping_since is not None and time.monotonic() - stopping_since > grace:
                say(f"{len(running)} rank(s) still running {grace:.0f} s after SIGTERM: killing them")
                for p in running.values():
                    _send(p, signal.SIGKILL)
                stopping_since = float("inf")  # killed: just reap them
            if running:
                time.sleep(0.02)
    finally:
        for p in procs.values():
            if p.poll() is None:
                _send(p, signal.SIGKILL)
                p.wait()
        for s, h in old_handlers.items():
            signal.signal(s, h)
        if daemon is not None:
            daemon.stop()
    return first_failure


def _send(p: subprocess.Popen, signum: int) -> None:
    """Signal a rank's whole process group (its children too); never raises."""
    try:
        os.killpg(p.pid, signum)
    except (ProcessLookupError, PermissionError):
        pass


_VALUED = ("--world", "--nodes", "--grace", "--timeout", "--master-addr", "--master-port")
_FLAGS = ("--mps", "-h", "--help")


def split_argv(argv: list[str]) -> tuple[list[str], list[str]]:
    """(launcher options, rank command): the command starts at the first argument that is
    not a launcher option (or after ``--``), so ``-m module`` and the script's own options
    pass through untouched."""
    i = 0
    while i < len(argv):
        a = argv[i]
        if a == "--":
            return argv[:i], argv[i + 1:]
        if a in _FLAGS or any(a.startswith(o + "=") for o in _VALUED):
            i += 1
        elif a in _VALUED:
            i += 2
        else:
            break
    return argv[:i], argv[i:]


def main(argv: list[str]) -> int:
    """The ``launch`` subcommand: parses its own options, the rest is the rank command."""
    import argparse

    parser = argparse.ArgumentParser(
        prog="python -m mkernel launch [options] script.py args... | -m module args...",
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--world", type=int, required=True, help="number of ranks (processes)")
    parser.add_argument("--nodes", type=int, default=1, help="emulated nodes the ranks are split into")
    parser.add_argument("--mps", action="store_true",
                        help="share the GPU through MPS (starts the daemon if none is running)")
    parser.add_argument("--grace", type=float, default=5.0,
                        help="seconds between SIGTERM and SIGKILL when stopping ranks")
    parser.add_argument("--timeout", type=float, default=None,
                        help="stop every rank after this many seconds (exit status 124)")
    parser.add_argument("--master-addr", default="127.0.0.1")
    parser.add_argument("--master-port", type=int, default=None)
    opts, command = split_argv(argv)
    args = parser.parse_args(opts)
    try:
        return launch(command, args.world, args.nodes, mps=args.mps, grace=args.grace,
                      master_addr=args.master_addr, master_port=args.master_port,
                      timeout=args.timeout)
    except LaunchError as e:
        print(f"mkernel {e}", file=sys.stderr)
        return 2
