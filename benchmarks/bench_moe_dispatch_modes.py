"""The dispatch across emulated nodes in its three modes side by side, one short run (moe12):
MKERNEL_MOE_DISPATCH_PIPELINE=0 (the sequence: routing all_gathered, rows joined, index_select
over the static bound; the default), 1 (pipelined: the routing as the exchange's head, rows
gathered per landed piece) and 2 (overlapped: the own tokens' GEMM while the other ranks' rows
are on the link). Every rank alone on its emulated node (the MoE's own exchange, csrc/moe_net.h),
the link shaped by --emulate.

Each sample: a gloo barrier, then every mode once in a rotating order, each timed by CUDA events
on its rank; a sample's figure is the slowest rank's (all_reduce MAX); the row is the median
over samples. Before timing: the group's first call (mode 0), then two warm-up calls per mode
(the GEMM plans of the split shapes are tuned at their first call). Printed, not asserted (the
tests check values): the max abs difference of each mode's counted rows from the first mode's
(0 expected for modes 1 and 3: the same rows through the same GEMM; the retired mode 2's split GEMMs picked other
plans, whose accumulation order may differ).

Prints one line per mode (median / min ms, ratio to mode 0) and ``VERDICT`` last; JSON under
benchmarks/results/ (and $OUT).

    python benchmarks/bench_moe_dispatch_modes.py [--world 2] [--tokens 8192] [--iters 10]
        [--emulate 50GB/s,3us] [--modes 0,1,3] [--timeout 50]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

RANK_CODE = f"""
import sys
sys.path.insert(0, {str(ROOT / 'benchmarks')!r})
from bench_moe_dispatch_modes import rank_main
rank_main()
"""


def rank_main() -> None:
    import torch
    import torch.distributed as dist

    import mkernel

    a = json.loads(os.environ["BENCH_ARGS"])
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    ctx = mkernel.init()
    rank, world = ctx.rank, ctx.world_size
    T, H, F, E, k = a["tokens"], a["hidden"], a["ffn"], a["experts"], a["topk"]
    el = E // world
    gen = torch.Generator(device="cuda").manual_seed(1234 + rank)
    x = torch.randn(T, H, device="cuda", dtype=torch.bfloat16, generator=gen)
    idx = torch.rand(T, E, device="cuda", generator=gen).topk(k, dim=1).indices
    w1 = (torch.randn(el, F, H, device="cuda", dtype=torch.bfloat16, generator=gen) * 0.02)
    mkernel.moe.reserve_tokens(T, group=ctx)
    modes = [m for m in a["modes"].split(",") if m]

    def call(mode: str):
        os.environ["MKERNEL_MOE_DISPATCH_PIPELINE"] = mode
        return mkernel.moe_dispatch_gemm(x, idx, w1, num_experts=E, group=ctx)

    def log(msg: str) -> None:
        if rank == 0:
            print(msg, flush=True)

    with torch.no_grad():
        call("0")  # the group's first call (opens and sizes the inter-node path)
        torch.cuda.synchronize()
        ref = None
        check = {}
        for m in modes:
            for _ in range(2):
                res = call(m)
            torch.cuda.synchronize()
            rows = int(res.counts.sum())
            out = res.out[:rows].float()
            if ref is None:
                ref = out
            check[m] = float((out - ref).abs().max()) if out.shape == ref.shape else float("inf")
            log(f"warm-up mode {m}: {rows} counted rows, max |out - mode {modes[0]}| = {check[m]}")
        dist.barrier()
        times: dict[str, list[float]] = {m: [] for m in modes}
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        for it in range(a["iters"]):
            order = modes[it % len(modes):] + modes[:it % len(modes)]
            for m in order:
                dist.barrier()
                torch.cuda.synchronize()
                start.record()
                call(m)
                end.record()
                end.synchronize()
                t = torch.tensor([start.elapsed_time(end)], dtype=torch.float64)
                dist.all_reduce(t, op=dist.ReduceOp.MAX)
                times[m].append(float(t[0]))
    os.environ["MKERNEL_MOE_DISPATCH_PIPELINE"] = "0"
    ctx.barrier()
    if rank == 0:
        row = {m: {"median_ms": statistics.median(v), "min_ms": min(v), "samples": v,
                   "max_abs_vs_first": check[m]} for m, v in times.items()}
        print("RESULT " + json.dumps(row), flush=True)
    mkernel.shutdown()
    dist.destroy_process_group()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--world", type=int, default=2)
    ap.add_argument("--tokens", type=int, default=8192, help="tokens per rank")
    ap.add_argument("--hidden", type=int, default=7168)
    ap.add_argument("--ffn", type=int, default=2048)
    ap.add_argument("--experts", type=int, default=256)
    ap.add_argument("--topk", type=int, default=8)
    ap.add_argument("--iters", type=int, default=10)
    ap.add_argument("--modes", default="0,1,3")
    ap.add_argument("--emulate", default="50GB/s,3us", help="MKERNEL_NET_EMULATE of the loopback link")
    ap.add_argument("--timeout", type=float, default=50, help="seconds for the rank processes")
    args = ap.parse_args()

    from common import commit, device_info, start_mps, write_result  # noqa: E402
    from tests.launch import run_ranks  # noqa: E402

    env, stop = start_mps("bench_moe_dispatch_modes")
    try:
        res = run_ranks(RANK_CODE, args.world, nodes=args.world, timeout=args.timeout, env=dict(
            env, CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=str(100 // args.world), NCCL_NVLS_ENABLE="0",
            MKERNEL_NET_EMULATE=args.emulate, MKERNEL_OP_TIMEOUT="15",
            BENCH_ARGS=json.dumps(vars(args))))
    finally:
        stop()
    row = None
    for r in res:
        for line in r.stdout.splitlines():
            if line.startswith("RESULT "):
                row = json.loads(line[7:])
            elif r.rank == 0:
                print(line, flush=True)
    if row is None or any(r.returncode != 0 for r in res):
        for r in res:
            print(f"--- rank {r.rank} rc={r.returncode}\n{r.stdout[-2000:]}\n{r.stderr[-4000:]}", flush=True)
        raise SystemExit("VERDICT: the run failed (see the ranks' output above)")
    base = row[args.modes.split(",")[0]]["median_ms"]
    for m, v in row.items():
        v["vs_first"] = v["median_ms"] / base
        print(f"mode {m}: median {v['median_ms']:.3f} ms, min {v['min_ms']:.3f} ms, "
              f"{v['vs_first']:.3f}x mode {args.modes.split(',')[0]}, max |out diff| {v['max_abs_vs_first']}",
              flush=True)
    path = write_result("moe_dispatch_modes", {"bench": "moe_dispatch_modes", "commit": commit(),
                                               "device": device_info(), "args": vars(args), "row": row})
    print(f"wrote {path}", flush=True)
    verdict = " ".join(f"mode{m}={v['median_ms']:.3f}ms({v['vs_first']:.3f}x)" for m, v in row.items())
    print(f"VERDICT {verdict}", flush=True)


if __name__ == "__main__":
    main()
