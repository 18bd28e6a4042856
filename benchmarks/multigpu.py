"""The fused GEMM ops on N ranks, side by side in one run with the anchors a user would pick
instead (issue 15). One driver for every machine:

- N GPUs (one rank per GPU, NCCL available): mkernel's fused op; NCCL + cuBLAS in sequence;
  PyTorch async-TP (``torch.ops.symm_mem.fused_all_gather_matmul`` /
  ``fused_matmul_reduce_scatter``; no gemm_ar counterpart); the GEMM alone (cuBLAS) and the
  collective alone (NCCL and mkernel's), whose max is the overlap ideal.
- one GPU shared by N ranks under MPS (each 100/N % of the SMs; what the one-H200 machine
  allows today): NCCL and async-TP cannot put two ranks on one GPU, so their rows say
  ``n/a (ranks share a GPU)``; the fused op, the GEMM alone and mkernel's collective alone
  still run, and the ideal is max(GEMM alone, mkernel collective alone).

``--nodes K`` splits the ranks into K emulated nodes (the inter-node half through the Go proxy).
Shapes (per rank, as a W-way tensor-parallel layer sees them; W divides the sharded dims):
Llama-70B-like fc1/fc2 (hidden 8192, ffn 28672, tokens 8192 and 16384); the square families
(AG: M=K, N=M/16; RS/AR: M=N, K=M/16; M = 2048 ... 32768); gemm_ar at decode sizes (M = 1 ... 256).
Timing: CUDA events, each sample ``reps`` calls back to back after a barrier, median of
``--iters`` samples, max over ranks; inputs rotate over two sets. TFLOP/s per GPU = the layer's
FLOPs / W / time. Rank 0 writes JSON + a markdown table (+ a PNG where matplotlib is) under
benchmarks/results/ (and $OUT when set).

    torchrun --nproc-per-node 8 benchmarks/multigpu.py          # a rank per GPU
    python -m mkernel launch --world 8 --nodes 2 benchmarks/multigpu.py
    python benchmarks/multigpu.py --world 2 [--nodes 2] --quick  # launches the ranks itself
                                                                 # (MPS when they share a GPU)
MoE dispatch/combine and ring attention rows are not in this driver yet.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
from pathlib import Path
from typing import Callable

ROOT = Path(__file__).resolve().parents[1]
RESULTS_DIR = ROOT / "benchmarks" / "results"
NA_SHARED = "n/a (ranks share a GPU)"


def shapes(world: int, quick: bool) -> list[tuple[str, str, int, int, int]]:
    """(op, label, m, k, n) per rank: ag_gemm x [m, k] (m = M/W rows), w [n, k] (n = N/W);
    gemm_rs / gemm_ar x [M, k] (k = K/W), w [N, k]."""
    out = []
    for t in ([8192] if quick else [8192, 16384]):
        out.append(("ag_gemm", f"llama70b-fc1 T={t}", t // world, 8192, 28672 // world))
        out.append(("gemm_rs", f"llama70b-fc2 T={t}", t, 28672 // world, 8192))
        out.append(("gemm_ar", f"llama70b-fc2 T={t}", t, 28672 // world, 8192))
    for m in ([4096] if quick else [2048, 4096, 8192, 16384, 32768]):
        out.append(("ag_gemm", f"square M={m}", m // world, m, m // 16))
        out.append(("gemm_rs", f"square M={m}", m, m // 16 // world, m))
        out.append(("gemm_ar", f"square M={m}", m, m // 16 // world, m))
    for m in ([16] if quick else [1, 16, 64, 256]):
        out.append(("gemm_ar", f"decode M={m}", m, 8192 // world, 8192))
    return out


def rank_flops(op: str, m: int, k: int, n: int, world: int) -> float:
    """FLOPs of one rank's GEMM: ag_gemm [W*m, k] x [k, n]; gemm_rs / gemm_ar [M, k] x [k, N]."""
    return 2.0 * (world * m if op == "ag_gemm" else m) * n * k


