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
    python benchmarks/bench_fused.py --world 4 --set issue --lean [--probe --variants co,hooked]

``--set issue`` is the fused-op issue's item-11 set (Llama-70B fc1 / fc2 at M = 8192 and 16384,
the square families at M = 4096 and 16384; --full: M = 2048 .. 32768), ``--lean`` 5 rounds, no
``op_unfused`` figure and ``fused_kernel`` only where the op falls back (a short device slot). ``--probe`` first measures how many CTAs of
2-CTA clusters MPS places for the W ranks at once by grid (JSON ``placement``); ``--variants``
adds figures on the ``--variant-rows`` rows: ``co`` (the op with MKERNEL_FUSED_CO_GRID = the
probe's largest whole grid, when it differs from the 3/4 rule's), ``barrier`` (the op with
MKERNEL_FUSED_GATE_MODE=barrier), each with its output compared bit for bit with the default
op's (``fused_<v>_same_bits``), ``hooked`` (the fused config's GEMM half alone on the
co-resident grid: what the fused kernel costs over its own GEMM vs what its config and grid cost
against the engine's tuned plan, ``gemm_plan``) and ``timeline`` (4 calls back to back with
per-CTA stamps: placement, GEMM phase, tail; ``timeline_of``). The parent writes the table and the PNG
(benchmarks/report.py) beside the JSON and copies them to $OUT.

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

