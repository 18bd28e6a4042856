"""Where an eager small-M GEMM call spends its time on the host (issue 12 item 3).

    python benchmarks/gemm_host_cost.py [--cases 16x8192x8192,333x8192x8192,333x3584x8192]

Why: the decode bench (`bench_gemm.py --decode`) times each sample as `reps` eager calls after
an event on an idle GPU, so a path's host cost counts there and not in graph replay. In s11
run 1 auto ran 16x8192x8192 in 42.4 us eager where the same kernel pinned (gemm_swap variant
15) ran 38.8 and cuBLAS's F.linear 41.6, while graph replay gave auto and cuBLAS 34.8 us each.
This measures, per path and case, three things the bench folds together:

  enqueue_us  host time per call with the GPU held busy (a long torch.cuda._sleep queued
              first, so no call waits for the GPU): the path's host cost alone;
  gpu_us      GPU time per call, back to back behind that sleep (events after the sleep);
  idle_us     event time of one call issued to an idle GPU (host latency + kernel), median;
              idle_us - gpu_us is what one sample's first call adds in the decode bench.

With --profile, also each path's host time split by the torch profiler (CPU + CUDA runtime
API activity, 20 calls): the op's own time, aten::empty, the CUDA runtime calls (launches,
memsets); what no child claims is the op's C++ and CUTLASS host code (profiler overhead
included: read the split, not the absolute figures).

Paths: auto (mkernel.gemm), auto_op (torch.ops.mkernel.gemm.default: no Python wrapper), the
kernel auto picked pinned (gemm_swap / gemv / the split-K call), F.linear and torch.matmul.
Writes results/gemm_host_cost_*.json.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

import torch
import torch.nn.functional as F

sys.path.insert(0, __file__.rsplit("/", 1)[0])
from common import commit, device_info, write_result  # noqa: E402

import mkernel  # noqa: E402
from bench_gemm import GEMV_VARIANTS, SWAP_VARIANTS  # noqa: E402


def pinned(plan: str, a: torch.Tensor, b: torch.Tensor):
    """The kernel a plan name ('swap_...', 'gemv/...', 'split:...') runs, called directly."""
    name = plan.split()[0]
    if name in SWAP_VARIANTS:
        v = SWAP_VARIANTS.index(name)
        return lambda: torch.ops.mkernel.gemm_swap(a, b, v)
    if name.startswith("gemv/"):
        var, _, splits = name[5:].partition("/k")
        v, s = GEMV_VARIANTS.index(var), int(splits or 1)
        return lambda: torch.ops.mkernel.gemv(a, b, v, s)
    if name.startswith("split:"):
        cfg, _, splits = name[6:].partition("/k")
        return lambda: mkernel.gemm(a, b, config=cfg, splits=int(splits))
    return None


def measure(fn, calls: int, rounds: int, sleep_cycles: int) -> dict:
    enq, gpu, idle = [], [], []
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    for _ in range(rounds):
        torch.cuda.synchronize()
        torch.cuda._sleep(sleep_cycles)  # the GPU busy while the host enqueues
        start.record()
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        t1 = time.perf_counter()
        stop.record()
        stop.synchronize()
        enq.append((t1 - t0) / calls * 1e6)
        gpu.append(start.elapsed_time(stop) / calls * 1e3)
        for _ in range(5):  # one call from an idle GPU
            torch.cuda.synchronize()
            start.record()
            fn()
            stop.record()
            stop.synchronize()
            idle.append(start.elapsed_time(stop) * 1e3)
    return {"enqueue_us": round(statistics.median(enq), 2), "gpu_us": round(statistics.median(gpu), 2),
            "idle_us": round(statistics.median(idle), 2)}


def host_split(fn, calls: int = 20, top: int = 6) -> list:
    """The `top` host-side events of `calls` calls by self CPU time per call (us)."""
    from torch.profiler import ProfilerActivity, profile
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(calls):
            fn()
        torch.cuda.synchronize()
    rows = [(e.key, round(e.count / calls, 1), round(e.self_cpu_time_total / calls, 2),
             round(e.cpu_time_total / calls, 2)) for e in prof.key_averages()
            if e.self_cpu_time_total > 0 and e.key != "cudaDeviceSynchronize"]
    return sorted(rows, key=lambda r: -r[2])[:top]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", default="16x8192x8192,333x8192x8192,333x3584x8192",
                    help="MxNxK list")
    ap.add_argument("--dtype", default="bf16")
    ap.add_argument("--calls", type=int, default=50)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--profile", action="store_true", help="also each path's host time split (torch profiler)")
    args = ap.parse_args()
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}[args.dtype]
    # ~2x the calls' GPU time at ~1.8 GHz, so the host never waits for the GPU while enqueueing
    rows = []
    for case in args.cases.split(","):
        m, n, k = (int(v) for v in case.split("x"))
        g = torch.Generator(device="cuda").manual_seed(m + n + k)
        a = torch.randn(m, k, device="cuda", dtype=dtype, generator=g)
        b = torch.randn(n, k, device="cuda", dtype=dtype, generator=g)
        plan = mkernel.gemm_plan(a, b)  # tunes the shape (not timed)
        op = torch.ops.mkernel.gemm.default
        paths = {"auto": lambda: mkernel.gemm(a, b), "auto_op": lambda: op(a, b),
                 "pinned": pinned(plan, a, b), "linear": lambda: F.linear(a, b),
                 "matmul": lambda: torch.matmul(a, b.T)}
        paths = {p: f for p, f in paths.items() if f is not None}
        for f in paths.values():
            f()
        torch.cuda.synchronize()
        est_us = max(2.0 * n * k / 3.5e12, 2.0 * m * n * k / 600e12) * 1e6
        sleep_cycles = int(2 * args.calls * est_us * 1.8e3)
        row = {"m": m, "n": n, "k": k, "dtype": args.dtype, "plan": plan, "paths": {}}
        for p, f in paths.items():
            row["paths"][p] = measure(f, args.calls, args.rounds, sleep_cycles)
        rows.append(row)
        print(f"{args.dtype} {case} [{plan}]: " + " | ".join(
            f"{p} enq {r['enqueue_us']} gpu {r['gpu_us']} idle {r['idle_us']}"
            for p, r in row["paths"].items()) + " (us/call)", flush=True)
        if args.profile:
            for p, f in paths.items():
                split = host_split(f)
                row["paths"][p]["host_split"] = split
                print(f"  {p} host split (name, calls, self us, total us per call): "
                      + "; ".join(f"{n} {c} {s_} {t}" for n, c, s_, t in split), flush=True)
    path = write_result("gemm_host_cost", {
        "benchmark": "gemm_host_cost", "commit": commit(), "device": device_info(),
        "timing": "enqueue: host perf_counter over `calls` calls behind a GPU sleep; gpu: events "
                  "around them; idle: events around one call on an idle GPU (median)",
        "results": rows})
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