# --ag-routes: ag_gemm rows also time the op with one route forced (MKERNEL_FUSED=force, the
# fastest fused plan of that route by the op's own first-call measurement): "copy" the SM copy
# role's kernel, "peer" the peer-TMA kernel, "ce" the copy-engine route (session 27) — columns
# mkernel_<route>_ms, <route>_speedup_vs_best_anchor, and ce_over_copy / ce_over_gemm_alone.
AG_ROUTE_ENV = {
    "copy": {"MKERNEL_FUSED": "force", "MKERNEL_FUSED_AG_PEER_TMA": "0",
             "MKERNEL_FUSED_AG_COPY_ENGINE": "0"},
    "peer": {"MKERNEL_FUSED": "force", "MKERNEL_FUSED_AG_PEER_TMA": "1",
             "MKERNEL_FUSED_AG_COPY_ENGINE": "0"},
    "ce": {"MKERNEL_FUSED": "force", "MKERNEL_FUSED_AG_COPY_ENGINE": "1"},
}
AG_ROUTES_HELP = "comma-separated ag_gemm routes also timed forced: copy, peer, ce"
# --rs-routes: gemm_rs rows also time the op with one route forced: "fused" the fused kernel,
# "ce" the copy-engine route (session 59: per-owner GEMMs, the copy engines, a local reduce) —
# columns mkernel_rs<route>_ms, rs<route>_speedup_vs_best_anchor, rsce_over_rsfused and
# rsce_over_gemm_alone.
RS_ROUTE_ENV = {
    "rsfused": {"MKERNEL_FUSED": "force", "MKERNEL_FUSED_RS_COPY_ENGINE": "0"},
    "rsce": {"MKERNEL_FUSED": "force", "MKERNEL_FUSED_RS_COPY_ENGINE": "1"},
}
RS_ROUTES_HELP = "comma-separated gemm_rs routes also timed forced: fused, ce"
ROUTE_ENV = {**AG_ROUTE_ENV, **RS_ROUTE_ENV}


