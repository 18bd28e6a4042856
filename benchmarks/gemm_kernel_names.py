"""Which GPU kernels cuBLAS (F.linear) and ours run at the small-M decode shapes, with their
launch geometry and GPU time (issue 12 item 3: what does cuBLAS run at 333 tokens?).

    python benchmarks/gemm_kernel_names.py [--shapes 333x8192x8192,333x3584x8192] [--dtypes bf16]
        [--swap 1,10,17,18] [--calls 30] [--json PATH]

Per shape and dtype, each path (F.linear, mkernel.gemm auto, the pinned swapped variants) runs
`calls` times on rotating operand sets under torch.profiler; from the exported trace every GPU
kernel's name, grid, block, registers per thread, dynamic shared memory and median duration are
printed (one line per distinct kernel; memsets and copies too). cuBLAS's Hopper kernel names
carry their tile (e.g. nvjet_..._<M>x<N>_<K>x<stages>_<cluster>...), which is the point: the
tile, stages and grid cuBLAS picks where our swapped 128x176 tile runs ~7% slower.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile

import torch
import torch.nn.functional as F

sys.path.insert(0, __file__.rsplit("/", 1)[0])
import mkernel  # noqa: E402
from bench_gemm import SWAP_VARIANTS  # noqa: E402

DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}


def kernels_of(fn, calls: int) -> list[dict]:
    """The GPU kernels (and memsets/copies) fn launches, aggregated by name over `calls` calls."""
    for _ in range(3):  # warm (autotuning, first-call set-up) outside the trace
        fn(0)
    torch.cuda.synchronize()
    acts = [torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA]
    with torch.profiler.profile(activities=acts) as prof:
        for i in range(calls):
            fn(i)
        torch.cuda.synchronize()
    fd, path = tempfile.mkstemp(suffix=".json")
    os.close(fd)
    try:
        prof.export_chrome_trace(path)
        with open(path) as f:
            events = json.load(f)["traceEvents"]
    finally:
        os.unlink(path)
    by_name: dict[str, dict] = {}
    for e in events:
        if e.get("ph") != "X" or e.get("cat") not in ("kernel", "gpu_memset", "gpu_memcpy"):
            continue
        a = e.get("args", {})
        row = by_name.setdefault(e["name"], {
            "name": e["name"], "cat": e["cat"], "grid": a.get("grid"), "block": a.get("block"),
            "regs": a.get("registers per thread"), "smem": a.get("shared memory"), "durs": []})
        row["durs"].append(float(e.get("dur", 0.0)))
    out = []
    for row in by_name.values():
        durs = row.pop("durs")
        row["count"] = len(durs)
        row["median_us"] = round(statistics.median(durs), 2)
        out.append(row)
    return sorted(out, key=lambda r: -r["median_us"] * r["count"])


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--shapes", default="333x8192x8192,333x3584x8192", help="MxNxK,...")
    ap.add_argument("--dtypes", default="bf16")
    ap.add_argument("--swap", default="1,10,17,18,19,20", help="pinned swapped variants to list too")
    ap.add_argument("--calls", type=int, default=30)
    ap.add_argument("--json", default="", help="also write every row here")
    args = ap.parse_args()
    rows = []
    for dname in args.dtypes.split(","):
        dtype = DTYPES[dname]
        for shape in args.shapes.split(","):
            m, n, k = (int(v) for v in shape.split("x"))
            sets = [(torch.randn(m, k, device="cuda", dtype=dtype),
                     torch.randn(n, k, device="cuda", dtype=dtype)) for _ in range(4)]
            paths = {"linear": lambda i: F.linear(*sets[i % 4]),
                     "auto": lambda i: mkernel.gemm(*sets[i % 4])}
            for v in (int(x) for x in args.swap.split(",") if x):
                paths[f"swap:{v} {SWAP_VARIANTS[v]}"] = (
                    lambda i, v=v: torch.ops.mkernel.gemm_swap(*sets[i % 4], v))
            for path, fn in paths.items():
                try:
                    ks = kernels_of(fn, args.calls)
                except (RuntimeError, ValueError) as e:
                    print(f"{dname} {shape} {path}: failed: {str(e).splitlines()[0]}", flush=True)
                    continue
                plan = mkernel.gemm_plan(*sets[0]) if path == "auto" else ""
                for r in ks:
                    r.update({"dtype": dname, "shape": shape, "path": path, "plan": plan})
                    rows.append(r)
                    print(f"{dname} {shape} {path}{' [' + plan + ']' if plan else ''}: "
                          f"{r['median_us']:8.2f} us x{r['count']} grid {r['grid']} block {r['block']} "
                          f"regs {r['regs']} smem {r['smem']} | {r['name'][:160]}", flush=True)
            del sets
    if args.json:  # the results' common header (device, commit), then the rows
        from common import commit, device_info
        with open(args.json, "w") as f:
            json.dump({"benchmark": "gemm_kernel_names", "device": device_info(), "commit": commit(),
                       "rows": rows}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
