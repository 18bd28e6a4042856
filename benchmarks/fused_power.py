"""The fused GEMM ops in sustained windows beside the SM clock and the board power
(benchmarks/power_windows.py, its collective mode): does overlapping the communication with the
GEMM still pay when the GPU runs at its power cap? Session 51/52 found every large kernel on the
H100 at the 700 W cap, where work done at the same time shares one power budget: an overlap that
adds power lowers the clock for both halves, so max(GEMM alone, communication alone), the "ideal"
bench_fused.py measures against in short samples, may not be reachable sustained.

Per shape, every rank runs, in lockstep (the same number of calls a window; a window's time is its
slowest rank's): `op` (the op as users get it: the first call's fused / unfused verdict), `fused`
(MKERNEL_FUSED=force), `unfused` (MKERNEL_FUSED=off: the engine GEMM, then the substrate's
collective), `gemm` (the engine GEMM alone on this rank's share of the work) and `comm` (the
collective alone). The anchor is `unfused`. One rank per sampled GPU runs nvidia-smi: local rank 0
under MPS (all ranks on one GPU), every rank on its own GPU otherwise.

    python -m mkernel launch --world 2 --mps benchmarks/fused_power.py [--ops gemm_ar] [--window 1.5]
    python -m mkernel launch --world 8 benchmarks/fused_power.py          # a GPU per rank

Shapes (per rank, as bench_fused.py's Llama-70B rows): ag_gemm x [M/W, 8192], w [28672/W, 8192];
gemm_rs / gemm_ar x [M, 28672/W], w [8192, 28672/W]; M = 8192 (`--m` for others).
"""

from __future__ import annotations

import argparse
import os
import sys

import torch
import torch.distributed as dist

sys.path.insert(0, __file__.rsplit("/", 1)[0])
from common import commit, device_info, env_set, write_result  # noqa: E402
from power_windows import row_fields, sustained  # noqa: E402

import mkernel  # noqa: E402


def with_env(fn, env: dict[str, str]):
    """fn called with the variables of `env` set (the fused ops read their knobs per call)."""
    def call():
        with env_set(env):
            return fn()
    return call


def slowest_rank(v: float) -> float:
    """The largest of every rank's v (torch.distributed's process group): a group's wall time
    is its slowest rank's. Also used by fused_sample_length.py and fused_first_call.py."""
    t = torch.tensor([v], dtype=torch.float64)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return float(t.item())


def llama_case(op: str, m: int, world: int, ctx, gen: torch.Generator):
    """One op at the Llama-70B shape (module docstring), this rank's share: (run, gemm, comm, flop) —
    the op as users call it, the engine GEMM alone on this rank's work, the substrate's collective
    alone on the op's bytes, and one call's FLOPs. Also used by fused_sample_length.py."""
    h, f, dt = 8192, 28672, torch.bfloat16
    if m % world or f % world:
        raise SystemExit(f"--m {m} and {f} must be multiples of the world size {world}")
    mk = torch.ops.mkernel
    if op == "ag_gemm":
        x = torch.randn(m // world, h, device="cuda", dtype=dt, generator=gen)
        w = torch.randn(f // world, h, device="cuda", dtype=dt, generator=gen) / 64
        gathered = torch.randn(m, h, device="cuda", dtype=dt, generator=gen)
        return (lambda: mkernel.ag_gemm(x, w, group=ctx), lambda: mkernel.gemm(gathered, w),
                lambda: mk.all_gather.default(x, ctx.handle, world), 2.0 * m * (f // world) * h)
    if op in ("gemm_rs", "gemm_ar"):
        x = torch.randn(m, f // world, device="cuda", dtype=dt, generator=gen)
        w = torch.randn(h, f // world, device="cuda", dtype=dt, generator=gen) / 64
        part = torch.randn(m, h, device="cuda", dtype=dt, generator=gen)
        fn = mkernel.gemm_rs if op == "gemm_rs" else mkernel.gemm_ar
        coll = mk.reduce_scatter if op == "gemm_rs" else mk.all_reduce
        return (lambda: fn(x, w, group=ctx), lambda: mkernel.gemm(x, w),
                lambda: coll.default(part, ctx.handle, world), 2.0 * m * h * (f // world))
    raise SystemExit(f"--ops: unknown op {op!r} (ag_gemm, gemm_rs, gemm_ar)")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--ops", default="ag_gemm,gemm_rs,gemm_ar")
    ap.add_argument("--m", type=int, default=8192, help="tokens (the gathered / reduced rows)")
    ap.add_argument("--window", type=float, default=1.5, help="seconds per candidate window")
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    local = int(os.environ.get("LOCAL_RANK", "0"))
    gpus = torch.cuda.device_count()
    torch.cuda.set_device(local % gpus)
    one_gpu = gpus == 1 or "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE" in os.environ
    if rank != 0:  # one rank's lines (sustained() prints a line a candidate on every rank)
        sys.stdout = open(os.devnull, "w")
    dist.init_process_group("gloo")
    ctx = mkernel.init()

    m = args.m
    gen = torch.Generator(device="cuda").manual_seed(52 + rank)
    rows = []
    for op in (o for o in args.ops.split(",") if o):
        run, gemm, comm, flop = llama_case(op, m, world, ctx, gen)
        run()  # the first call: the op's fused / unfused verdict, outside the timing
        torch.cuda.synchronize()
        cands = {"op": run, "fused": with_env(run, {"MKERNEL_FUSED": "force"}),
                 "unfused": with_env(run, {"MKERNEL_FUSED": "off"}), "gemm": gemm, "comm": comm}
        res = sustained(cands, flop, args.window, args.rounds, label=f"W={world} {op} M={m}",
                        anchor="unfused", agree=slowest_rank, gpu=None if one_gpu else local % gpus,
                        sample=rank == 0 if one_gpu else True)
        rows.append({"op": op, "m": m, "h": 8192, "f": 28672, "world": world, "rank": rank, **row_fields(res)})
    if rank == 0:
        payload = {"bench": "fused_power", "device": device_info(), "commit": commit(), "world": world,
                   "one_gpu": one_gpu, "anchor": "the op unfused (MKERNEL_FUSED=off), in the same run",
                   "rows": rows}
        print(write_result(f"fused_power_w{world}", payload))
    ctx.barrier()
    mkernel.shutdown()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