def rank_main(argv: list[str]) -> None:
    import torch
    import torch.distributed as dist

    sys.path.insert(0, str(ROOT / "benchmarks"))
    from common import commit, device_info, env_set, write_result  # noqa: E402

    import mkernel

    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--iters", type=int, default=15)
    ap.add_argument("--only", default="", help="comma-separated ops (ag_gemm,gemm_rs,gemm_ar)")
    ap.add_argument("--ag-routes", default="", help=AG_ROUTES_HELP)
    ap.add_argument("--rs-routes", default="", help=RS_ROUTES_HELP)
    args, _ = ap.parse_known_args(argv)
    ag_routes = [r for r in args.ag_routes.split(",") if r]
    unknown = set(ag_routes) - set(AG_ROUTE_ENV)
    if unknown:
        raise SystemExit(f"--ag-routes: unknown {sorted(unknown)} (known: {sorted(AG_ROUTE_ENV)})")
    rs_routes = ["rs" + r for r in args.rs_routes.split(",") if r]
    unknown = set(rs_routes) - set(RS_ROUTE_ENV)
    if unknown:
        raise SystemExit(f"--rs-routes: unknown {sorted(unknown)} (known: fused, ce)")
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    gpus = torch.cuda.device_count()
    shared = gpus < world  # several ranks on one GPU (MPS): no NCCL, no async-TP
    local = int(os.environ["LOCAL_RANK"]) if "TORCHELASTIC_RUN_ID" in os.environ else rank
    dev = torch.device("cuda", 0 if shared else local % gpus)
    torch.cuda.set_device(dev)
    dist.init_process_group("gloo" if shared else "nccl", rank=rank, world_size=world,
                            **({} if shared else {"device_id": dev}))
    ctrl = dist.new_group(backend="gloo") if not shared else dist.group.WORLD
    ctx = mkernel.init()
    tp_group, async_tp_missing = None, NA_SHARED
    if not shared:
        try:
            from torch.distributed._symmetric_memory import enable_symm_mem_for_group
            tp_group = dist.group.WORLD.group_name
            enable_symm_mem_for_group(tp_group)
        except Exception as e:  # noqa: BLE001  (recorded in the JSON)
            tp_group = None
            async_tp_missing = f"unavailable: {type(e).__name__}: {e}"

    def timed(fn: Callable[[int], object], reps: int) -> float:
        """Max over ranks of the median ms per call of `iters` samples of `reps` calls."""
        for i in range(2):
            fn(i)
        torch.cuda.synchronize()
        samples = []
        for i in range(args.iters):
            dist.barrier(group=ctrl)
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            for r in range(reps):
                fn(i * reps + r)
            end.record()
            end.synchronize()
            samples.append(start.elapsed_time(end) / reps)
        t = torch.tensor([statistics.median(samples)], dtype=torch.float64)
        dist.all_reduce(t, op=dist.ReduceOp.MAX, group=ctrl)
        return t.item()

    only = set(filter(None, args.only.split(",")))
    rows = []
    dt = torch.bfloat16
    for op, label, m, k, n in shapes(world, args.quick):
        if only and op not in only:
            continue
        g = torch.Generator(device=dev).manual_seed(1000 * rank + len(rows))
        xs = [torch.randn(m, k, device=dev, dtype=dt, generator=g) for _ in range(2)]
        ws = [torch.randn(n, k, device=dev, dtype=dt, generator=g) / 64 for _ in range(2)]
        flops = rank_flops(op, m, k, n, world)
        cands: dict[str, Callable[[int], object] | str] = {}
        if op == "ag_gemm":
            full = [torch.randn(world * m, k, device=dev, dtype=dt, generator=g) for _ in range(2)]
            gathered = torch.empty(world * m, k, device=dev, dtype=dt)
            cands["mkernel"] = lambda i: mkernel.ag_gemm(xs[i % 2], ws[i % 2], group=ctx)
            cands["gemm_alone"] = lambda i: torch.matmul(full[i % 2], ws[i % 2].t())
            cands["mkernel_comm_alone"] = lambda i: mkernel.all_gather(xs[i % 2], group=ctx)
            if shared:
                cands["nccl_cublas"] = cands["nccl_comm_alone"] = NA_SHARED
            else:
                def nccl_ag(i):
                    dist.all_gather_into_tensor(gathered, xs[i % 2])
                    return gathered
                cands["nccl_comm_alone"] = nccl_ag
                cands["nccl_cublas"] = lambda i: torch.matmul(nccl_ag(i), ws[i % 2].t())
            for route in ag_routes:  # the op with one route forced (AG_ROUTE_ENV)
                cands[f"mkernel_{route}"] = cands["mkernel"]
            if tp_group:
                cands["async_tp"] = lambda i: torch.ops.symm_mem.fused_all_gather_matmul(
                    xs[i % 2], [ws[i % 2].t()], gather_dim=0, group_name=tp_group)
            else:
                cands["async_tp"] = async_tp_missing
        else:
            parts = [torch.randn(m, n, device=dev, dtype=dt, generator=g) for _ in range(2)]
            rs_out = torch.empty(m // world, n, device=dev, dtype=dt)
            fused = mkernel.gemm_rs if op == "gemm_rs" else mkernel.gemm_ar
            coll = mkernel.reduce_scatter if op == "gemm_rs" else mkernel.all_reduce
            cands["mkernel"] = lambda i, f=fused: f(xs[i % 2], ws[i % 2], group=ctx)
            cands["gemm_alone"] = lambda i: torch.matmul(xs[i % 2], ws[i % 2].t())
            cands["mkernel_comm_alone"] = lambda i, c=coll: c(parts[i % 2], group=ctx)
            if shared:
                cands["nccl_cublas"] = cands["nccl_comm_alone"] = NA_SHARED
            elif op == "gemm_rs":
                def nccl_rs(y):
                    dist.reduce_scatter_tensor(rs_out, y)
                    return rs_out
                cands["nccl_comm_alone"] = lambda i: nccl_rs(parts[i % 2])
                cands["nccl_cublas"] = lambda i: nccl_rs(torch.matmul(xs[i % 2], ws[i % 2].t()))
            else:
                def nccl_ar(y):
                    dist.all_reduce(y)
                    return y
                cands["nccl_comm_alone"] = lambda i: nccl_ar(parts[i % 2])  # in place: timing only
                cands["nccl_cublas"] = lambda i: nccl_ar(torch.matmul(xs[i % 2], ws[i % 2].t()))
            if op == "gemm_rs":
                for route in rs_routes:  # the op with one route forced (RS_ROUTE_ENV)
                    cands[f"mkernel_{route}"] = cands["mkernel"]
            if op == "gemm_rs" and tp_group:
                cands["async_tp"] = lambda i: torch.ops.symm_mem.fused_matmul_reduce_scatter(
                    xs[i % 2], ws[i % 2].t(), "sum", scatter_dim=0, group_name=tp_group)
            else:
                cands["async_tp"] = (async_tp_missing if op == "gemm_rs"
                                     else "n/a (async-TP has no all-reduce GEMM)")
        reps = 20 if flops < 5e10 else 4
        row: dict[str, object] = {"op": op, "shape": label, "m": m, "k": k, "n": n, "world": world,
                                  "reps": reps}
        for name, fn in cands.items():
            if isinstance(fn, str):
                row[f"{name}_ms"] = None
                row[f"{name}_note"] = fn
                continue
            try:
                route = name[len("mkernel_"):] if name.startswith("mkernel_") else ""
                with env_set(ROUTE_ENV.get(route, {})):
                    row[f"{name}_ms"] = timed(fn, reps)
            except Exception as e:  # noqa: BLE001  (an anchor that fails is recorded, not fatal)
                row[f"{name}_ms"] = None
                row[f"{name}_note"] = f"failed: {type(e).__name__}: {str(e)[:200]}"
        comm = [row.get("nccl_comm_alone_ms"), row.get("mkernel_comm_alone_ms")]
        comm = [c for c in comm if c is not None]
        if row.get("gemm_alone_ms") and comm:
            row["ideal_ms"] = max(row["gemm_alone_ms"], min(comm))
            row["mkernel_over_ideal"] = row["mkernel_ms"] / row["ideal_ms"]
        best = [row.get(c) for c in ("nccl_cublas_ms", "async_tp_ms") if row.get(c)]
        if best:
            row["best_anchor_ms"] = min(best)
            row["speedup_vs_best_anchor"] = row["best_anchor_ms"] / row["mkernel_ms"]
            for route in ag_routes + rs_routes:
                if row.get(f"mkernel_{route}_ms"):
                    row[f"{route}_speedup_vs_best_anchor"] = (row["best_anchor_ms"] /
                                                              row[f"mkernel_{route}_ms"])
        if row.get("mkernel_ce_ms") and row.get("mkernel_copy_ms"):
            row["ce_over_copy"] = row["mkernel_ce_ms"] / row["mkernel_copy_ms"]
        if row.get("mkernel_ce_ms") and row.get("gemm_alone_ms"):
            row["ce_over_gemm_alone"] = row["mkernel_ce_ms"] / row["gemm_alone_ms"]
        if row.get("mkernel_rsce_ms") and row.get("mkernel_rsfused_ms"):
            row["rsce_over_rsfused"] = row["mkernel_rsce_ms"] / row["mkernel_rsfused_ms"]
        if row.get("mkernel_rsce_ms") and row.get("gemm_alone_ms"):
            row["rsce_over_gemm_alone"] = row["mkernel_rsce_ms"] / row["gemm_alone_ms"]
        for name in cands:
            t = row.get(f"{name}_ms")
            if t and name not in ("mkernel_comm_alone", "nccl_comm_alone"):
                row[f"{name}_tflops_per_gpu"] = flops / (t * 1e-3) / 1e12
        rows.append(row)
        if rank == 0:
            print("ROW " + json.dumps(row), flush=True)
            progress = Path(os.environ.get("OUT") or RESULTS_DIR, "multigpu_rows.jsonl")
            progress.parent.mkdir(parents=True, exist_ok=True)
            with open(progress, "a") as f:
                f.write(json.dumps(row) + "\n")
    if rank == 0:
        payload = {"bench": "multigpu", "commit": commit(), "device": device_info(), "world": world,
                   "nodes": int(os.environ.get("MKERNEL_BENCH_NODES", "1")),
                   "ranks_share_a_gpu": shared,
                   "mps_share_percent": os.environ.get("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"),
                   "iters": args.iters, "rows": rows}
        path = write_result(f"multigpu_w{world}", payload)
        md = path.with_suffix(".md")
        md.write_text(markdown(payload))
        plot(payload, path.with_suffix(".png"))
        out = os.environ.get("OUT")
        for p in (path, md, path.with_suffix(".png")):
            if out and p.exists():
                shutil.copy(p, Path(out, p.name))
        print(markdown(payload), flush=True)
        print(f"wrote {path}", flush=True)
    torch.cuda.synchronize()
    mkernel.shutdown()
    dist.destroy_process_group()


def markdown(payload: dict) -> str:
    """One table: per shape, ms of every candidate and mkernel's ratios."""
    cols = ["mkernel", "nccl_cublas", "async_tp", "gemm_alone", "nccl_comm_alone",
            "mkernel_comm_alone"]
    dev = payload.get("device", {})
    lines = [f"# multigpu W={payload['world']} nodes={payload['nodes']} "
             f"({dev.get('gpu', '?')} x{dev.get('gpus', '?')}, commit {payload['commit']}"
             f"{', ranks share a GPU under MPS' if payload['ranks_share_a_gpu'] else ''})", "",
             "| op | shape | " + " | ".join(f"{c} ms" for c in cols)
             + " | mkernel / ideal | best anchor / mkernel | mkernel TFLOP/s/GPU |",
             "|" + "---|" * (len(cols) + 5)]
    for r in payload["rows"]:
        cells = [f"{r[c + '_ms']:.3f}" if r.get(c + "_ms") else "n/a" for c in cols]
        ratio = f"{r['mkernel_over_ideal']:.2f}" if "mkernel_over_ideal" in r else "-"
        speed = f"{r['speedup_vs_best_anchor']:.2f}" if "speedup_vs_best_anchor" in r else "-"
        tf = f"{r['mkernel_tflops_per_gpu']:.0f}" if "mkernel_tflops_per_gpu" in r else "-"
        lines.append(f"| {r['op']} | {r['shape']} | " + " | ".join(cells)
                     + f" | {ratio} | {speed} | {tf} |")
    notes = sorted({f"{k[:-5]}: {v}" for r in payload["rows"] for k, v in r.items()
                    if k.endswith("_note")})
    if notes:
        lines += ["", "Not measured:"] + [f"- {n}" for n in notes]
    return "\n".join(lines) + "\n"


def plot(payload: dict, png: Path) -> None:
    """mkernel / ideal and best anchor / mkernel per shape (skipped without matplotlib)."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("multigpu: no matplotlib, no plot", flush=True)
        return
    rows = [r for r in payload["rows"] if "mkernel_over_ideal" in r]
    if not rows:
        return
    fig, ax = plt.subplots(figsize=(max(6, 0.5 * len(rows)), 4))
    xs = range(len(rows))
    ax.bar([x - 0.2 for x in xs], [r["mkernel_over_ideal"] for r in rows], 0.4,
           label="mkernel / overlap ideal")
    ax.bar([x + 0.2 for x in xs], [r.get("speedup_vs_best_anchor", 0) for r in rows], 0.4,
           label="best anchor / mkernel")
    ax.axhline(1.0, color="k", lw=0.8)
    ax.set_xticks(list(xs), [f"{r['op']}\n{r['shape']}" for r in rows], rotation=60, fontsize=6)
    ax.set_title(f"W={payload['world']} nodes={payload['nodes']}")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(png, dpi=120)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--world", type=int, default=2)
    ap.add_argument("--nodes", type=int, default=1)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--iters", type=int, default=15)
    ap.add_argument("--only", default="")
    ap.add_argument("--ag-routes", default="", help=AG_ROUTES_HELP)
    ap.add_argument("--rs-routes", default="", help=RS_ROUTES_HELP)
    ap.add_argument("--timeout", type=float, default=600)
    args = ap.parse_args()
    import torch

    sys.path.insert(0, str(ROOT))
    from common import start_mps  # noqa: E402
    from tests.launch import run_ranks

    shared = torch.cuda.device_count() < args.world
    env = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1",
           "MKERNEL_BENCH_NODES": str(args.nodes)}
    stop = lambda: None  # noqa: E731
    if shared:
        extra, stop = start_mps("multigpu")
        env.update(extra, CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=str(100 // args.world))
    flags = ["--iters", str(args.iters)] + (["--quick"] if args.quick else []) \
        + (["--only", args.only] if args.only else []) \
        + (["--ag-routes", args.ag_routes] if args.ag_routes else []) \
        + (["--rs-routes", args.rs_routes] if args.rs_routes else [])
    code = (f"import sys, runpy; sys.argv = [{str(Path(__file__).resolve())!r}] + {flags!r}; "
            f"runpy.run_path({str(Path(__file__).resolve())!r}, run_name='__rank__')")
    try:
        results = run_ranks(code, args.world, nodes=args.nodes, timeout=args.timeout, env=env)
    finally:
        stop()
    for r in results:
        if r.returncode != 0 or r.rank == 0:
            sys.stdout.write(r.stdout[-8000:])
            sys.stderr.write(r.stderr[-4000:])
    sys.exit(max((r.returncode if r.returncode is not None else 124) for r in results))


if __name__ == "__main__":
    if "RANK" in os.environ and "WORLD_SIZE" in os.environ:
        rank_main(sys.argv[1:])  # under torchrun or `python -m mkernel launch`: a rank
    else:
        main()
elif __name__ == "__rank__":
    rank_main(sys.argv[1:])
