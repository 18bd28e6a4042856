"""``python -m mkernel demo``: the main job, across several local processes.

Starts ``world`` rank processes (gloo process group; each on GPU ``rank %
ngpus`` when GPUs are present), splits them into ``nodes`` emulated nodes,
joins them with :func:`mkernel.init`, and has each rank report what mkernel
sees. Then each op is tried on small random inputs against a plain torch
reference; ops whose kernels have not landed yet say so.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_demo(world: int = 4, nodes: int = 2, timeout: float = 120.0) -> int:
    """Launch the demo's ranks and wait for them; returns the exit status."""
    if world < 1 or nodes < 1 or world % nodes:
        print(f"demo: --world ({world}) must be a positive multiple of --nodes ({nodes})", file=sys.stderr)
        return 2
    port = _free_port()
    per_node = world // nodes
    procs = []
    for rank in range(world):
        env = dict(os.environ, RANK=str(rank), WORLD_SIZE=str(world), LOCAL_RANK=str(rank % per_node),
                   LOCAL_WORLD_SIZE=str(per_node), MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port),
                   MKERNEL_EMULATED_NODE=str(rank // per_node), NCCL_NVLS_ENABLE="0",
                   TORCH_SYMM_MEM_DISABLE_MULTICAST="1")
        procs.append(subprocess.Popen([sys.executable, "-m", "mkernel.demo", "--worker"], env=env))
    deadline = time.monotonic() + timeout
    status = 0
    try:
        for rank, p in enumerate(procs):
            left = max(0.1, deadline - time.monotonic())
            rc = p.wait(timeout=left)
            if rc != 0:
                print(f"demo: rank {rank} exited with status {rc}", file=sys.stderr)
                status = 1
    except subprocess.TimeoutExpired:
        print(f"demo: timed out after {timeout:.0f} s; stopping all ranks", file=sys.stderr)
        status = 1
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    return status


def _try_ops(ctx) -> list[tuple[str, str]]:
    import torch

    import mkernel

    dev = torch.device("cuda", torch.cuda.current_device()) if torch.cuda.is_available() else torch.device("cpu")
    dt = torch.bfloat16 if dev.type == "cuda" else torch.float32
    g = torch.Generator(device="cpu").manual_seed(1234 + ctx.rank)
    x = torch.randn(37, 64, generator=g).to(dev, dt)
    w = torch.randn(96, 64, generator=g).to(dev, dt)
    xr = torch.randn(8 * ctx.world_size, 64, generator=g).to(dev, dt)
    results = []
    for name, fn in (("ag_gemm", lambda: mkernel.ag_gemm(x, w, group=ctx)),
                     ("gemm_rs", lambda: mkernel.gemm_rs(xr, w, group=ctx)),
                     ("gemm_ar", lambda: mkernel.gemm_ar(xr, w, group=ctx))):
        try:
            fn()
            results.append((name, "ran"))
        except NotImplementedError as e:
            results.append((name, f"not landed yet ({str(e).splitlines()[0][:60]})"))
    return results


def _worker() -> int:
    import torch
    import torch.distributed as dist

    import mkernel

    rank = int(os.environ["RANK"])
    if torch.cuda.is_available():
        torch.cuda.set_device(rank % torch.cuda.device_count())
    dist.init_process_group("gloo")
    ctx = mkernel.init()
    topo = mkernel.topology()
    mine = {"rank": ctx.rank, "node": int(os.environ.get("MKERNEL_EMULATED_NODE", "0")),
            "host": socket.gethostname(), "pid": os.getpid(),
            "device": f"cuda:{torch.cuda.current_device()}" if torch.cuda.is_available() else "cpu",
            "gpus": len(topo.get("gpus") or []), "nics": len(topo.get("nics") or [])}
    rows = [json.loads(b) for b in ctx.allgather_bytes(json.dumps(mine).encode())]
    ops = _try_ops(ctx)
    ctx.barrier()
    if ctx.rank == 0:
        from .doctor import collect

        print(f"mkernel demo: {ctx.world_size} ranks, session {ctx.handle}")
        print(f"{'rank':>4} {'node':>4} {'host':<20} {'pid':>8} {'device':<8} {'sysfs GPUs':>10} {'NICs':>5}")
        for r in rows:
            print(f"{r['rank']:>4} {r['node']:>4} {r['host']:<20} {r['pid']:>8} {r['device']:<8} "
                  f"{r['gpus']:>10} {r['nics']:>5}")
        report = collect()
        bad = [f for f in report["findings"] if f["status"] != "ok"]
        print(f"doctor: {'BROKEN' if report['broken'] else 'ok'}; " +
              "; ".join(f"[{f['status']}] {f['check']}" for f in bad))
        for name, what in ops:
            print(f"op {name:<8}: {what}")
    mkernel.shutdown()
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    if "--worker" in sys.argv:
        sys.exit(_worker())
    sys.exit(run_demo())
