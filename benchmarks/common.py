"""Shared timing and result-writing helpers for the benchmarks (data first:
every figure goes to JSON; plots and tables are made from the JSON)."""

from __future__ import annotations

import contextlib
import json
import os
import platform
import shutil
import statistics
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Callable, Iterator

import torch

RESULTS = Path(__file__).resolve().parent / "results"

# The fused ops' verdict cache (csrc/fused_verdict_store.h) lets a verdict stored by an earlier run
# stand in for the first call's measurement: the benchmarks time that first call as a fresh job
# meets it, and read its "measured" lines, unless the caller sets the variable.
os.environ.setdefault("MKERNEL_FUSED_VERDICT_CACHE", "0")


def commit() -> str:
    # The GPU machine gets a copy of the working tree whose git metadata may be
    # stale: the launcher passes the real commit in MKERNEL_COMMIT.
    if os.environ.get("MKERNEL_COMMIT"):
        return os.environ["MKERNEL_COMMIT"]
    try:
        return subprocess.check_output(["git", "rev-parse", "--short", "HEAD"], text=True,
                                       cwd=Path(__file__).parent, stderr=subprocess.DEVNULL).strip()
    except Exception:
        return os.environ.get("MKERNEL_COMMIT", "unknown")


def device_info() -> dict:
    info = {"host": platform.node(), "torch": torch.__version__, "cuda": torch.version.cuda}
    if torch.cuda.is_available():
        p = torch.cuda.get_device_properties(0)
        # gpus: the host's GPU count (runs on a 1-GPU and a 2-GPU H200 host differed: NOTES.md).
        info.update(gpu=p.name, sm_count=p.multi_processor_count, capability=f"{p.major}.{p.minor}",
                    gpus=torch.cuda.device_count())
    # A dev build (setup.py, MKERNEL_DEV_BUILD=1) has no swapped-operand GEMM variants: its small-M
    # figures are not the engine's.
    import mkernel
    info["dev_build"] = (Path(mkernel.__file__).parent / "_dev_build").exists()
    return info


@contextlib.contextmanager
def env_set(env: dict[str, str]) -> Iterator[None]:
    """Sets the variables of `env` for the duration of the block and restores each one (unset
    ones are removed again) afterwards, also when the block raises."""
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def cuda_median_ms(fns: list[Callable[[], object]], warmup: int = 10, iters: int = 30) -> dict:
    """Median/min/p90 of CUDA-event times; fns are rotated (one per input set)
    so repeated runs don't measure a cache-resident input."""
    for i in range(warmup):
        fns[i % len(fns)]()
    torch.cuda.synchronize()
    times = []
    for i in range(iters):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fns[i % len(fns)]()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    times.sort()
    return {"median_ms": statistics.median(times), "min_ms": times[0],
            "p90_ms": times[int(0.9 * (len(times) - 1))], "iters": iters}


def init_rank():  # -> mkernel's group context
    """A benchmark rank process's set-up: the gloo process group (torchrun / tests.launch
    variables), its GPU (LOCAL_RANK modulo the visible GPUs: under MPS every rank shares GPU 0)
    and ``mkernel.init()``; returns the group context (``world_size``, ``rank``)."""
    import torch.distributed as dist

    import mkernel

    dist.init_process_group("gloo")
    torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")) % torch.cuda.device_count())
    return mkernel.init()


def interleaved_ms(cands: dict[str, list[Callable[[], object]]], warmup: int = 3,
                   iters: int = 30, reps: int = 1, lead_cycles: int = 0,
                   shuffle_seed: int | None = None) -> dict[str, dict]:
    """CUDA-event times of several candidates measured in turn, iteration by
    iteration (the order rotates), so a clock or neighbour change during the
    run reaches every candidate alike; each candidate's fns rotate over input
    sets as in cuda_median_ms. With reps > 1 each sample is `reps` calls
    back to back divided by reps: the host runs ahead of the GPU, as in a
    training step, so launch overhead stops counting for short kernels.

    lead_cycles > 0: a GPU spin of that many clock cycles (torch.cuda._sleep) is queued before
    each sample's start event, so the host enqueues the start event and the candidate's
    launches while the GPU is still busy: the sample is the candidate's GPU time alone, none of
    its host-side cost (Python wrapper, op dispatch, an env switch) — which otherwise counts in
    full, every sample being timed from an idle GPU. shuffle_seed: each iteration's order is a
    seeded shuffle instead of a rotation (a rotation gives every candidate nearly always the same
    predecessor, e.g. the slow FA2 kernel before the column after it)."""
    import random
    names = list(cands)
    rng = random.Random(shuffle_seed) if shuffle_seed is not None else None
    for i in range(warmup):
        for n in names:
            cands[n][i % len(cands[n])]()
    torch.cuda.synchronize()
    times: dict[str, list[float]] = {n: [] for n in names}
    for i in range(iters):
        if rng is not None:
            order = names[:]
            rng.shuffle(order)
        else:
            order = names[i % len(names):] + names[:i % len(names)]
        for n in order:
            fns = cands[n]
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            if lead_cycles > 0:
                torch.cuda._sleep(lead_cycles)
            start.record()
            for r in range(reps):
                fns[(i * reps + r) % len(fns)]()
            end.record()
            end.synchronize()
            times[n].append(start.elapsed_time(end) / reps)
    out = {}
    for n, ts in times.items():
        ts.sort()
        out[n] = {"median_ms": statistics.median(ts), "min_ms": ts[0],
                  "p90_ms": ts[int(0.9 * (len(ts) - 1))], "iters": iters, "reps": reps}
    return out


