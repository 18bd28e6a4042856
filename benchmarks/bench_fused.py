"""The fused ops (ag_gemm, gemm_rs, gemm_ar) across W rank processes sharing one GPU under MPS
(each rank 100/W % of the SMs), side by side in one run with:

- ``gemm``: the engine GEMM alone on the same per-rank work, all ranks at once (the compute half
  of the overlap ideal, at the same MPS share);
- ``comm``: the substrate's collective alone (mkernel.all_gather / reduce_scatter / all_reduce)
  on the same bytes, when the substrate has it;
- ``unfused``: collective + engine GEMM back to back, called directly (what the fallback runs);
- ``op_unfused``: the op with its unfused path pinned (``MKERNEL_FUSED=off``): against
  ``unfused``, what the op's fallback costs on top of the same work (host set-up);
- ``ideal``: max(gemm, comm) — the overlap ideal.

NCCL and torch's async-TP (symm_mem) cannot run several ranks on one GPU, so they are not
anchors here (they are on a multi-GPU machine). Every figure is the max over the ranks of the
median of CUDA-event samples (each, after a barrier and one untimed lead-in call, ``reps``
calls back to back), the figures of a shape measured interleaved (round by round, the order
rotating and reversed in odd rounds); inputs rotate over two sets. Besides the ratio of those
medians, ``*_paired`` is the median over rounds of the ratio within a round (less exposed to a
drift over the shape), the lower of the ranks'. ``unfused_b`` times the unfused sequence a
second time: its ratio to ``unfused`` is the run's noise on identical work. ``path`` says what
the op ran (its fallback warning, if any, on the shape's first call). Rank 0 writes
JSON to benchmarks/results/fused_w<W>_<gpu>_<time>.json; benchmarks/report.py turns it into a
table and a PNG plot.

    python benchmarks/bench_fused.py --world 2 [--full] [--budget 55] [--only llama,decode]
                                     [--nodes 2 [--emulate 50GB/s,3us]]

With ``--nodes N`` the ranks are split into N emulated nodes whose link the loopback transport
shapes (``MKERNEL_NET_EMULATE``, 50 GB/s and 3 us by default: a 400 Gb/s NIC); the fused ops
reach same-node peers only, so across nodes they run their unfused path (``path`` says so) and
the rows measure what that costs against the same collective + GEMM called directly. The JSON
is then fused_w<W>_n<N>_<gpu>_<time>.json. ``--fused-nodes`` sets MKERNEL_FUSED_NODES=1 for
the ranks (without it, 0): ag_gemm and gemm_rs across nodes then run their fused kernel (rows /
partial tiles pushed through the inter-node FIFO by the kernel) and gemm_ar the fused gemm_rs
across nodes + the substrate's all_gather; ``--ops ag_gemm,gemm_rs`` keeps only those ops'
shapes (file suffix _fn). Each row also carries rank 0's samples (``SAMPLES`` lines: GPU ms per
call, host enqueue ms per call, the figure timed before) and the op's / forced kernel's medians
by predecessor (``fused_by_prev_r0``): whether a figure carries state from the previous one.

(``fused`` is the op as users get it, the unfused fallback included where the measured choice
picks it; ``fused_kernel`` forces the fused kernel and ``op_unfused`` the op's unfused path, so
both sides of that choice are on record.)

(launches the ranks itself through tests/launch.py, under the MPS daemon named by
CUDA_MPS_PIPE_DIRECTORY or one it starts and stops itself.)
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS_DIR = ROOT / "benchmarks" / "results"

# Per-rank shapes as a W-rank tensor-parallel job sees them (W divides the sharded dims).
#   ag_gemm: x [M/W, K], w [N/W, K]   (column-parallel: Llama-70B fc1 K=8192, N=28672; seed's
#            square family M=K, N=M/16 with N per rank)
#   gemm_rs / gemm_ar: x [M, K/W], w [N, K/W]  (row-parallel: fc2 K=28672, N=8192; seed's
#            family M=N, K=M/16)
# The default set fits a ~60 s device slot (the shapes of the fused-op issue's first timings,
# the Llama-70B layer at M = 8192 and 16384, one square shape and the decode sizes); --full adds
# the rest.
def shapes(world: int, full: bool) -> list[tuple[str, str, int, int, int]]:
    out = []
    for m, k, n in [(4096, 1024, 8192), (8192, 2048, 8192)]:  # per-rank, as fused_smoke times them
        out.append(("gemm_rs", f"smoke {m}x{k}x{n}", m, k, n))
        out.append(("gemm_ar", f"smoke {m}x{k}x{n}", m, k, n))
    for m, k, n in [(1024, 8192, 3584), (2048, 8192, 7168)]:
        out.append(("ag_gemm", f"smoke {m}x{k}x{n}", m, k, n))
    def llama(m: int) -> None:
        out.append(("gemm_rs", f"llama70b-fc2 M={m}", m, 28672 // world, 8192))
        out.append(("gemm_ar", f"llama70b-fc2 M={m}", m, 28672 // world, 8192))
        out.append(("ag_gemm", f"llama70b-fc1 M={m}", m // world, 8192, 28672 // world))
    llama(8192)
    for m in ([2048, 4096, 8192, 16384] if full else [4096]):
        out.append(("gemm_rs", f"square M={m}", m, m // 16 // world, m))
        out.append(("gemm_ar", f"square M={m}", m, m // 16 // world, m))
        out.append(("ag_gemm", f"square M={m}", m // world, m, m // 16))
    for m in ([1, 16, 64, 333] if full else [1, 64, 333]):  # decode sizes (gemm_ar)
        out.append(("gemm_ar", f"decode M={m}", m, 8192 // world, 8192))
    llama(16384)  # last: the longest rows, the first a budget cuts
    return out


def align_tag() -> str:
    """The file-name suffix "_align" when the ranks run with MKERNEL_FUSED_ALIGN=1 (choose_path
    aligns the ranks before each timed sample: fused_common.h; opt-in, inherited by the ranks
    from this environment), "_gate" with MKERNEL_FUSED_GATE=1 (the fused launch gate,
    fused_common.h gate_requested), so a run with and one without them keep separate files."""
    return ("_align" if os.environ.get("MKERNEL_FUSED_ALIGN") == "1" else "") + \
        ("_gate" if os.environ.get("MKERNEL_FUSED_GATE") == "1" else "")


def rank_main() -> None:
    import torch
    import torch.distributed as dist

    sys.path.insert(0, str(ROOT / "benchmarks"))
    from common import commit, device_info, env_set, write_result  # noqa: E402

    import mkernel

    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    nodes = int(os.environ.get("BENCH_NODES", "1"))
    tag = f"w{world}" + (f"_n{nodes}" if nodes > 1 else "") + align_tag()
    all_shapes = os.environ.get("BENCH_FULL") == "1"
    only = [w for w in os.environ.get("BENCH_ONLY", "").split(",") if w]
    only_ops = [w for w in os.environ.get("BENCH_OPS", "").split(",") if w]
    fused_nodes = os.environ.get("MKERNEL_FUSED_NODES") == "1"
    if fused_nodes and nodes > 1:
        tag += "_fn"
    budget = float(os.environ.get("BENCH_BUDGET_S", "70"))
    t_start = time.monotonic()
    torch.cuda.set_device(0)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    ctx = mkernel.init()
    mk = torch.ops.mkernel
    has = {name: hasattr(mk, name) for name in ("all_gather", "reduce_scatter", "all_reduce")}

    def with_env(fn, env: dict):
        """Runs fn(i) for each i of an iterable with `env` set around all of them (set once per
        sample, not per call: decode-sized calls would time the environment's edits)."""
        def run(indices):
            with env_set(env):
                for i in indices:
                    fn(i)
        return run

    def timed_all(fns: dict, reps: int, samples: int = 9) -> tuple[dict, dict]:
        """Max over ranks of the median ms per call of each fn in `fns` (name -> (fn, env)),
        measured interleaved: each of `samples` rounds times every fn once (`reps` calls after a
        barrier), the order rotating from round to round, so a clock or neighbour change during
        the shape reaches every figure alike. Also the rounds' samples of this rank.

        Per sample it also keeps (in `trace`, this rank's) the figure timed just before it in
        the sequence (its predecessor) and the host's time to enqueue the `reps` calls: a figure
        whose samples depend on their predecessor carries state from the previous figure across
        the barrier and the lead-in call; an enqueue time close to the sample's GPU time means the
        host, not the GPU, set the pace (s11run1: ag_gemm across nodes timed 66.6 ms as the op
        and 26.8 ms forced, the same kernel; the op's figure followed an unfused figure in 6 of
        its 9 samples, the forced one in 4)."""
        names = list(fns)
        runs = {name: with_env(*fns[name]) for name in names}
        for name in names:
            runs[name](range(2))
        torch.cuda.synchronize()
        got = {name: [] for name in names}
        trace.clear()
        trace.update({name: [] for name in names})
        prev = names[-1]  # the last warm-up
        count = len(names)
        for i in range(samples):
            for j in range(count):
                # Rotating, backwards in odd rounds: a rotation alone keeps each figure behind
                # the same neighbour in every round.
                name = names[(i + j) % count if i % 2 == 0 else (count - 1 - j + i) % count]
                dist.barrier()
                start = torch.cuda.Event(enable_timing=True)
                end = torch.cuda.Event(enable_timing=True)
                # An untimed lead-in call: timing starts with the ranks in step and the host a
                # call ahead (not at the first launch after the barrier).
                runs[name](range(i * reps - 1, i * reps))
                start.record()
                t0 = time.perf_counter()
                runs[name](range(i * reps, (i + 1) * reps))
                t1 = time.perf_counter()
                end.record()
                end.synchronize()
                got[name].append(start.elapsed_time(end) / reps)
                trace[name].append((round(got[name][-1], 3), round((t1 - t0) * 1e3 / reps, 3),
                                    prev))
                prev = name
        t = torch.tensor([statistics.median(got[n]) for n in names], dtype=torch.float64)
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        return dict(zip(names, t.tolist())), got

    def aligned_ms(fn, env: dict, calls: int) -> float:
        """Max over ranks of the median ms of `calls` single calls of fn, each started with
        every rank's GPU idle and the ranks in step (synchronize, then a barrier): a call's own
        time, with no neighbour call of this or another rank on the GPU. Against the back-to-back
        figures it separates what one call costs from what calls in sequence cost each other
        (the ranks' phase, grids of ranks of other emulated nodes still on the GPU: the launch
        gate waits for same-node peers only)."""
        got = []
        with env_set(env):
            fn(0)
            for i in range(calls):
                torch.cuda.synchronize()
                dist.barrier()
                start = torch.cuda.Event(enable_timing=True)
                end = torch.cuda.Event(enable_timing=True)
                start.record()
                fn(i)
                end.record()
                end.synchronize()
                got.append(start.elapsed_time(end))
        t = torch.tensor([statistics.median(got)], dtype=torch.float64)
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        return t.item()

    def stderr_of(fn) -> str:
        """What fn() writes to file descriptor 2 (C++ warnings: TORCH_WARN from an op called
        through torch.ops is logged there, not raised as a Python warning), written on too."""
        sys.stderr.flush()
        saved = os.dup(2)
        with tempfile.TemporaryFile() as tmp:
            os.dup2(tmp.fileno(), 2)
            try:
                fn()
                torch.cuda.synchronize()
            finally:
                os.dup2(saved, 2)
                os.close(saved)
            tmp.seek(0)
            text = tmp.read().decode(errors="replace")
        sys.stderr.write(text)
        return text

    def paired(got: dict, num: str, den: str) -> float:
        """The median over rounds of got[num] / got[den] within each round, the lowest rank's."""
        r = torch.tensor([statistics.median(a / b for a, b in zip(got[num], got[den]))],
                         dtype=torch.float64)
        dist.all_reduce(r, op=dist.ReduceOp.MIN)
        return r.item()

    trace: dict = {}  # timed_all's per-sample record of this rank: name -> [(ms, enqueue ms, prev)]
    samples_per_figure = int(os.environ.get("BENCH_SAMPLES", "9"))
    pinned_reps = int(os.environ.get("BENCH_REPS", "0"))
    with_b = os.environ.get("BENCH_NO_B") != "1"

    def by_predecessor(name: str) -> dict:
        """The median of `name`'s samples (this rank) after each kind of predecessor: "fused"
        (the op's fused kernel: fused_ms / fused_kernel_ms) or "other"."""
        kinds: dict = {}
        for ms, _, prev in trace.get(name, []):
            kinds.setdefault("fused" if prev in ("fused_ms", "fused_kernel_ms") else "other",
                             []).append(ms)
        return {k: round(statistics.median(v), 3) for k, v in kinds.items()}

    rows = []
    for op, label, a, b, c in shapes(world, all_shapes):
        if only and not any(w in label for w in only):
            continue
        if only_ops and op not in only_ops:
            continue
        # Every rank stops at the same shape: rank 0's clock decides.
        stop = torch.tensor([1.0 if time.monotonic() - t_start > budget else 0.0])
        dist.broadcast(stop, 0)
        if stop.item():
            if rank == 0:
                print(f"bench_fused: budget of {budget:.0f} s spent, stopping before {label} {op}",
                      file=sys.stderr, flush=True)
            break
        dt = torch.bfloat16
        if op == "ag_gemm":
            m, k, n = a, b, c
            xs = [torch.randn(m, k, device="cuda", dtype=dt) for _ in range(2)]
            ws = [torch.randn(n, k, device="cuda", dtype=dt) / 64 for _ in range(2)]
            full = [torch.randn(world * m, k, device="cuda", dtype=dt) for _ in range(2)]
            flops = 2.0 * world * m * n * k
            fused = lambda i: mkernel.ag_gemm(xs[i % 2], ws[i % 2], group=ctx)  # noqa: E731
            gemm = lambda i: mkernel.gemm(full[i % 2], ws[i % 2])  # noqa: E731
            coll = "all_gather"
            comm = lambda i: mk.all_gather.default(xs[i % 2], ctx.handle, world)  # noqa: E731
            unfused = lambda i: mkernel.gemm(comm(i), ws[i % 2])  # noqa: E731
        else:
            m, k, n = a, b, c
            xs = [torch.randn(m, k, device="cuda", dtype=dt) for _ in range(2)]
            ws = [torch.randn(n, k, device="cuda", dtype=dt) / 64 for _ in range(2)]
            parts = [torch.randn(m, n, device="cuda", dtype=dt) for _ in range(2)]
            flops = 2.0 * m * n * k
            fn = mkernel.gemm_rs if op == "gemm_rs" else mkernel.gemm_ar
            fused = lambda i, fn=fn: fn(xs[i % 2], ws[i % 2], group=ctx)  # noqa: E731
            gemm = lambda i: mkernel.gemm(xs[i % 2], ws[i % 2])  # noqa: E731
            coll = "reduce_scatter" if op == "gemm_rs" else "all_reduce"
            cop = getattr(mk, coll, None)
            comm = lambda i, cop=cop: cop.default(parts[i % 2], ctx.handle, world)  # noqa: E731
            unfused = lambda i, cop=cop: cop.default(mkernel.gemm(xs[i % 2], ws[i % 2]),  # noqa: E731
                                                     ctx.handle, world)
        reps = 20 if flops < 1e10 else 10 if flops < 1e11 else 3
        if pinned_reps > 0:  # --reps (across nodes the calls are communication-bound: ms each)
            reps = pinned_reps
        row = {"op": op, "shape": label, "m": m, "k": k, "n": n, "world": world, "reps": reps}
        # The op's first call (outside the timing) measures and caches its fused/unfused verdict;
        # a fallback says so in a C++ warning (once per process and reason) on stderr.
        # (MKERNEL_FUSED_VERBOSE=1, set for the ranks: a fused verdict is printed with its plan.)
        first = stderr_of(lambda: fused(0)).splitlines()
        notes = [ln for ln in first if "runs unfused" in ln]
        picks = [ln for ln in first if "runs fused" in ln]
        if notes:
            row["path"] = "unfused: " + notes[0].split("engine GEMM): ")[-1].split(" (function")[0]
        elif picks:
            row["path"] = "fused " + picks[0].split("runs fused ")[-1].split(" at M=")[0]
        elif nodes > 1 and not fused_nodes:  # logged once
            row["path"] = "unfused: the group spans several nodes"
        elif op == "gemm_ar" and m <= 512:  # gemm_ar.cpp's decode rule, logged once per process
            row["path"] = "unfused: M <= 512 (gemm_ar's decode rule)"
        else:
            row["path"] = "fused"
        fns = {"fused_ms": (fused, {}),  # the op as users get it (the measured choice included)
               "fused_kernel_ms": (fused, {"MKERNEL_FUSED": "force"}),  # both sides on record
               "op_unfused_ms": (fused, {"MKERNEL_FUSED": "off"}),
               "gemm_ms": (gemm, {})}
        if has[coll]:
            # unfused twice: the spread between two figures of the same work is the run's noise
            fns.update(comm_ms=(comm, {}), unfused_ms=(unfused, {}))
            if with_b:
                fns.update(unfused_b_ms=(unfused, {}))
        times, got = timed_all(fns, reps, samples_per_figure)
        row.update(times)
        # This rank's samples: the op's and the forced kernel's medians by predecessor, and the
        # host's enqueue time per call against the GPU time (see timed_all).
        row["fused_by_prev_r0"] = by_predecessor("fused_ms")
        row["fused_kernel_by_prev_r0"] = by_predecessor("fused_kernel_ms")
        row["enqueue_over_gpu_r0"] = {
            n: round(statistics.median(e / max(ms, 1e-6) for ms, e, _ in v), 3)
            for n, v in trace.items()}
        row["fused_paired_kernel"] = paired(got, "fused_ms", "fused_kernel_ms")
        if nodes > 1:  # one call at a time, ranks aligned (aligned_ms)
            row["fused_kernel_aligned_ms"] = aligned_ms(fused, {"MKERNEL_FUSED": "force"},
                                                        samples_per_figure)
            if has[coll]:
                row["unfused_aligned_ms"] = aligned_ms(unfused, {}, samples_per_figure)
        if has[coll]:
            row["ideal_ms"] = max(row["gemm_ms"], row["comm_ms"])
            row["fused_vs_ideal"] = row["fused_ms"] / row["ideal_ms"]
            row["unfused_over_fused"] = row["unfused_ms"] / row["fused_ms"]
            row["unfused_over_fused_paired"] = paired(got, "unfused_ms", "fused_ms")
            row["unfused_over_fused_kernel"] = row["unfused_ms"] / row["fused_kernel_ms"]
            row["op_unfused_over_unfused"] = row["op_unfused_ms"] / row["unfused_ms"]
            row["op_unfused_over_unfused_paired"] = paired(got, "op_unfused_ms", "unfused_ms")
            row["kernel_vs_ideal"] = row["fused_kernel_ms"] / row["ideal_ms"]
            if with_b:
                row["unfused_b_over_unfused"] = row["unfused_b_ms"] / row["unfused_ms"]
                row["unfused_b_over_unfused_paired"] = paired(got, "unfused_b_ms", "unfused_ms")
        row["fused_tflops_per_rank"] = flops / row["fused_ms"] / 1e9
        row["gemm_tflops_per_rank"] = flops / row["gemm_ms"] / 1e9
        row["fused_over_gemm"] = row["fused_ms"] / row["gemm_ms"]
        row["fused_kernel_over_gemm"] = row["fused_kernel_ms"] / row["gemm_ms"]
        rows.append(row)
        if rank == 0:
            print("ROW " + json.dumps(row), flush=True)
            # Rank 0's samples, one line per figure: (GPU ms per call, host enqueue ms per call,
            # the figure timed before it).
            for name, v in trace.items():
                print(f"SAMPLES {op} {label} {name} " + json.dumps(v), flush=True)
            row["samples_r0"] = {n: list(v) for n, v in trace.items()}
            # The parent shows rank output only when the ranks end: keep each row on disk as it
            # comes (a run cut short by a timeout still leaves its rows).
            progress = Path(os.environ.get("OUT") or RESULTS_DIR, f"fused_rows_{tag}.jsonl")
            with open(progress, "a") as f:
                f.write(json.dumps(row) + "\n")
            print(f"bench_fused: {label} {op} done", file=sys.stderr, flush=True)
    if rank == 0:
        payload = {"bench": "fused", "commit": commit(), "device": device_info(), "world": world,
                   "nodes": nodes, "emulate": os.environ.get("MKERNEL_NET_EMULATE", "") if nodes > 1
                   else "",
                   "elapsed_s": time.monotonic() - t_start, "full": all_shapes, "only": only,
                   "method": "CUDA events; per figure 2 warm-up calls, then 9 rounds in which "
                             "every figure of the shape is timed once (after a barrier, an "
                             "untimed lead-in call, then `reps` calls back to back; order "
                             "rotating, reversed in odd rounds; environment pins set once per "
                             "sample); median per rank, max over ranks; inputs rotate over two "
                             "sets; *_paired: median of the per-round ratio, min over ranks; "
                             "unfused_b: the unfused figure timed twice (the run's noise)",
                   "mps_share_percent": os.environ.get("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"),
                   "fused_knobs": {k: v for k, v in sorted(os.environ.items())
                                   if k.startswith("MKERNEL_FUSED")},
                   "anchors_missing": [c for c, ok in has.items() if not ok],
                   "note": "NCCL / async-TP cannot share one GPU between ranks: not measured here",
                   "rows": rows}
        path = write_result(f"fused_{tag}", payload)
        print(f"wrote {path}", flush=True)
    mkernel.shutdown()
    dist.destroy_process_group()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--world", type=int, default=2)
    ap.add_argument("--full", action="store_true", help="every shape (minutes, not the 90 s slot)")
    ap.add_argument("--budget", type=float, default=55,
                    help="seconds of measurement after start-up; later shapes are skipped")
    ap.add_argument("--timeout", type=float, default=85)
    ap.add_argument("--nodes", type=int, default=1, help="emulated nodes (W a multiple)")
    ap.add_argument("--emulate", default="50GB/s,3us",
                    help="with --nodes > 1: the emulated link (MKERNEL_NET_EMULATE)")
    ap.add_argument("--fused-nodes", action="store_true",
                    help="with --nodes > 1: MKERNEL_FUSED_NODES=1 (ag_gemm's fused kernel across "
                         "nodes, opt-in)")
    ap.add_argument("--ops", default="", help="comma-separated ops to keep (e.g. ag_gemm)")
    ap.add_argument("--samples", type=int, default=9, help="rounds per shape (samples per figure)")
    ap.add_argument("--reps", type=int, default=0,
                    help="calls per sample (0: by the shape's FLOPs; across nodes the calls are "
                         "communication-bound, so a few suffice)")
    ap.add_argument("--no-b", action="store_true",
                    help="leave out unfused_b (the unfused figure timed twice: the run's noise)")
    ap.add_argument("--only", default="",
                    help="comma-separated words: only the shapes whose label has one (e.g. "
                         "llama,decode)")
    args = ap.parse_args()
    sys.path.insert(0, str(ROOT))
    from common import mps_daemon  # noqa: E402
    from tests.launch import run_ranks

    env = {"CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": str(100 // args.world),
           "BENCH_FULL": "1" if args.full else "0", "BENCH_BUDGET_S": str(args.budget),
           "BENCH_ONLY": args.only, "BENCH_NODES": str(args.nodes), "MKERNEL_FUSED_VERBOSE": "1",
           "NCCL_NVLS_ENABLE": "0"}
    code = f"import runpy; runpy.run_path({str(Path(__file__).resolve())!r}, run_name='__rank__')"
    env["BENCH_OPS"] = args.ops
    env.update(BENCH_SAMPLES=str(args.samples), BENCH_REPS=str(args.reps),
               BENCH_NO_B="1" if args.no_b else "0")
    if args.nodes > 1:
        env["MKERNEL_NET_EMULATE"] = args.emulate
        # Explicit either way (fused_common.h fused_nodes_enabled: the per-op defaults may change).
        env["MKERNEL_FUSED_NODES"] = "1" if args.fused_nodes else "0"
    tag = f"w{args.world}" + (f"_n{args.nodes}" if args.nodes > 1 else "") + align_tag()
    if args.fused_nodes and args.nodes > 1:
        tag += "_fn"
    progress = Path(os.environ.get("OUT") or RESULTS_DIR, f"fused_rows_{tag}.jsonl")
    progress.unlink(missing_ok=True)
    with mps_daemon("bench_fused") as mps_env:
        results = run_ranks(code, args.world, timeout=args.timeout, nodes=args.nodes,
                            env=dict(env, **mps_env))
    if progress.exists():  # the rows measured, even when the ranks were cut short
        print(progress.read_text(), end="", flush=True)
    for r in results:
        if r.returncode != 0 or r.rank == 0:
            sys.stdout.write(r.stdout[-6000:])
            sys.stderr.write(r.stderr[-4000:])
    sys.exit(max((r.returncode if r.returncode is not None else 124) for r in results))


if __name__ == "__main__":
    main()
elif __name__ == "__rank__":
    rank_main()