``--nodes-lean`` (across emulated nodes, with ``--fused-nodes``): one shape per op in ~10-15 s,
rows in ``--ops`` order, the figures the across-nodes default rules need (the op, the forced
kernel, GEMM, comm, unfused; aligned single calls; the kernel's output against unfused), every
line written into the log as it is measured (``--stream``: rank 0 inherits this process's
stdout / stderr; phase times, ``ROUND`` lines); ``--gpu-gate ag_gemm`` adds MKERNEL_FUSED_GATE_GPU's
figures after the rows (``GATE``). ``--device cpu --scale-down 16`` runs the rank code through the
CPU ops (a dry run of the code path without a GPU).

(``fused`` is the op as users get it, the unfused fallback included where the measured choice
picks it; ``fused_kernel`` forces the fused kernel and ``op_unfused`` the op's unfused path, so
both sides of that choice are on record.)

(launches the ranks itself through tests/launch.py, under the MPS daemon named by
CUDA_MPS_PIPE_DIRECTORY or one it starts and stops itself.)
"""

from __future__ import annotations

import argparse
import contextlib
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
def square(out: list, m: int, world: int) -> None:
    """The seed's square families at M (per rank as a W-rank job sees them): ag_gemm M=K,
    N=M/16 (x [M/W, M], w [M/16, M]: N not sharded, the gathered GEMM is M x M/16 x M);
    gemm_rs / gemm_ar M=N, K=M/16 (x [M, M/16/W], w [M, M/16/W])."""
    out.append(("ag_gemm", f"square M={m}", m // world, m, m // 16))
    out.append(("gemm_rs", f"square M={m}", m, m // 16 // world, m))
    out.append(("gemm_ar", f"square M={m}", m, m // 16 // world, m))


# The issue's item-11 set (--set issue): the Llama-70B rows at M = 8192 and 16384 and the square
# families, each row fused vs the overlap ideal vs unfused in one run. Without --full the square
# families at M = 4096 (communication-heavy: K = 256 per rank at W = 4) and 16384 (the largest
# that keeps a W = 4 run near a minute); --full walks M = 2048 .. 32768.
def issue_shapes(world: int, full: bool) -> list[tuple[str, str, int, int, int]]:
    out = []

    def llama(m: int) -> None:
        out.append(("ag_gemm", f"llama70b-fc1 M={m}", m // world, 8192, 28672 // world))
        out.append(("gemm_rs", f"llama70b-fc2 M={m}", m, 28672 // world, 8192))
        out.append(("gemm_ar", f"llama70b-fc2 M={m}", m, 28672 // world, 8192))
    for m in ([2048, 4096, 8192, 16384, 32768] if full else [4096, 16384]):
        square(out, m, world)  # first: cheap, and a budget cut keeps the family whole
    llama(8192)
    llama(16384)
    return out


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


# The rank's row clock (rank_main's budget check): when the current row started, the longest row.
ROW_CLOCK = {"start": None, "longest": 0.0}


def align_tag() -> str:
    """The file-name suffix "_align" when the ranks run with MKERNEL_FUSED_ALIGN=1 (choose_path
    aligns the ranks before each timed sample: fused_common.h; opt-in, inherited by the ranks
    from this environment), "_gate" with MKERNEL_FUSED_GATE=1 (the fused launch gate,
    fused_common.h gate_requested), so a run with and one without them keep separate files."""
    return ("_align" if os.environ.get("MKERNEL_FUSED_ALIGN") == "1" else "") + \
        ("_gate" if os.environ.get("MKERNEL_FUSED_GATE") == "1" else "")


def best_whole_grid(probes: list[dict]) -> int:
    """The largest 2-CTA-cluster grid that every rank got placed whole in every rep (probes:
    probe_placement's records), 0 if none."""
    return max((p["grid"] for p in probes
                if p["cluster"] == 2 and all(w == p["grid"] for rep in p["first_wave_per_rank"]
                                             for w in rep)), default=0)


def probe_placement(rank: int, world: int, share: int, default_co: int) -> dict:
    """How many CTAs of 2-CTA clusters (one per SM: ~200 KiB of shared memory, as the fused
    kernels) MPS places for the W ranks at once, by grid (benchmarks/fused_diag.py's SM-placement
    probe: every rank launches its grid at a common GPU time and each CTA holds its SM for 1 ms;
    a rank's grid is whole when every CTA arrived within the first half of the hold). s8run2
    measured W = 2 only (96 of 132 SMs: 48 + 48 whole, hence fused_common.h's 3/4 rule, 24 at
    W = 4). Returns the probes and best_c2_grid: the largest grid whole on every rank in every
    rep (0 if none). Every rank computes it from the same gathered records."""
    import torch
    import torch.distributed as dist

    from fused_diag import PROBE_HOLD_NS, PROBE_SMEM_BIG, summarise_probe

    mk = torch.ops.mkernel
    grids = [g for g in range(max(2, default_co - 4), share + 1, 2)]
    probes = []
    for cluster, grid in [(2, g) for g in grids] + [(1, share)]:
        waves = []
        for _ in range(2):
            dist.barrier()
            now = torch.tensor([mk._gpu_globaltimer()], dtype=torch.int64)
            dist.all_reduce(now, op=dist.ReduceOp.MAX)
            start = int(now.item()) + 3_000_000  # past every rank's launch
            rec = mk._sm_probe(grid, cluster, PROBE_SMEM_BIG, start, PROBE_HOLD_NS).cpu().tolist()
            torch.cuda.synchronize()
            got = [None] * world
            dist.all_gather_object(got, rec)
            summ = summarise_probe(dict(enumerate(got)), start)
            per_rank = [summ.get(f"rank{r}", {}).get("first_wave", 0) for r in range(world)]
            waves.append(per_rank)
        probes.append({"cluster": cluster, "grid": grid, "first_wave_per_rank": waves,
                       "whole": all(w == grid for rep in waves for w in rep)})
    out = {"share_sms": share, "default_co_grid": default_co,
           "best_c2_grid": best_whole_grid(probes), "probes": probes}
    if rank == 0:
        print("PLACEMENT " + json.dumps(out), flush=True)
    return out


def row_falls_back(path: str) -> bool:
    """Whether the op ran its unfused path at this shape (then --lean still times the fused
    kernel forced, so both sides of the choice are on record; where the op runs fused, the
    forced kernel is the same plan and --lean leaves it out)."""
    return path.startswith("unfused")


def peer_choice(row: dict) -> dict:
    """ag_gemm's route choice on a --variants peertma row (fused16): what the op as users get it
    ran (MKERNEL_FUSED_AG_PEER_TMA=auto: its first call measured the copy kernel, the peer-TMA
    kernel and the unfused path; `path` from its verbose line) against both kernels forced
    (fused_kernel_ms: =0, fused_peertma_ms: =1, each MKERNEL_FUSED=force): which forced kernel is
    faster here, whether the op's pick is that one, and the op's time over the better forced one.
    The rule of benchmarks/NOTES.md "fused16" reads these fields."""
    path = row.get("path", "")
    route = "unfused" if path.startswith("unfused") else "peer-TMA" if "peer-TMA" in path \
        else "copy"
    copy_ms, peer_ms = row["fused_kernel_ms"], row["fused_peertma_ms"]
    faster = "peer-TMA" if peer_ms < copy_ms else "copy"
    best = min(copy_ms, peer_ms)
    return {"op": row.get("op"), "shape": row.get("shape"), "route": route,
            "forced_faster": faster, "picked_faster": route == faster,
            "op_ms": round(row["fused_ms"], 4), "copy_ms": round(copy_ms, 4),
            "peer_ms": round(peer_ms, 4), "peer_over_copy": round(peer_ms / copy_ms, 4),
            "op_over_best_forced": round(row["fused_ms"] / best, 4),
            "op_over_copy_paired": row.get("fused_paired_kernel"),
            "op_over_peer_paired": row.get("fused_over_peertma_paired"),
            "peer_over_copy_paired": row.get("fused_peertma_over_kernel_paired")}


def verdict_summary(row: dict) -> dict:
    """The row's verdict line (fused17, a VERDICT line per row): what the op's first call kept
    (path; its test from the verbose line: rounds, median fused/unfused per round, wins of the
    test rounds, wins needed; the route against the other finalist), what it cost (first_call_s;
    of it warmup_s, the paths' first calls — mostly the engine tuner's for the unfused GEMM —
    and rounds_s, the measurement's rounds),
    and the steady-state ratios the rule of benchmarks/NOTES.md "fused17" reads: unfused / op
    (>= 1.0 wanted where the op runs fused), the op / the overlap ideal, and on --variants peertma
    rows the op / the better forced kernel."""
    t = row.get("first_call_test") or {}
    if not isinstance(t, dict) or "verdict" not in t:
        t = {}
    out = {"op": row.get("op"), "shape": row.get("shape"), "world": row.get("world"),
           "path": row.get("path"), "first_call_s": row.get("first_call_s"),
           "warmup_s": t.get("warmup_s"),
           "rounds_s": round(t["seconds"] - t["warmup_s"], 3) if "seconds" in t else None,
           "rounds": t.get("rounds"), "verdict": t.get("verdict"),
           "test_median": t.get("median"), "test_wins": t.get("wins"), "test_n": t.get("n"),
           "test_needed": t.get("needed"), "screened": t.get("screened"),
           "route_median": t.get("route_median")}
    for name in ("unfused_over_fused", "unfused_over_fused_paired", "fused_vs_ideal",
                 "unfused_b_over_unfused_paired"):
        if name in row:
            out[name] = round(row[name], 4)
    if "choice" in row:
        out["op_over_best_forced"] = row["choice"].get("op_over_best_forced")
        out["forced_faster"] = row["choice"].get("forced_faster")
        out["route"] = row["choice"].get("route")
    return out


def select_rows(rows: list, only: list[str], only_ops: list[str],
                by_ops_order: bool = False) -> list:
    """The (op, label, a, b, c) rows that --only (a word of the label) and --ops keep; with
    by_ops_order (--nodes-lean), in --ops order (ag_gemm first when asked first: a cut run
    keeps the rows asked for first), the set's order within an op."""
    out = [r for r in rows if (not only or any(w in r[1] for w in only))
           and (not only_ops or r[0] in only_ops)]
    if by_ops_order and only_ops:
        out.sort(key=lambda r: only_ops.index(r[0]))  # stable: the set's order within an op
    return out


def nodes_lean_figures(has_coll: bool) -> list[str]:
    """The figures of a --nodes-lean row (across emulated nodes, one shape in ~10-15 s): the op as
    users get it, the fused kernel forced (the op-vs-kernel gap), the GEMM alone, and where the
    substrate has the collective: the collective alone and collective + GEMM (unfused). No
    op_unfused (s9run3: the op's fallback costs nothing over unfused) and no unfused_b (the
    noise is read from the per-sample SAMPLES / ROUND lines instead)."""
    names = ["fused_ms", "fused_kernel_ms", "gemm_ms"]
    if has_coll:
        names += ["comm_ms", "unfused_ms"]
    return names


class HostEvent:
    """torch.cuda.Event's timing surface on the host clock: BENCH_DEVICE=cpu (a dry run of the
    bench's rank code through the CPU ops on a machine without a GPU: the figures are the host
    reference's, only the code path and the start-up are what a GPU run gets)."""

    def __init__(self, enable_timing: bool = True) -> None:
        self.t = 0.0

    def record(self) -> None:
        self.t = time.perf_counter()

    def synchronize(self) -> None:
        pass

    def elapsed_time(self, end: "HostEvent") -> float:
        return (end.t - self.t) * 1e3


def timeline_of(fused, rank: int, world: int, pushed_bytes: int) -> dict | None:
    """Four calls of the op (its measured plan) back to back with per-CTA %globaltimer stamps
    (MKERNEL_FUSED_TIMELINE, MKERNEL_FUSED_TIMELINE_CALLS=4: one host sync after the 4th),
    summarised per launch over the ranks (fused_diag.py summarise_pipeline): the smallest first
    wave (CTAs started within 50 us of the rank's first: the grid placed whole or not), the GEMM
    phase (first CTA start -> last tile stored, slowest rank), the tail after it (-> last CTA
    exit: the reduce the side warps did not hide), ag_gemm's copy rate, the period."""
    import torch
    import torch.distributed as dist

    from common import env_set
    from fused_diag import summarise_pipeline

    path = Path(tempfile.gettempdir(), f"bench_fused_tl_{os.getppid()}")
    torch.cuda.synchronize()
    dist.barrier()
    with env_set({"MKERNEL_FUSED_TIMELINE": str(path), "MKERNEL_FUSED_TIMELINE_CALLS": "4"}):
        for i in range(4):
            fused(i)
    torch.cuda.synchronize()
    dist.barrier()
    out = None
    if rank == 0:
        try:
            lines = {r: Path(f"{path}.rank{r}").read_text().strip().splitlines()[-4:]
                     for r in range(world)}
            pipe = summarise_pipeline(lines, pushed_bytes)
            launches = []
            for lc in pipe["launches"]:
                ranks = [v for key, v in lc.items() if key.startswith("rank")]
                start = min(v["start_min_us"] for v in ranks)
                gemm_end = max(v["gemm_done_max_us"] for v in ranks)
                launches.append({
                    "first_wave_min": min(v["first_wave"] for v in ranks),
                    "ctas": ranks[0]["ctas"],
                    "gemm_phase_us": round(gemm_end - start, 1),
                    "tail_us": round(max(v["exit_max_us"] for v in ranks) - gemm_end, 1),
                    "copy_gbs_min": min((v["copy_gbs"] for v in ranks if v.get("copy_gbs")),
                                        default=None),
                    "period_us": lc.get("period_us")})
            out = {"launches": launches, "period_us": pipe["period_us"],
                   "peak_ctas": pipe["peak_ctas"]}
        except Exception as exc:  # noqa: BLE001 (a measurement aid: the row stands without it)
            out = {"error": f"{type(exc).__name__}: {exc}"}
        for r in range(world):
            Path(f"{path}.rank{r}").unlink(missing_ok=True)
    return out


def capture_fd2(fn, after=None, on_failure=None) -> str:
    """Runs fn() then after() with file descriptor 2 captured; writes what they wrote on to the
    real fd 2 and returns it. When they raise, the captured text (a stuck GPU-direct copy's line,
    the proxy's error, the verbose measurement) and on_failure()'s text are written first, then
    the exception propagates: s14run1's xn5_B / xn3_w2 lost exactly those lines."""
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile() as tmp:
        os.dup2(tmp.fileno(), 2)
        try:
            fn()
            if after is not None:
                after()
        except BaseException:
            os.dup2(saved, 2)
            tmp.seek(0)
            sys.stderr.write(tmp.read().decode(errors="replace"))
            if on_failure is not None:
                try:
                    sys.stderr.write(on_failure())
                except Exception as e:  # noqa: BLE001
                    sys.stderr.write(f"(after the failure: {type(e).__name__}: {e})\n")
            sys.stderr.flush()
            raise
        finally:
            os.dup2(saved, 2)
            os.close(saved)
        tmp.seek(0)
        text = tmp.read().decode(errors="replace")
    sys.stderr.write(text)
    return text


def rank_main() -> None:
    import torch
    import torch.distributed as dist

    sys.path.insert(0, str(ROOT / "benchmarks"))
    from common import commit, copier_delta, device_info, env_set, write_result  # noqa: E402

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
    set_name = os.environ.get("BENCH_SET", "default")
    lean = os.environ.get("BENCH_LEAN") == "1"
    variants = [v for v in os.environ.get("BENCH_VARIANTS", "").split(",") if v]
    variant_rows = [w for w in os.environ.get("BENCH_VARIANT_ROWS", "llama").split(",") if w]
    # --nodes-lean: the across-nodes timing row (nodes_lean_figures), rows in --ops order, each
    # printed the moment it is measured (with --stream, rank 0 writes straight into the log), the
    # GPU gate's figures after the row (BENCH_GPU_GATE), phase times on stderr.
    nodes_lean = os.environ.get("BENCH_NODES_LEAN") == "1"
    gpu_gate_ops = [w for w in os.environ.get("BENCH_GPU_GATE", "").split(",") if w]
    t_start = time.monotonic()
    t0_wall = float(os.environ.get("BENCH_T0") or time.time())  # the parent's start

    def note(msg: str) -> None:
        """Rank 0: one stderr line, seconds since the parent started (where the time goes)."""
        if rank == 0:
            print(f"bench_fused +{time.time() - t0_wall:.1f} s: {msg}", file=sys.stderr,
                  flush=True)

    note("rank up (python + torch + mkernel imported)")
    dev = os.environ.get("BENCH_DEVICE") or "cuda"  # cpu: a dry run (HostEvent)
    on_gpu = dev == "cuda"
    Event = torch.cuda.Event if on_gpu else HostEvent
    sync = torch.cuda.synchronize if on_gpu else (lambda: None)
    # BENCH_SCALE_DOWN=d (dry runs): every dim / d, kept a multiple of 8 (the CPU ops are slow).
    scale = max(1, int(os.environ.get("BENCH_SCALE_DOWN") or 1))
    if on_gpu:
        torch.cuda.set_device(0)
    else:  # dry run: the GPU-only lines below (SM count, the hooked variant's tensor) on the host
        import types
        torch.cuda.get_device_properties = lambda *_: types.SimpleNamespace(
            multi_processor_count=2)
        host_zeros = torch.zeros
        torch.zeros = lambda *a, device=None, **kw: host_zeros(
            *a, device="cpu" if device == "cuda" else device, **kw)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    ctx = mkernel.init()
    note(f"mkernel.init done (W={world}, nodes={nodes})")
    mk = torch.ops.mkernel
    has = {name: hasattr(mk, name) for name in ("all_gather", "reduce_scatter", "all_reduce")}
    share = torch.cuda.get_device_properties(0).multi_processor_count  # this MPS client's SMs
    from mkernel._fused_defaults import co_resident_grid
    default_co = co_resident_grid(share)  # fused_common.cpp co_resident_grid (no knob)
    placement = probe_placement(rank, world, share, default_co) \
        if os.environ.get("BENCH_PROBE") == "1" else None
    if placement and rank == 0:  # on disk at once: the parent prints this file in full
        with open(Path(os.environ.get("OUT") or RESULTS_DIR, f"fused_rows_{tag}.jsonl"), "a") as f:
            f.write("PLACEMENT " + json.dumps(placement) + "\n")
    # Variant figures (--variants, on the rows matching --variant-rows), each the op as users
    # get it under one opt-in knob, or an anchor:
    #   co: MKERNEL_FUSED_CO_GRID = the largest 2-CTA-cluster grid the probe placed whole on
    #       every rank (only when it differs from the 3/4 rule's);
    #   barrier: MKERNEL_FUSED_GATE_MODE=barrier (the launch gate waits for every peer's gate);
    #   hooked: the fused kernel's GEMM half alone: the hooked engine kernel in the fused config
    #       (coop_128x256_c2x1) on the co-resident grid with no waits, each call after a device
    #       barrier (the substrate's all_gather of 8 floats, which the figure includes) so the
    #       ranks' grids are placed together as the gated fused kernel's are.
    var_env = {}
    if "co" in variants and placement and placement["best_c2_grid"] not in (0, default_co):
        var_env["co"] = {"MKERNEL_FUSED_CO_GRID": str(placement["best_c2_grid"])}
    if "barrier" in variants:
        var_env["barrier"] = {"MKERNEL_FUSED_GATE_MODE": "barrier"}
    #   c1x1 (fused18): the fused kernel forced (MKERNEL_FUSED=force) with MKERNEL_FUSED_C1X1=1 —
    #       the cluster-free coop_128x256_c1x1 in place of coop_128x256_c2x1, on the share's grid
    #       or its own co-resident grid (126/132 of the share: 63 at W = 2), by the forced
    #       measurement — beside the forced default kernel (fused_kernel_ms, added on those rows):
    #       fused_c1x1_over_kernel_paired, fused_c1x1_vs_ideal, the plan it ran (c1x1_path) and a
    #       C1X1 line per row.
    if "c1x1" in variants:
        var_env["c1x1"] = {"MKERNEL_FUSED_C1X1": "1", "MKERNEL_FUSED": "force"}
    #   pipe: the forced default kernel with MKERNEL_FUSED_SIDE=pipe (the side warps' reduce
    #       double-buffered in 16 KiB), beside the forced default kernel (fused_kernel_ms): an S2
    #       line per row. (fused19's 2-stage, 96 KiB kernel measured 1.08-1.13x slower and was
    #       dropped in session 18: NOTES "fused19".)
    if "pipe" in variants:
        var_env["pipe"] = {"MKERNEL_FUSED_SIDE": "pipe", "MKERNEL_FUSED": "force"}
    #   peertma (ag_gemm rows only; fused13, kernels/fused/fused_peer_tma.cuh): the fused kernel
    #       forced (MKERNEL_FUSED=force) with MKERNEL_FUSED_AG_PEER_TMA=1 — the GEMM loads the
    #       peers' rows by TMA, the side warps only stage x locally — beside the forced copy-path
    #       kernel (fused_kernel_ms, added on those rows): fused_peertma_over_kernel_paired, and
    #       its output against the copy kernel's (same config and order: same bits expected).
    #       (The copy kernel is pinned with MKERNEL_FUSED_AG_PEER_TMA=0, so the comparison holds
    #       whatever the default. fused16: the op itself, fused_ms, runs the default auto — both
    #       kernels measured per shape by its first call — and the row's `choice` (peer_choice,
    #       a CHOICE line) says which it kept against both forced figures.)
    peer_env = {"MKERNEL_FUSED_AG_PEER_TMA": "1", "MKERNEL_FUSED": "force"}
    copy_env = {"MKERNEL_FUSED_AG_PEER_TMA": "0", "MKERNEL_FUSED": "force"}
    tiny = torch.zeros(8, device="cuda", dtype=torch.float32)

    def with_env(fn, env: dict):
        """Runs fn(i) for each i of an iterable with `env` set around all of them (set once per
        sample, not per call: decode-sized calls would time the environment's edits)."""
        def run(indices):
            with env_set(env):
                for i in indices:
                    fn(i)
        return run

    def timed_all(fns: dict, reps: int, samples: int = 5 if lean else 9) -> tuple[dict, dict]:
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
        sync()
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
                start = Event(enable_timing=True)
                end = Event(enable_timing=True)
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
            if nodes_lean and rank == 0:  # a cut row still leaves its rounds (rank 0's ms)
                print(f"ROUND {i} " + json.dumps({n: round(got[n][-1], 3) for n in names
                                                  if len(got[n]) > i}), flush=True)
        t = torch.tensor([statistics.median(got[n]) for n in names], dtype=torch.float64)
        if nodes_lean:  # every rank's median (is one rank, or one node, the slow one?)
            each = [torch.zeros_like(t) for _ in range(world)]
            dist.all_gather(each, t)
            per_rank.clear()
            per_rank.update({n: [round(e[j].item(), 3) for e in each]
                             for j, n in enumerate(names)})
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
                sync()
                dist.barrier()
                start = Event(enable_timing=True)
                end = Event(enable_timing=True)
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
        def after_failure() -> str:
            # The inter-node path's state (its proxy's oldest command, the copier's counts),
            # readable on the host after the context is gone.
            if nodes <= 1:
                return ""
            try:
                info = torch.ops.mkernel._net_path_info(ctx.handle, world)
            except Exception as e:  # noqa: BLE001
                info = f"unreadable: {type(e).__name__}: {e}"
            return f"bench_fused: rank {rank} inter-node path after the failure: {info}\n"
        return capture_fd2(fn, sync, after_failure)

    def against(out: torch.Tensor, ref: torch.Tensor) -> tuple[bool, float]:
        """(bit-equal on every rank, max over ranks of ||out - ref|| / ||ref||)."""
        same = torch.tensor([1.0 if torch.equal(out, ref) else 0.0])
        rel = torch.tensor([((out.float() - ref.float()).norm() /
                             ref.float().norm().clamp_min(1e-30)).item()])
        dist.all_reduce(same, op=dist.ReduceOp.MIN)
        dist.all_reduce(rel, op=dist.ReduceOp.MAX)
        return bool(same.item() == 1.0), rel.item()

    def paired(got: dict, num: str, den: str) -> float:
        """The median over rounds of got[num] / got[den] within each round, the lowest rank's."""
        r = torch.tensor([statistics.median(a / b for a, b in zip(got[num], got[den]))],
                         dtype=torch.float64)
        dist.all_reduce(r, op=dist.ReduceOp.MIN)
        return r.item()

    trace: dict = {}  # timed_all's per-sample record of this rank: name -> [(ms, enqueue ms, prev)]
    per_rank: dict = {}  # --nodes-lean: timed_all's median of every rank, name -> [ms by rank]
    samples_per_figure = int(os.environ.get("BENCH_SAMPLES") or (5 if lean else 9))
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

    def gate_phase(op: str, label: str, fused, row: dict, reps: int, has_coll: bool) -> None:
        """MKERNEL_FUSED_GATE_GPU=1's figures for a measured row (--gpu-gate); see the call."""
        # After every row is on record (the gate has never run on a GPU: a trap here loses
        # only these lines): MKERNEL_FUSED_GATE_GPU=1 (fused_gpu_gate.cu: each fused grid
        # across nodes waits until the other emulated nodes' ranks on this GPU finished the
        # same call). The op's verdict under the gate is its own (the variable joins the
        # verdict key: a fresh choose_path measurement, its figures in the verbose line),
        # then the gated op and the gated kernel against the ungated kernel, interleaved.
        gate = {"MKERNEL_FUSED_GATE_GPU": "1"}
        note(f"{label} {op}: GPU gate: first gated call (choose_path under the gate) ...")
        with env_set(gate):
            gfirst = stderr_of(lambda: fused(0)).splitlines()
        g = {"op": op, "shape": label, "world": world, "reps": reps}
        gnotes = [ln for ln in gfirst if "runs unfused" in ln]
        gpicks = [ln for ln in gfirst if "runs fused" in ln]
        g["path_gated"] = ("unfused: " + gnotes[0].split("engine GEMM): ")[-1]) if gnotes \
            else ("fused " + gpicks[0].split("runs fused ")[-1]) if gpicks \
            else "same as ungated (no new verdict line)"
        gfns = {"fused_kernel_ms": (fused, {"MKERNEL_FUSED": "force"}),
                "fused_gpugate_ms": (fused, gate),
                "fused_kernel_gpugate_ms": (fused, dict(gate, MKERNEL_FUSED="force"))}
        gtimes, ggot = timed_all(gfns, reps, samples_per_figure)
        g.update(gtimes)
        g["per_rank_ms"] = dict(per_rank)
        g["kernel_gpugate_over_kernel_paired"] = paired(ggot, "fused_kernel_gpugate_ms",
                                                        "fused_kernel_ms")
        g["gpugate_over_kernel_paired"] = paired(ggot, "fused_gpugate_ms", "fused_kernel_ms")
        if has_coll:
            g["unfused_ms_from_row"] = row["unfused_ms"]
            g["unfused_over_fused_gpugate"] = row["unfused_ms"] / g["fused_gpugate_ms"]
        with env_set({"MKERNEL_FUSED": "force"}):
            ref = fused(0)
        with env_set(dict(gate, MKERNEL_FUSED="force")):
            out = fused(0)
        g["gpugate_same_bits"], g["gpugate_rel_diff"] = against(out, ref)
        del out, ref
        row["gpu_gate"] = g
        if rank == 0:
            print("GATE " + json.dumps(g), flush=True)
            for name, v in trace.items():
                print(f"SAMPLES {op} {label} gate:{name} " + json.dumps(v), flush=True)
        note(f"{label} {op}: GPU gate figures done")

    def copier_probe(fused, unfused, calls: int = 3) -> dict:
        """The GPU-direct copier's submission path and per-copy cost (xnode7) over `calls` forced
        fused calls, then `calls` unfused ones (apart: the row's rounds mix both), this rank's
        copier; {} per figure when the path is not GPU-direct. Copies: commands the proxy handed
        to the copier (the fused ops' tiles / the collective's pieces)."""
        out = {}
        for name, fn, env in (("fused_kernel", fused, {"MKERNEL_FUSED": "force"}), ("unfused", unfused, {})):
            if fn is None:
                continue
            before = torch.ops.mkernel._net_path_info(ctx.handle, world)
            t = time.monotonic()
            with env_set(env):
                for i in range(calls):
                    fn(i)
                sync()
            d = copier_delta(before, torch.ops.mkernel._net_path_info(ctx.handle, world))
            d["calls"], d["wall_ms_per_call"] = calls, round(1e3 * (time.monotonic() - t) / calls, 3)
            out[name] = d
        return out

    gate_todo: list = []  # (op, label, fused, row, reps, has_coll) for gate_phase
    rows = []
    picked = select_rows((issue_shapes if set_name == "issue" else shapes)(world, all_shapes),
                         only, only_ops, by_ops_order=nodes_lean)
    for op, label, a, b, c in picked:
        if scale > 1:
            a, b, c = (max(8, v // scale // 8 * 8) for v in (a, b, c))
        # Every rank stops at the same shape: rank 0's clock decides. A row starts only if the
        # longest row so far would still end within the budget (s11run2: W = 4's Llama rows with
        # variant figures ran one row past the call's cap, and the cut run returned nothing).
        now = time.monotonic()
        if ROW_CLOCK["start"] is not None:
            ROW_CLOCK["longest"] = max(ROW_CLOCK["longest"], now - ROW_CLOCK["start"])
        ROW_CLOCK["start"] = now
        stop = torch.tensor([1.0 if now - t_start + ROW_CLOCK["longest"] > budget else 0.0])
        dist.broadcast(stop, 0)
        if stop.item():
            if rank == 0:
                print(f"bench_fused: budget of {budget:.0f} s spent, stopping before {label} {op}",
                      file=sys.stderr, flush=True)
            break
        dt = torch.bfloat16
        if op == "ag_gemm":
            m, k, n = a, b, c
            xs = [torch.randn(m, k, device=dev, dtype=dt) for _ in range(2)]
            ws = [torch.randn(n, k, device=dev, dtype=dt) / 64 for _ in range(2)]
            full = [torch.randn(world * m, k, device=dev, dtype=dt) for _ in range(2)]
            flops = 2.0 * world * m * n * k
            fused = lambda i: mkernel.ag_gemm(xs[i % 2], ws[i % 2], group=ctx)  # noqa: E731
            gemm = lambda i: mkernel.gemm(full[i % 2], ws[i % 2])  # noqa: E731
            a_of = full  # the GEMM's A: the gathered rows
            coll = "all_gather"
            comm = lambda i: mk.all_gather.default(xs[i % 2], ctx.handle, world)  # noqa: E731
            unfused = lambda i: mkernel.gemm(comm(i), ws[i % 2])  # noqa: E731
        else:
            m, k, n = a, b, c
            xs = [torch.randn(m, k, device=dev, dtype=dt) for _ in range(2)]
            ws = [torch.randn(n, k, device=dev, dtype=dt) / 64 for _ in range(2)]
            parts = [torch.randn(m, n, device=dev, dtype=dt) for _ in range(2)]
            flops = 2.0 * m * n * k
            fn = mkernel.gemm_rs if op == "gemm_rs" else mkernel.gemm_ar
            fused = lambda i, fn=fn: fn(xs[i % 2], ws[i % 2], group=ctx)  # noqa: E731
            gemm = lambda i: mkernel.gemm(xs[i % 2], ws[i % 2])  # noqa: E731
            a_of = xs
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
        note(f"{label} {op}: first call (the op's choose_path measurement) ...")
        t_first = time.monotonic()
        first = stderr_of(lambda: fused(0)).splitlines()
        row["first_call_s"] = round(time.monotonic() - t_first, 2)
        note(f"{label} {op}: first call done in {row['first_call_s']} s")
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
        if op == "ag_gemm":  # fused16: the copy or the peer-TMA kernel, by the op's measurement
            row["path_peer_tma"] = "peer-TMA" in row["path"]
        # fused17: the first call's test (csrc/fused_verdict.h, the verbose "measured" line):
        # rounds, the kept route's median fused/unfused ratio, wins / test rounds / needed.
        from mkernel._fused_verdicts import parse_tests
        tests = parse_tests("\n".join(first), f"mkernel.{op}")
        row["first_call_test"] = next(iter(tests.values()), None) if len(tests) == 1 else \
            (tests or None)
        try:  # what the GEMM-alone anchor runs (the engine's tuned plan at this share)
            row["gemm_plan"] = mk.gemm_plan(a_of[0], ws[0], 0)
        except Exception as exc:  # noqa: BLE001 (an older build without the op)
            row["gemm_plan"] = f"unknown ({type(exc).__name__})"
        fns = {"fused_ms": (fused, {}),  # the op as users get it (the measured choice included)
               "gemm_ms": (gemm, {})}
        if not lean or row_falls_back(row["path"]):
            fns["fused_kernel_ms"] = (fused, {"MKERNEL_FUSED": "force"})  # both sides on record
        if not lean:  # the op's own unfused path (s9run3: costs nothing measurable over unfused)
            fns["op_unfused_ms"] = (fused, {"MKERNEL_FUSED": "off"})
        on_variants = any(w in label for w in variant_rows)
        peer_row = on_variants and "peertma" in variants and op == "ag_gemm"
        if peer_row:  # the copy-path kernel (the peer path is ag_gemm's default since fused14)
            fns["fused_kernel_ms"] = (fused, copy_env)
            fns["fused_peertma_ms"] = (fused, peer_env)
        if on_variants and "pipe" in var_env and \
                "fused_kernel_ms" not in fns:
            fns["fused_kernel_ms"] = (fused, {"MKERNEL_FUSED": "force"})
        if on_variants and "c1x1" in var_env:
            if "fused_kernel_ms" not in fns:  # the forced default kernel beside the knob's
                fns["fused_kernel_ms"] = (fused, {"MKERNEL_FUSED": "force"})
            # The knob's forced measurement (its first call) outside the timing, and its plan.
            with env_set(var_env["c1x1"]):
                c1_lines = stderr_of(lambda: fused(0)).splitlines()
            c1_picks = [ln for ln in c1_lines if "runs fused" in ln]
            row["c1x1_path"] = (c1_picks[0].split("runs fused ")[-1].split(" at M=")[0]
                                if c1_picks else "no 'runs fused' line (see stderr)")
        if on_variants:
            for name, env in var_env.items():
                fns[f"fused_{name}_ms"] = (fused, env)
            if "hooked" in variants:
                def hooked(i, a_of=a_of):
                    mk.all_gather.default(tiny, ctx.handle, world)
                    mk.gemm_hooked(a_of[i % 2], ws[i % 2], None, 128, 0, None, 1, None, 0,
                                   default_co, 0, 0, 10.0, 1)
                fns["gemm_hooked_co_ms"] = (hooked, {})
        if has[coll]:
            # unfused twice: the spread between two figures of the same work is the run's noise
            fns.update(comm_ms=(comm, {}), unfused_ms=(unfused, {}))
            if with_b:
                fns.update(unfused_b_ms=(unfused, {}))
        if nodes_lean:  # the across-nodes row: these figures only (nodes_lean_figures)
            every = dict(fns, fused_kernel_ms=(fused, {"MKERNEL_FUSED": "force"}),
                         comm_ms=(comm, {}), unfused_ms=(unfused, {}))
            fns = {n: every[n] for n in nodes_lean_figures(has[coll])}
        note(f"{label} {op}: timing {', '.join(fns)} ({samples_per_figure} rounds x "
             f"(1 + {reps}) calls)")
        times, got = timed_all(fns, reps, samples_per_figure)
        if nodes_lean:
            row["per_rank_ms"] = dict(per_rank)
        note(f"{label} {op}: timed")
        row.update(times)
        # This rank's samples: the op's and the forced kernel's medians by predecessor, and the
        # host's enqueue time per call against the GPU time (see timed_all).
        row["fused_by_prev_r0"] = by_predecessor("fused_ms")
        row["fused_kernel_by_prev_r0"] = by_predecessor("fused_kernel_ms")
        row["enqueue_over_gpu_r0"] = {
            n: round(statistics.median(e / max(ms, 1e-6) for ms, e, _ in v), 3)
            for n, v in trace.items()}
        if "fused_kernel_ms" in got:
            row["fused_paired_kernel"] = paired(got, "fused_ms", "fused_kernel_ms")
        if nodes > 1:  # one call at a time, ranks aligned (aligned_ms)
            row["fused_kernel_aligned_ms"] = aligned_ms(fused, {"MKERNEL_FUSED": "force"},
                                                        samples_per_figure)
            if has[coll]:
                row["unfused_aligned_ms"] = aligned_ms(unfused, {}, samples_per_figure)
                row["unfused_aligned_over_kernel_aligned"] = \
                    row["unfused_aligned_ms"] / row["fused_kernel_aligned_ms"]
            note(f"{label} {op}: aligned figures done")
        if nodes_lean and has[coll]:
            # The forced kernel's output against the unfused path's on the same inputs (the
            # merged tree's correctness at the timed shape: rows are bit copies, sums fp32 in
            # rank order; the GEMM configs may differ, so a rel diff ~1e-3, not same bits).
            try:
                with env_set({"MKERNEL_FUSED": "force"}):
                    out_k = fused(0)
                ref = unfused(0)
                row["kernel_same_bits_as_unfused"], row["kernel_rel_vs_unfused"] = \
                    against(out_k, ref)
                del out_k, ref
            except Exception as exc:  # noqa: BLE001 (a shape mismatch is a finding, not a stop)
                row["kernel_rel_vs_unfused"] = f"{type(exc).__name__}: {exc}"[:300]
        if on_variants and var_env:
            # Each knob's output against the default op's on the same inputs: the same config
            # and tile order give the same bits (a grid or a gate changes only which CTA / when).
            ref = fused(0)
            for name, env in var_env.items():
                with env_set(env):
                    out = fused(0)
                row[f"fused_{name}_same_bits"], row[f"fused_{name}_rel_diff"] = against(out, ref)
                del out
            del ref
        if peer_row:
            # The peer-TMA kernel against the copy-path kernel on the same inputs, every rank.
            with env_set(copy_env):
                ref = fused(0)
            with env_set(peer_env):
                out = fused(0)
            row["fused_peertma_same_bits"], row["fused_peertma_rel_diff"] = against(out, ref)
            row["fused_peertma_over_kernel_paired"] = paired(got, "fused_peertma_ms",
                                                             "fused_kernel_ms")
            row["fused_over_peertma_paired"] = paired(got, "fused_ms", "fused_peertma_ms")
            row["choice"] = peer_choice(row)
            if rank == 0:
                print("CHOICE " + json.dumps(row["choice"]), flush=True)
            if "timeline" in variants:
                with env_set(peer_env):  # stamps of the peer kernel: copy = the local staging
                    row["timeline_peertma"] = timeline_of(fused, rank, world, m * k * 2)
            del out, ref
        if on_variants and "timeline" in variants and not row["path"].startswith("unfused"):
            row["timeline"] = timeline_of(fused, rank, world,
                                          world * m * k * 2 if op == "ag_gemm" else 0)
        if has[coll]:
            row["ideal_ms"] = max(row["gemm_ms"], row["comm_ms"])
            row["fused_vs_ideal"] = row["fused_ms"] / row["ideal_ms"]
            for name in list(var_env) + ["hooked_co", "peertma"]:
                key = f"fused_{name}_ms" if name != "hooked_co" else "gemm_hooked_co_ms"
                if key in row:
                    row[key.replace("_ms", "_vs_ideal")] = row[key] / row["ideal_ms"]
            row["unfused_over_fused"] = row["unfused_ms"] / row["fused_ms"]
            row["unfused_over_fused_paired"] = paired(got, "unfused_ms", "fused_ms")
            if "fused_kernel_ms" in row:
                row["unfused_over_fused_kernel"] = row["unfused_ms"] / row["fused_kernel_ms"]
                row["kernel_vs_ideal"] = row["fused_kernel_ms"] / row["ideal_ms"]
            if "op_unfused_ms" in row:
                row["op_unfused_over_unfused"] = row["op_unfused_ms"] / row["unfused_ms"]
                row["op_unfused_over_unfused_paired"] = paired(got, "op_unfused_ms", "unfused_ms")
            if with_b:
                row["unfused_b_over_unfused"] = row["unfused_b_ms"] / row["unfused_ms"]
                row["unfused_b_over_unfused_paired"] = paired(got, "unfused_b_ms", "unfused_ms")
            for name in var_env:  # the knob against the op as users get it, round by round
                if f"fused_{name}_ms" not in got:  # a row without the variant columns
                    continue
                row[f"fused_{name}_over_fused_paired"] = paired(got, f"fused_{name}_ms",
                                                                "fused_ms")
            if "fused_c1x1_ms" in got and "fused_kernel_ms" in got:
                row["fused_c1x1_over_kernel_paired"] = paired(got, "fused_c1x1_ms",
                                                              "fused_kernel_ms")
                if rank == 0:  # the decisive figures of fused18's rule, one line per row
                    print("C1X1 " + json.dumps({
                        "op": op, "shape": label, "world": world, "path": row["path"],
                        "c1x1_path": row.get("c1x1_path"), "gemm_plan": row.get("gemm_plan"),
                        "gemm_ms": round(row["gemm_ms"], 4), "comm_ms": round(row["comm_ms"], 4),
                        "fused_vs_ideal": round(row["fused_vs_ideal"], 3),
                        "kernel_vs_ideal": round(row["fused_kernel_ms"] / row["ideal_ms"], 3),
                        "c1x1_vs_ideal": round(row["fused_c1x1_ms"] / row["ideal_ms"], 3),
                        "c1x1_over_kernel_paired": round(row["fused_c1x1_over_kernel_paired"], 3),
                        "c1x1_over_fused_paired": round(row["fused_c1x1_over_fused_paired"], 3),
                        "c1x1_same_bits": row.get("fused_c1x1_same_bits"),
                        "c1x1_rel_diff": row.get("fused_c1x1_rel_diff")}), flush=True)
            s2_names = [n for n in ("pipe",) if f"fused_{n}_ms" in got]
            if s2_names and "fused_kernel_ms" in got:
                s2 = {"op": op, "shape": label, "world": world, "path": row["path"],
                      "gemm_ms": round(row["gemm_ms"], 4), "comm_ms": round(row["comm_ms"], 4),
                      "ideal_ms": round(row["ideal_ms"], 4),
                      "fused_vs_ideal": round(row["fused_vs_ideal"], 3),
                      "kernel_ms": round(row["fused_kernel_ms"], 4),
                      "kernel_vs_ideal": round(row["fused_kernel_ms"] / row["ideal_ms"], 3)}
                for n in s2_names:
                    row[f"fused_{n}_over_kernel_paired"] = paired(got, f"fused_{n}_ms",
                                                                  "fused_kernel_ms")
                    s2[f"{n}_ms"] = round(row[f"fused_{n}_ms"], 4)
                    s2[f"{n}_vs_ideal"] = round(row[f"fused_{n}_ms"] / row["ideal_ms"], 3)
                    s2[f"{n}_over_kernel_paired"] = round(row[f"fused_{n}_over_kernel_paired"], 3)
                    s2[f"{n}_same_bits"] = row.get(f"fused_{n}_same_bits")
                    s2[f"{n}_rel_diff"] = row.get(f"fused_{n}_rel_diff")
                if rank == 0:  # the decisive figures of fused19's rule, one line per row
                    print("S2 " + json.dumps(s2), flush=True)
        row["fused_tflops_per_rank"] = flops / row["fused_ms"] / 1e9
        row["gemm_tflops_per_rank"] = flops / row["gemm_ms"] / 1e9
        row["fused_over_gemm"] = row["fused_ms"] / row["gemm_ms"]
        if "fused_kernel_ms" in row:
            row["fused_kernel_over_gemm"] = row["fused_kernel_ms"] / row["gemm_ms"]
        if nodes > 1 and on_gpu:
            row["copier"] = copier_probe(fused, unfused if has[coll] else None)
            if rank == 0:
                print(f"COPIER {op} {label} " + json.dumps(row["copier"]), flush=True)
        rows.append(row)
        if rank == 0:
            print("ROW " + json.dumps(row), flush=True)
            print("VERDICT " + json.dumps(verdict_summary(row)), flush=True)
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
        if op in gpu_gate_ops and nodes > 1 and fused_nodes:
            gate_todo.append((op, label, fused, row, reps, has[coll]))
    # The GPU gate's figures after every row (the gate has never run on a GPU: a trap there
    # would take the context, and every later row, with it). No budget check: the rows are on
    # record, and --timeout bounds what is left.
    for todo in gate_todo:
        gate_phase(*todo)
    if rank == 0:
        payload = {"bench": "fused", "commit": commit(), "device": device_info(), "world": world,
                   "nodes": nodes, "emulate": os.environ.get("MKERNEL_NET_EMULATE", "") if nodes > 1
                   else "",
                   "elapsed_s": time.monotonic() - t_start, "full": all_shapes, "only": only,
                   "set": set_name, "lean": lean, "placement": placement,
                   "variants": {k: v for k, v in var_env.items()},
                   "variant_rows": variant_rows if var_env or "hooked" in variants else [],
                   "method": f"CUDA events; per figure 2 warm-up calls, then {5 if lean else 9} "
                             "rounds in which "
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
    t0 = time.time()  # the phase times (note()) count from here
    ap = argparse.ArgumentParser()
    ap.add_argument("--world", type=int, default=2)
    ap.add_argument("--full", action="store_true", help="every shape (minutes, not the 90 s slot)")
    ap.add_argument("--budget", type=float, default=55,
                    help="seconds of measurement after start-up; a shape starts only if the "
                         "longest shape so far would end within it")
    ap.add_argument("--timeout", type=float, default=85)
    ap.add_argument("--nodes", type=int, default=1, help="emulated nodes (W a multiple)")
    ap.add_argument("--emulate", default="50GB/s,3us",
                    help="with --nodes > 1: the emulated link (MKERNEL_NET_EMULATE)")
    ap.add_argument("--fused-nodes", action="store_true",
                    help="with --nodes > 1: MKERNEL_FUSED_NODES=1 (ag_gemm's fused kernel across "
                         "nodes, opt-in)")
    ap.add_argument("--ops", default="", help="comma-separated ops to keep (e.g. ag_gemm)")
    ap.add_argument("--samples", type=int, default=None,
                    help="rounds per shape (samples per figure; default 9, 5 with --lean)")
    ap.add_argument("--reps", type=int, default=0,
                    help="calls per sample (0: by the shape's FLOPs; across nodes the calls are "
                         "communication-bound, so a few suffice)")
    ap.add_argument("--no-b", action="store_true",
                    help="leave out unfused_b (the unfused figure timed twice: the run's noise)")
    ap.add_argument("--only", default="",
                    help="comma-separated words: only the shapes whose label has one (e.g. "
                         "llama,decode)")
    ap.add_argument("--set", default="default", choices=["default", "issue"],
                    help="issue: the fused-op issue's item-11 rows (Llama-70B M=8192/16384, the "
                         "square families; --full: M = 2048 .. 32768)")
    ap.add_argument("--lean", action="store_true",
                    help="5 rounds instead of 9, no op_unfused figure (fits a short device slot)")
    ap.add_argument("--probe", action="store_true",
                    help="first measure how many 2-CTA-cluster CTAs MPS places for the ranks "
                         "at once, by grid (JSON 'placement'; variant 'co' uses it)")
    ap.add_argument("--variants", default="",
                    help="comma-separated extra figures on the --variant-rows rows: co "
                         "(MKERNEL_FUSED_CO_GRID = the probe's grid; needs --probe), barrier "
                         "(MKERNEL_FUSED_GATE_MODE=barrier), peertma (ag_gemm rows: the forced kernel with "
                         "MKERNEL_FUSED_AG_PEER_TMA=1 beside the forced copy kernel (=0), and "
                         "which the op's auto route picked: a CHOICE line), hooked (the fused config's GEMM "
                         "alone on the co-resident grid), timeline (4 calls with per-CTA stamps), c1x1 (the forced "
                         "kernel with MKERNEL_FUSED_C1X1=1, the cluster-free 128x256 config, beside the "
                         "forced default kernel: a C1X1 line per row), pipe (the forced default kernel with "
                         "MKERNEL_FUSED_SIDE=pipe: an S2 line per row)")
    ap.add_argument("--variant-rows", default="llama",
                    help="comma-separated words: the rows that get the variant figures")
    ap.add_argument("--stream", action="store_true",
                    help="rank 0 writes straight to this process's stdout / stderr (ROW, SAMPLES, "
                         "phase times as they happen): a run cut by an outer timeout keeps them")
    ap.add_argument("--nodes-lean", action="store_true",
                    help="across emulated nodes, one shape per op in ~10-15 s: the op, the "
                         "forced kernel, GEMM, comm, unfused (5 rounds x (1 + 2) calls unless "
                         "--samples/--reps), the aligned single calls, the kernel's output vs "
                         "unfused; rows in --ops order; implies --stream and --no-b")
    ap.add_argument("--gpu-gate", default="",
                    help="comma-separated ops (e.g. ag_gemm): with --fused-nodes, after each of "
                         "their rows MKERNEL_FUSED_GATE_GPU=1's figures (the op's verdict under the "
                         "gate, the gated op and kernel vs the ungated kernel; a GATE line)")
    ap.add_argument("--device", default="cuda", choices=["cuda", "cpu"],
                    help="cpu: a dry run of the rank code through the CPU ops (no MPS; host "
                         "clock): checks the code path and times the start-up without a GPU")
    ap.add_argument("--scale-down", type=int, default=1,
                    help="divide every shape's dims by this (dry runs; multiples of 8 kept)")
    args = ap.parse_args()
    if args.nodes_lean:
        args.stream, args.no_b = True, True
        args.samples = args.samples or 5
        args.reps = args.reps or 2
    sys.path.insert(0, str(ROOT))
    from common import mps_daemon  # noqa: E402
    from tests.launch import run_ranks

    env = {"CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": str(100 // args.world),
           "BENCH_FULL": "1" if args.full else "0", "BENCH_BUDGET_S": str(args.budget),
           "BENCH_ONLY": args.only, "BENCH_NODES": str(args.nodes), "MKERNEL_FUSED_VERBOSE": "1",
           "NCCL_NVLS_ENABLE": "0", "BENCH_SET": args.set, "BENCH_LEAN": "1" if args.lean else "0",
           "BENCH_PROBE": "1" if args.probe else "0", "BENCH_VARIANTS": args.variants,
           "BENCH_VARIANT_ROWS": args.variant_rows}
    code = f"import runpy; runpy.run_path({str(Path(__file__).resolve())!r}, run_name='__rank__')"
    env["BENCH_OPS"] = args.ops
    env.update(BENCH_SAMPLES=str(args.samples or ""), BENCH_REPS=str(args.reps),
               BENCH_NO_B="1" if args.no_b else "0",
               BENCH_NODES_LEAN="1" if args.nodes_lean else "0",
               BENCH_GPU_GATE=args.gpu_gate, BENCH_T0=repr(t0),
               BENCH_DEVICE=args.device, BENCH_SCALE_DOWN=str(args.scale_down))
    if args.nodes > 1:
        env["MKERNEL_NET_EMULATE"] = args.emulate
        # Explicit either way (fused_common.h fused_nodes_enabled: the per-op defaults may change).
        env["MKERNEL_FUSED_NODES"] = "1" if args.fused_nodes else "0"
    tag = f"w{args.world}" + (f"_n{args.nodes}" if args.nodes > 1 else "") + align_tag()
    if args.fused_nodes and args.nodes > 1:
        tag += "_fn"
    progress = Path(os.environ.get("OUT") or RESULTS_DIR, f"fused_rows_{tag}.jsonl")
    progress.unlink(missing_ok=True)
    with (mps_daemon("bench_fused") if args.device == "cuda" else contextlib.nullcontext({})) \
            as mps_env:
        results = run_ranks(code, args.world, timeout=args.timeout, nodes=args.nodes,
                            env=dict(env, **mps_env), passthrough=(0,) if args.stream else ())
    if progress.exists() and not args.stream:  # the rows measured, even when cut short
        print(progress.read_text(), end="", flush=True)
    cut = [r.rank for r in results if r.returncode is None]
    if cut:
        print(f"bench_fused: ranks {cut} still running at --timeout {args.timeout:.0f} s: killed",
              file=sys.stderr, flush=True)
    for r in results:
        if r.returncode != 0 or r.rank == 0:
            sys.stdout.write(r.stdout[-6000:])
            sys.stderr.write(r.stderr[-4000:])
    fresh = None
    if args.stream:  # rank 0's "wrote <path>" went to the log, not to a pipe: the newest JSON
        made = [f for f in RESULTS_DIR.glob(f"fused_{tag}_*.json") if f.stat().st_mtime >= t0]
        fresh = max(made, key=lambda f: f.stat().st_mtime) if made else None
    write_report(results, progress, fresh)
    sys.exit(max((r.returncode if r.returncode is not None else 124) for r in results))


def write_report(results, progress: Path, json_path: Path | None = None) -> None:
    """The table (.md) and plot (.png, when matplotlib is there) of the JSON rank 0 wrote (or
    `json_path`: --stream, where rank 0's output is not captured), beside it and copied to $OUT;
    the progress rows leave $OUT once the JSON holds them."""
    import shutil

    sys.path.insert(0, str(ROOT / "benchmarks"))
    wrote = [ln.split("wrote ", 1)[1].strip() for r in results if r.rank == 0
             for ln in r.stdout.splitlines() if ln.startswith("wrote ")]
    if json_path is not None:
        wrote.append(str(json_path))
    if not wrote:
        return
    path = Path(wrote[-1])
    try:
        from report import report
        md, png = report(path)
    except Exception as exc:  # noqa: BLE001 (the figures are in the JSON; the report is a view)
        print(f"bench_fused: no report for {path}: {type(exc).__name__}: {exc}", flush=True)
        return
    print(f"report: {md}" + (f", {png}" if png else " (no PNG: matplotlib missing)"), flush=True)
    out = os.environ.get("OUT")
    if out and Path(out).resolve() != RESULTS_DIR.resolve():
        for f in (md, png):
            if f:
                shutil.copy(f, out)
        if progress.exists() and progress.parent.resolve() == Path(out).resolve():
            progress.unlink()


if __name__ == "__main__":
    main()
elif __name__ == "__rank__":
    rank_main()