def add_timing(row: dict, times: dict, flops: float) -> None:
    """Each candidate's median of `times` (interleaved_ms) into `row` as ``<name>_ms`` and, for
    `flops` floating-point operations a call, ``<name>_tflops``."""
    for name, t in times.items():
        row[f"{name}_ms"] = t["median_ms"]
        row[f"{name}_tflops"] = flops / (t["median_ms"] * 1e-3) / 1e12


def write_result(name: str, payload: dict) -> Path:
    """results/<name>_<gpu>_<time>.json (and a copy in $OUT where the device machine sets it)."""
    RESULTS.mkdir(parents=True, exist_ok=True)
    gpu = (payload.get("device", {}).get("gpu") or "cpu").replace(" ", "_").lower()
    path = RESULTS / f"{name}_{gpu}_{time.strftime('%Y%m%d-%H%M%S')}.json"
    path.write_text(json.dumps(payload, indent=2))
    out = os.environ.get("OUT")  # the device machine's returned folder: a copy comes back
    if out and Path(out).resolve() != RESULTS.resolve():
        shutil.copy(path, out)
    return path


def start_mps(tool: str) -> tuple[dict, Callable[[], None]]:
    """The environment that makes a rank process an MPS client, and how to stop the daemon.

    A daemon already answering on CUDA_MPS_PIPE_DIRECTORY is used as it is (and left running);
    otherwise one is started with pipe/log folders in a fresh /tmp directory of this run (never
    the default /tmp/nvidia-mps, which every CUDA process without the variable would join).
    ``tool`` names the benchmark in the error when MPS is missing."""
    running = os.environ.get("CUDA_MPS_PIPE_DIRECTORY")
    if running and Path(running, "control").exists():
        return {"CUDA_MPS_PIPE_DIRECTORY": running}, lambda: None
    control = shutil.which("nvidia-cuda-mps-control")
    if control is None:
        raise SystemExit(f"{tool}: ranks sharing a GPU need MPS (nvidia-cuda-mps-control not found)")
    base = tempfile.mkdtemp(prefix="mkernel-mps-")
    env = {"CUDA_MPS_PIPE_DIRECTORY": f"{base}/pipe", "CUDA_MPS_LOG_DIRECTORY": f"{base}/log"}
    for d in env.values():
        os.makedirs(d, exist_ok=True)
    full = dict(os.environ, **env)
    subprocess.run([control, "-d"], env=full, check=True, timeout=30)
    for _ in range(100):  # the daemon creates its control pipe asynchronously
        if Path(env["CUDA_MPS_PIPE_DIRECTORY"], "control").exists():
            break
        time.sleep(0.05)

    def stop() -> None:
        subprocess.run([control], input="quit\n", env=full, text=True, capture_output=True, timeout=60)
        shutil.rmtree(base, ignore_errors=True)

    return env, stop


@contextlib.contextmanager
def mps_daemon(tool: str) -> Iterator[dict]:
    """start_mps as a context manager: yields the MPS client environment, stops what it started."""
    env, stop = start_mps(tool)
    try:
        yield env
    finally:
        stop()


def copier_delta(before: str | dict, after: str | dict) -> dict:
    """The GPU-direct copier's work between two ``_net_path_info`` readings (xnode7): how its
    copies were submitted ("ran": batch_ce = the copy engines, memcpy = plain cudaMemcpyAsync as
    asked, memcpy_fallback = the batch API absent or refused, with its note), the copies and MiB
    in between, and their mean latency (submission to completion seen) and mean service time
    (completion minus the later of submission and the previous completion) in microseconds, and
    the helper's submissions (batches, MKERNEL_NET_GDR_COPIER_BATCH) with their host time.
    Empty when the path is not GPU-direct (no ``copier_submit``)."""
    def sub(x):
        info = json.loads(x) if isinstance(x, str) else x
        return (info or {}).get("copier_submit") or {}
    a, b = sub(before), sub(after)
    if not b:
        return {}
    n = b.get("copies", 0) - a.get("copies", 0)
    lat = b.get("latency_ms_total", 0.0) - a.get("latency_ms_total", 0.0)
    svc = b.get("service_ms_total", 0.0) - a.get("service_ms_total", 0.0)
    subs = b.get("submits", 0) - a.get("submits", 0)
    sub_ms = b.get("submit_ms_total", 0.0) - a.get("submit_ms_total", 0.0)
    return {"where": b.get("where"), "asked": b.get("asked"), "ran": b.get("ran"), "note": b.get("note", ""),
            "copies": n, "mib": round(b.get("mib", 0.0) - a.get("mib", 0.0), 3),
            "latency_us_mean": round(1e3 * lat / n, 2) if n > 0 else None,
            "service_us_mean": round(1e3 * svc / n, 2) if n > 0 else None,
            "latency_us_max_so_far": b.get("latency_us_max"), "service_us_max_so_far": b.get("service_us_max"),
            # the helper's submissions in between (batches of posted copies, one event each) and the
            # host time of their CUDA calls: a slow copy's time splits into the call's and the GPU's
            "submits": subs, "copies_per_submit": round(n / subs, 2) if subs > 0 else None,
            "submit_us_mean": round(1e3 * sub_ms / subs, 2) if subs > 0 else None}
