"""How long must a timed sample be before it shows a fused op's steady state? (session 53)

fused_power.py (session 53, H100 under MPS) found the unfused path of ag_gemm (W=2) and gemm_ar
(W=4) at Llama shapes 1.3-1.5x slower in sustained windows (back-to-back calls, 1.5 s) than in
the first-call measurement's samples (choose_path, csrc/fused_common.cpp: an untimed lead-in call,
then 2 calls between CUDA events at these shapes, the host synchronized after each sample), while
the fused path took the same time in both; so the measurement kept the unfused path where the
fused one ran 1.11x / 1.39x faster sustained. This times each path in samples of n back-to-back
calls, the way choose_path does (every rank: a gloo barrier, the lead-in call, n calls between
events, then a synchronize; a sample's figure is the slowest rank's ms per call), for several n,
interleaved over repetitions, to see at which n the samples reach the sustained figures; then one
sample of the longest n per path with an event between calls (every rank's per-call times: growing
or alternating times say the ranks drift out of step).

    python -m mkernel launch --world 4 --mps benchmarks/fused_sample_length.py --ops gemm_ar
    python -m mkernel launch --world 2 --mps benchmarks/fused_sample_length.py --ops ag_gemm

Shapes as fused_power.py's (its llama_case: Llama-70B, per rank).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys

import torch
import torch.distributed as dist

sys.path.insert(0, __file__.rsplit("/", 1)[0])
from common import commit, device_info, write_result  # noqa: E402
from fused_power import llama_case, slowest_rank, with_env  # noqa: E402

import mkernel  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--ops", default="ag_gemm,gemm_ar")
    ap.add_argument("--m", type=int, default=8192)
    ap.add_argument("--calls", default="1,2,4,8,16,32", help="calls per sample, comma-separated")
    ap.add_argument("--reps", type=int, default=5, help="samples per (path, calls)")
    args = ap.parse_args()
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    local = int(os.environ.get("LOCAL_RANK", "0"))
    torch.cuda.set_device(local % torch.cuda.device_count())
    dist.init_process_group("gloo")
    ctx = mkernel.init()
    counts = [int(c) for c in args.calls.split(",") if c]

    def sample(fn, n: int) -> float:
        """ms per call of n back-to-back calls after a lead-in call, the slowest rank's."""
        torch.cuda.synchronize()
        dist.barrier()
        fn()  # the lead-in (absorbs the ranks' skew, as choose_path's)
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(n):
            fn()
        end.record()
        end.synchronize()
        return slowest_rank(start.elapsed_time(end) / n)

    def trace(fn, n: int) -> list[list[float]]:
        """Every rank's ms of each of n back-to-back calls (an event between calls), as sample():
        a drift of the ranks out of step shows as per-call times that grow or alternate."""
        torch.cuda.synchronize()
        dist.barrier()
        fn()
        events = [torch.cuda.Event(enable_timing=True) for _ in range(n + 1)]
        events[0].record()
        for i in range(n):
            fn()
            events[i + 1].record()
        events[-1].synchronize()
        mine = [events[i].elapsed_time(events[i + 1]) for i in range(n)]
        every: list[list[float]] = [[] for _ in range(world)]
        dist.all_gather_object(every, mine)
        return every

    m = args.m
    gen = torch.Generator(device="cuda").manual_seed(53 + rank)
    rows = []
    for op in (o for o in args.ops.split(",") if o):
        run, gemm, _, _ = llama_case(op, m, world, ctx, gen)

        paths = {"fused": with_env(run, {"MKERNEL_FUSED": "force"}),
                 "unfused": with_env(run, {"MKERNEL_FUSED": "off"}), "gemm": gemm}
        for fn in paths.values():  # the verdict, the tuner and the allocations, untimed
            fn()
            fn()
        torch.cuda.synchronize()
        samples: dict[str, dict[int, list[float]]] = {p: {n: [] for n in counts} for p in paths}
        names = list(paths)
        for r in range(args.reps):
            for j, n in enumerate(counts):
                for k in range(len(names)):  # the order rotates, as choose_path's rounds
                    name = names[(r + j + k) % len(names)]
                    samples[name][n].append(sample(paths[name], n))
        longest = max(counts)
        traces = {name: trace(paths[name], longest) for name in names}
        med = {p: {n: statistics.median(v) for n, v in by_n.items()} for p, by_n in samples.items()}
        for n in counts:
            line = (f"W={world} {op} M={m} calls {n:3d}: " + "  ".join(f"{p} {med[p][n]:.3f} ms" for p in names)
                    + f"  fused/unfused {med['fused'][n] / med['unfused'][n]:.3f}")
            if rank == 0:
                print(line, flush=True)
        if rank == 0:
            for name, per_rank in traces.items():
                for r_, calls in enumerate(per_rank):
                    print(f"W={world} {op} {name} rank {r_} per call (ms, {longest} back to back): first "
                          + " ".join(f"{c:.2f}" for c in calls[:4]) + "  last "
                          + " ".join(f"{c:.2f}" for c in calls[-4:])
                          + f"  median {statistics.median(calls):.3f}", flush=True)
        rows.append({"op": op, "m": m, "h": 8192, "f": 28672, "world": world,
                     "ms_per_call_median": {p: {str(n): v for n, v in by_n.items()} for p, by_n in med.items()},
                     "samples": {p: {str(n): v for n, v in by_n.items()} for p, by_n in samples.items()},
                     "per_call_trace": {"calls": longest, "ms_by_rank": traces}})
    if rank == 0:
        payload = {"bench": "fused_sample_length", "device": device_info(), "commit": commit(), "world": world,
                   "method": "per (path, calls): barrier, a lead-in call, n calls between CUDA events, synchronize; "
                             f"the slowest rank's ms per call; {args.reps} samples interleaved, medians",
                   "rows": rows}
        print(write_result(f"fused_sample_length_w{world}", payload))
    ctx.barrier()
    mkernel.shutdown()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
