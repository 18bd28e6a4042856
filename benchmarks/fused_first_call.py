"""What the first call of a fused op costs a new process, with and without the verdict cache
(session 55, csrc/fused_verdict_store.h).

The first eager call of a shape measures fused against unfused on every rank (choose_path's
paired rounds, 1-4 s at the Llama shapes, after the GEMM tuner's warm-up for a new GEMM shape).
Since session 55 the verdict goes to $MKERNEL_CACHE_DIR/fused_verdicts.json and the next process
of the same job, device and build reuses it once every rank found the same one; the GEMM plans
already went to gemm_plans.json. Run it several times on one cache directory and compare:

    d=$(mktemp -d)
    MKERNEL_CACHE_DIR=$d MKERNEL_FUSED_VERDICT_CACHE=1 python -m mkernel launch --world 2 --mps \\
        benchmarks/fused_first_call.py --label fresh      # nothing stored: tunes and measures
    MKERNEL_CACHE_DIR=$d MKERNEL_FUSED_VERDICT_CACHE=1 python -m mkernel launch ... --label stored
    MKERNEL_CACHE_DIR=$d MKERNEL_FUSED_VERDICT_CACHE=0 python -m mkernel launch ... --label plans-only

Per op (Llama-70B shapes, fused_power.py's llama_case), every rank: a barrier, the first call,
a synchronize (wall time, the slowest rank's), then the same for the second call and the median
of 5 more (the steady state the first call must reach); and whether the verdict was stored or
measured (MKERNEL_FUSED_VERBOSE's lines are the test's business: here the wall times only).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist

sys.path.insert(0, __file__.rsplit("/", 1)[0])
from common import commit, device_info, write_result  # noqa: E402
from fused_power import llama_case, slowest_rank  # noqa: E402

import mkernel  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--ops", default="ag_gemm,gemm_rs,gemm_ar")
    ap.add_argument("--m", type=int, default=8192, help="tokens (the gathered / reduced rows)")
    ap.add_argument("--label", default="run", help="names this run in the JSON's file name and rows")
    args = ap.parse_args()
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    local = int(os.environ.get("LOCAL_RANK", "0"))
    torch.cuda.set_device(local % torch.cuda.device_count())
    dist.init_process_group("gloo")
    ctx = mkernel.init()
    cache = os.environ.get("MKERNEL_CACHE_DIR", "")
    store = Path(cache, "fused_verdicts.json") if cache else None
    stored_before = bool(store and store.exists())

    def wall(fn) -> float:
        """ms of one call from a barrier to its end on this rank, the slowest rank's."""
        torch.cuda.synchronize()
        dist.barrier()
        t0 = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        return slowest_rank((time.perf_counter() - t0) * 1e3)

    gen = torch.Generator(device="cuda").manual_seed(55 + rank)
    rows = []
    for op in (o for o in args.ops.split(",") if o):
        run, _, _, _ = llama_case(op, args.m, world, ctx, gen)
        first = wall(run)
        second = wall(run)
        steady = statistics.median(wall(run) for _ in range(5))
        row = {"op": op, "m": args.m, "h": 8192, "f": 28672, "world": world, "label": args.label,
               "first_ms": first, "second_ms": second, "steady_ms": steady}
        rows.append(row)
        if rank == 0:
            print(f"{args.label}: W={world} {op} M={args.m}: first call {first:9.1f} ms, second {second:7.2f} ms, "
                  f"steady {steady:7.2f} ms", flush=True)
    if rank == 0:
        payload = {"bench": "fused_first_call", "device": device_info(), "commit": commit(), "world": world,
                   "label": args.label, "anchor": "the same op's steady-state call in the same run",
                   "env": {v: os.environ.get(v) for v in ("MKERNEL_FUSED_VERDICT_CACHE", "MKERNEL_GEMM_PLAN_CACHE")},
                   "verdict_file_existed": stored_before,
                   "method": "every rank: barrier, one call, synchronize; wall ms, the slowest rank's; "
                             "the first call, the second, the median of 5 more",
                   "rows": rows}
        print(write_result(f"fused_first_call_w{world}_{args.label}", payload))
    ctx.barrier()
    mkernel.shutdown()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
