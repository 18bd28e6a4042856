"""Where the fused reduce ops lose time (W ranks on one GPU under MPS, 100/W % of the SMs each):
a diagnostic run for the fused ops' design, not a benchmark of the product.

Sections (``--sections``, comma-separated):

1. ``ipc``: copy bandwidth of a 256 MiB buffer read from this process's memory vs the same
   buffer read from the peer rank's memory through CUDA IPC, all ranks at once.
2. ``gemm``: the engine GEMM (auto plan) vs the hooked kernel with the fused ops' tile config,
   without and with its per-tile flag release, at the fused-smoke shapes.
3. ``variants``: gemm_rs / gemm_ar with the fused kernel pinned, in every (side warps, tail)
   mode: side staged / pipe (double-buffered runs of slabs) / idle, consumers' tail staged
   through the mainloop ring / from registers; all measured interleaved round by round with the
   GEMM alone.
4. ``ag``: ag_gemm with its copy role from registers, by bulk copies or staged, vs the GEMM
   alone on the gathered rows.
5. ``trigger``: the fused kernel's griddepcontrol.launch_dependents at its start vs after the
   consumers' mainloop (MKERNEL_FUSED_TRIGGER), timed interleaved, and a timeline of each.
6. ``orders``: the fused kernel's persistent tile order (MKERNEL_FUSED_ORDER) at the
   Llama-70B shapes (gemm_rs fc2, ag_gemm fc1) vs the GEMM alone and its tuned plan.
7. ``timeline``: one call of each variant with MKERNEL_FUSED_TIMELINE: per-CTA %globaltimer
   stamps (fused_params.h TimelineSlot), summarised per rank as medians over the CTAs: entry
   (start -> past the entry barrier), GEMM (entry -> last tile stored), tail (last tile ->
   CTA exit), the side warps' end, and the reduce items done by side warps / tail.

8. ``mps``: why the ranks' fused kernels run one after the other under MPS. (a) Facts: the SM
   count the process sees, the occupancy API's resident clusters for the fused kernels' CTA
   shape (one CTA per SM), the %nsmid the CTAs see. (b) The SM-placement probe
   (mkernel._sm_probe: every rank launches a grid of CTAs holding one SM each for 1 ms from a
   common GPU time, like a persistent fused kernel): how many CTAs of each rank get an SM at
   once, by grid size, cluster size 1 / 2, shared memory (one or several CTAs per SM) and stream
   priority; (c) gemm_rs at Llama fc2 and 8192x2048x8192 and ag_gemm at Llama fc1 with the fused
   kernel's grid at the share and smaller, and on a high-priority stream, timed with the GEMM
   alone and the unfused path, plus timelines with the launch's peak of concurrent CTAs. Run
   twice: with the usual share (CUDA_MPS_ACTIVE_THREAD_PERCENTAGE = 100 / W), then with no MPS
   limit (100 %) and every fused grid capped at SMs / W (MKERNEL_FUSED_SMS); that launch times
   no unfused path (the substrate's collectives, grids of every SM, deadlocked there: s8run2).

9. ``agfc1``: why ag_gemm at Llama-70B fc1 M=8192 runs 1.29x the GEMM alone (s9run3) where
   gemm_rs / gemm_ar run 0.92-1.01x: pinned variants timed interleaved with the anchors (the
   engine GEMM, the hooked GEMM in the fused config without waits at both grids, unfused, the
   device barrier alone) — the co-resident grid, the copy role by bulk / staged copies, the
   natural M order instead of own rows first, 32- and 2-row arrival chunks, every rank aligned
   before each call — each checked against an fp32 reference, then timelines of 4 back-to-back
   launches (MKERNEL_FUSED_TIMELINE_CALLS) at the share's and the co-resident grid
   (summarise_pipeline). Hypotheses and predictions: benchmarks/NOTES.md "Fused ops, fused10".

10. ``gate``: the launch gate (MKERNEL_FUSED_GATE, fused_common.h gate_requested): why the
   co-resident grid's per-call time (s10run1: 10.4 ms at ag_gemm Llama fc1 W=2) is far above its
   aligned launches' period (6.3 ms). Interleaved timing, 6 calls back to back per sample (the
   way a model calls), of the anchors (engine GEMM alone, the hooked GEMM on the co-resident
   grid without waits, unfused), the fused kernel on the co-resident grid (and at W = 2 the
   share's) with and without the gate, and the op as users get it (measured choice) with and without it; each
   variant's output against an fp32 reference; then 8-launch back-to-back timelines on the
   co-resident grid without and with the gate (summarise_steady: per launch the smallest first
   wave over the ranks, the largest overlap with a peer's previous launch, the period). Shapes:
   ag_gemm Llama fc1 M=8192, and at W >= 4 gemm_ar Llama fc2 M=16384 (s10run1 W=4: 1.29x the
   ideal where the forced kernel ran 1.02x). Predictions: benchmarks/NOTES.md "Fused ops, fused11".

Rank 0 prints ``DIAG {json}`` lines and writes benchmarks/results/fused_diag_<gpu>_<time>.json
(and a copy under $OUT).

    python benchmarks/fused_diag.py [--world 2] [--sections variants,timeline] [--timeout 80]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# per-rank [M, k] x [N, k]: the fused-smoke shapes and Llama-70B fc2 at M = 8192 (k = 28672 / 2)
SHAPES = [(4096, 1024, 8192), (8192, 2048, 8192), (8192, 14336, 8192)]
# (name, MKERNEL_FUSED_SIDE, MKERNEL_FUSED_TAIL)
VARIANTS = [("side staged, tail staged", "staged", "staged"),
            ("side pipe, tail staged", "pipe", "staged"),
            ("side idle, tail staged", "idle", "staged"),
            ("side staged, tail regs", "staged", "regs"),
            ("side idle, tail regs", "idle", "regs")]
WORDS = 10  # fused_params.h kTimelineWords
(START, ENTERED, GEMM_DONE, TAIL_DONE, SIDE_DONE, EXIT, SIDE_ITEMS, TAIL_ITEMS, SMID,
 CLUSTER) = range(WORDS)


def summarise_timeline(lines: dict[int, str]) -> dict:
    """Per-rank medians (us) of one launch's per-CTA stamps (rank -> the launch's line)."""
    recs = {}
    for rank, line in lines.items():
        words = [int(w) for w in line.split("|", 1)[1].split()]
        recs[rank] = [words[i:i + WORDS] for i in range(0, len(words), WORDS)]
    t0 = min(r[START] for cta in recs.values() for r in cta)
    us = lambda a, b: (a - b) / 1e3  # noqa: E731
    out = {}
    for rank, ctas in sorted(recs.items()):
        def med(f):
            vals = [f(r) for r in ctas]
            return round(statistics.median(vals), 1)

        def mx(f):
            return round(max(f(r) for r in ctas), 1)
        out[f"rank{rank}"] = {
            "ctas": len(ctas),
            "start_us": med(lambda r: us(r[START], t0)),
            "start_min_us": round(min(us(r[START], t0) for r in ctas), 1),
            "start_max_us": mx(lambda r: us(r[START], t0)),
            "entered_us": med(lambda r: us(r[ENTERED], t0) if r[ENTERED] else 0.0),
            "gemm_done_us": med(lambda r: us(r[GEMM_DONE], t0)),
            "gemm_done_max_us": mx(lambda r: us(r[GEMM_DONE], t0)),
            "side_done_us": med(lambda r: us(r[SIDE_DONE], t0) if r[SIDE_DONE] else 0.0),
            "tail_done_us": med(lambda r: us(r[TAIL_DONE], t0) if r[TAIL_DONE] else 0.0),
            "exit_us": med(lambda r: us(r[EXIT], t0)),
            "exit_max_us": mx(lambda r: us(r[EXIT], t0)),
            "side_items": sum(r[SIDE_ITEMS] for r in ctas),
            "tail_items": sum(r[TAIL_ITEMS] for r in ctas),
            "sms": len({r[SMID] for r in ctas}),
            # CTAs that started more than 50 us after this rank's first one: which SMs they got
            "late_ctas": sum(1 for r in ctas if r[START] - min(c[START] for c in ctas) > 50_000),
        }
    # SMs used by more than one rank's CTAs in this launch (MPS shares the GPU's SMs by count,
    # not by a fixed set: a shared SM means one rank's CTA ran where another's had run).
    sm_sets = [{r[SMID] for r in ctas} for ctas in recs.values()]
    shared = set()
    for i, a in enumerate(sm_sets):
        for b in sm_sets[i + 1:]:
            shared |= a & b
    out["shared_sms"] = len(shared)
    # Concurrency: the most CTAs of all ranks running at once (start..exit); per rank the CTAs
    # that started within 50 us of its first one (all of them when the ranks' grids fit on the
    # GPU together).
    every = [r for ctas in recs.values() for r in ctas]
    edges = sorted([(r[START], 1) for r in every] + [(r[EXIT], -1) for r in every if r[EXIT]])
    running = peak = 0
    for _, d in edges:
        running += d
        peak = max(peak, running)
    out["peak_ctas"] = peak
    for rank in recs:
        out[f"rank{rank}"]["first_wave"] = (out[f"rank{rank}"]["ctas"] -
                                            out[f"rank{rank}"]["late_ctas"])
    return out


PROBE_SMEM_BIG = 200 * 1024  # one CTA per SM, as the fused kernels (~200 KiB of shared memory)
PROBE_SMEM_SMALL = 16 * 1024  # several CTAs may share an SM
PROBE_HOLD_NS = 1_000_000


def summarise_probe(recs: dict[int, list[list[int]]], start: int) -> dict:
    """One probe launch of every rank (rank -> per-CTA [arrive, leave, sm, cluster]): how many
    CTAs of each rank were placed in the first wave (arrived before start + hold / 2, so they
    held an SM at the same time as every other first-wave CTA), when the others arrived."""
    out = {}
    first = {}
    for rank, ctas in sorted(recs.items()):
        if not ctas:
            continue
        on_time = [c for c in ctas if c[0] < start + PROBE_HOLD_NS // 2]
        late = sorted((c[0] - start) / 1e3 for c in ctas if c[0] >= start + PROBE_HOLD_NS // 2)
        first[rank] = {c[2] & 0xffffffff for c in on_time}
        out[f"rank{rank}"] = {
            "ctas": len(ctas), "first_wave": len(on_time),
            "late_arrive_us": round(statistics.median(late), 1) if late else None,
            "sm_ids": len({c[2] & 0xffffffff for c in ctas}),
            "nsmid": sorted({c[2] >> 32 for c in ctas}),
        }
    out["first_wave"] = sum(v["first_wave"] for k, v in out.items() if k.startswith("rank"))
    # First-wave CTAs of two ranks reporting the same %smid at the same time: with one CTA per
    # SM that can only mean the ids are per-client numbers, not physical SMs.
    ranks = sorted(first)
    out["first_wave_same_smid"] = sum(len(first[a] & first[b]) for i, a in enumerate(ranks)
                                      for b in ranks[i + 1:])
    return out


def mps_section(rank: int, world: int, ctx, emit, timed_all, with_env) -> None:
    """Section `mps` (module docstring): facts, the SM-placement probe, the fused kernel's grid."""
    import torch
    import torch.distributed as dist

    import mkernel

    mk = torch.ops.mkernel
    setting = os.environ.get("DIAG_MPS_SETTING", "share")
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    share = int(os.environ.get("MKERNEL_FUSED_SMS", sms)) if setting == "full" else sms
    base = {"setting": setting, "world": world, "share_sms": share,
            "mps_percent": os.environ.get("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE")}
    emit(dict(base, what="mps facts", device_sms=sms,
              fit_c2_big=mk._sm_probe_fit(2, PROBE_SMEM_BIG),
              fit_c1_big=mk._sm_probe_fit(1, PROBE_SMEM_BIG),
              fit_c2_small=mk._sm_probe_fit(2, PROBE_SMEM_SMALL)))
    high = torch.cuda.Stream(priority=torch.cuda.Stream.priority_range()[1]
                             if hasattr(torch.cuda.Stream, "priority_range") else -1)

    def on_high(fn):
        def run():
            cur = torch.cuda.current_stream()
            high.wait_stream(cur)
            with torch.cuda.stream(high):
                r = fn()
            cur.wait_stream(high)
            return r
        return run

    even = lambda v: max(2, v - v % 2)  # noqa: E731
    # (name, grid, cluster, smem, high priority, ranks that launch)
    probes = [("c2 big grid=share", share, 2, PROBE_SMEM_BIG, False, None),
              ("c1 big grid=share", share, 1, PROBE_SMEM_BIG, False, None),
              ("c2 big grid=share-2", even(share - 2), 2, PROBE_SMEM_BIG, False, None),
              ("c2 big grid=share-6", even(share - 6), 2, PROBE_SMEM_BIG, False, None),
              ("c2 big grid=3/4 share", even(share * 3 // 4), 2, PROBE_SMEM_BIG, False, None),
              ("c1 big grid=share/2", share // 2, 1, PROBE_SMEM_BIG, False, None),
              ("c2 small grid=share", share, 2, PROBE_SMEM_SMALL, False, None),
              ("c2 big grid=share, high priority", share, 2, PROBE_SMEM_BIG, True, None),
              ("c1 big grid=2 share", 2 * share, 1, PROBE_SMEM_BIG, False, None),
              ("c1 big grid=2 share, rank 0 alone", 2 * share, 1, PROBE_SMEM_BIG, False, {0})]
    for name, grid, cluster, smem, prio, who in probes:
        for rep in range(3):
            dist.barrier()
            now = torch.tensor([mk._gpu_globaltimer()], dtype=torch.int64)
            dist.all_reduce(now, op=dist.ReduceOp.MAX)
            start = int(now.item()) + 3_000_000  # past every rank's launch
            rec = []
            if who is None or rank in who:
                launch = lambda: mk._sm_probe(grid, cluster, smem, start, PROBE_HOLD_NS)  # noqa
                rec = (on_high(launch) if prio else launch)().cpu().tolist()
            torch.cuda.synchronize()
            got = [None] * world
            dist.all_gather_object(got, rec)
            if rank == 0:
                emit(dict(base, what="probe", kind=name, rep=rep, grid=grid, cluster=cluster,
                          smem=smem, **summarise_probe(dict(enumerate(got)), start)))

    # The fused kernels with the grid at the share, smaller, and on a high-priority stream.
    tl_base = Path(tempfile.gettempdir(), f"fused_tl_mps_{os.getppid()}")
    cases = [("gemm_rs", 8192, 28672 // world, 8192), ("gemm_ar", 8192, 28672 // world, 8192),
             ("gemm_rs", 8192, 2048, 8192), ("ag_gemm", 8192 // world, 8192, 28672 // world)]
    for op, m, k, nn in cases:
        x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
        w = torch.randn(nn, k, device="cuda", dtype=torch.bfloat16) / 64
        fn = getattr(mkernel, op)
        if op == "ag_gemm":
            full = torch.randn(world * m, k, device="cuda", dtype=torch.bfloat16)
            gemm = lambda full=full, w=w: mkernel.gemm(full, w)  # noqa: E731
        else:
            gemm = lambda x=x, w=w: mkernel.gemm(x, w)  # noqa: E731
        call = lambda fn=fn, x=x, w=w: fn(x, w, group=ctx)  # noqa: E731
        grids = {"share": share, "share-6": even(share - 6), "3/4 share": even(share * 3 // 4)}
        fns = {"gemm alone": gemm}
        # With no MPS limit the substrate's collectives (grids of every SM, spinning for their
        # peers) can deadlock: one rank's kernel holds every SM while it waits for a rank that
        # cannot be placed (s8run2: reduce_scatter timed out). The fused grids are capped.
        if setting == "share":
            fns["unfused"] = with_env(call, MKERNEL_FUSED="off")
        for gname, g in grids.items():
            fns[f"fused grid={gname}"] = with_env(call, MKERNEL_FUSED="force",
                                                  MKERNEL_FUSED_SMS=str(g))
        fns["fused grid=share, high priority"] = on_high(
            with_env(call, MKERNEL_FUSED="force", MKERNEL_FUSED_SMS=str(share)))
        if setting == "share":
            # The op as users get it, the co-resident grid offered (fused_common.h
            # candidate_plans, the default): fused pinned (the faster grid measured), and fully
            # automatic.
            fns["fused, grid measured"] = with_env(call, MKERNEL_FUSED="force")
            fns["auto, co-resident offered"] = call
        t = timed_all(fns, reps=2 if k >= 8192 or op == "ag_gemm" else 5, samples=5)
        for name, ms in t.items():
            emit(dict(base, what="mps fused", op=op, m=m, k=k, n=nn, kind=name, ms=ms,
                      over_gemm=ms / t["gemm alone"],
                      over_unfused=ms / t["unfused"] if "unfused" in t else None))
        for gname in ("share", "3/4 share"):
            path = f"{tl_base}_{setting}_{op}_{m}_{k}_{gname.replace('/', '-').replace(' ', '_')}"
            run = with_env(call, MKERNEL_FUSED="force", MKERNEL_FUSED_SMS=str(grids[gname]),
                           MKERNEL_FUSED_TIMELINE=path)
            for _ in range(3):  # the last call's line is summarised
                run()
            torch.cuda.synchronize()
            dist.barrier()
            if rank == 0:
                lines = {r: Path(f"{path}.rank{r}").read_text().strip().splitlines()[-1]
                         for r in range(world)}
                tl = summarise_timeline(lines)
                emit(dict(base, what="mps timeline", op=op, m=m, k=k, n=nn,
                          kind=f"fused grid={gname}", peak_ctas=tl["peak_ctas"],
                          **{f"rank{r}": {key: tl[f"rank{r}"][key] for key in
                                          ("ctas", "first_wave", "start_us", "start_max_us",
                                           "gemm_done_us", "exit_max_us")}
                             for r in range(world)}))
            dist.barrier()


def summarise_pipeline(lines: dict[int, list[str]], pushed_bytes: int = 0) -> dict:
    """Back-to-back launches recorded together (MKERNEL_FUSED_TIMELINE_CALLS: rank -> its lines,
    one per launch in launch order, no host synchronization between them): per launch and rank
    (us from the first CTA's start on any rank) when its CTAs started (first / median, and how
    many within 50 us of its first one), when the copy role passed the entry barrier and ended
    (ag_gemm: side_done), when the GEMM phase and the CTAs ended; then, from launch 1 on,
    ``overlap_prev_us``: how long before a peer's previous launch ended this rank's launch
    started (> 0: its CTAs held SMs while a peer still ran the previous call; an ag_gemm CTA then
    waits at the entry barrier), ``entry_wait_us`` (median start -> past the entry barrier) and
    ``period_us`` (the group's steady time per call: last exit to last exit). ``copy_gbs``: the
    pushed bytes per rank (``pushed_bytes``) over the copy phase (first entry -> last side end)."""
    recs = {}
    for rank, launch_lines in lines.items():
        recs[rank] = []
        for line in launch_lines:
            words = [int(w) for w in line.split("|", 1)[1].split()]
            recs[rank].append([words[i:i + WORDS] for i in range(0, len(words), WORDS)])
    launches = min(len(v) for v in recs.values())
    t0 = min(r[START] for v in recs.values() for ctas in v for r in ctas)
    us = lambda t: round((t - t0) / 1e3, 1)  # noqa: E731
    out = {"launches": []}
    for i in range(launches):
        per = {}
        for rank in sorted(recs):
            ctas = recs[rank][i]
            first = min(r[START] for r in ctas)
            entered = [r[ENTERED] for r in ctas if r[ENTERED]]
            side = [r[SIDE_DONE] for r in ctas if r[SIDE_DONE]]
            row = {
                "ctas": len(ctas),
                "first_wave": sum(1 for r in ctas if r[START] - first <= 50_000),
                "start_min_us": us(first),
                "start_us": us(statistics.median(r[START] for r in ctas)),
                "entered_us": us(statistics.median(entered)) if entered else None,
                "side_done_max_us": us(max(side)) if side else None,
                "gemm_done_us": us(statistics.median(r[GEMM_DONE] for r in ctas)),
                "gemm_done_max_us": us(max(r[GEMM_DONE] for r in ctas)),
                "exit_max_us": us(max(r[EXIT] for r in ctas)),
            }
            if entered:
                row["entry_wait_us"] = round(row["entered_us"] - row["start_us"], 1)
            if entered and side and pushed_bytes:
                span = (max(side) - min(entered)) / 1e9
                row["copy_gbs"] = round(pushed_bytes / span / 1e9, 1) if span > 0 else None
            per[f"rank{rank}"] = row
        if i > 0:
            prev = out["launches"][i - 1]
            for rank in sorted(recs):
                others = [prev[f"rank{q}"]["exit_max_us"] for q in recs if q != rank]
                if others:
                    per[f"rank{rank}"]["overlap_prev_us"] = round(
                        max(others) - per[f"rank{rank}"]["start_min_us"], 1)
            per["period_us"] = round(max(v["exit_max_us"] for k, v in per.items()
                                         if k.startswith("rank")) -
                                     max(v["exit_max_us"] for k, v in prev.items()
                                         if k.startswith("rank")), 1)
        out["launches"].append(per)
    periods = [lc["period_us"] for lc in out["launches"][1:]]
    out["period_us"] = round(statistics.median(periods), 1) if periods else None
    every = [r for v in recs.values() for ctas in v[:launches] for r in ctas]
    edges = sorted([(r[START], 1) for r in every] + [(r[EXIT], -1) for r in every if r[EXIT]])
    running = peak = 0
    for _, d in edges:
        running += d
        peak = max(peak, running)
    out["peak_ctas"] = peak
    return out


def summarise_steady(pipe: dict, grid: int) -> dict:
    """The steady state of a summarise_pipeline result in a few numbers: per launch (from the
    second) the smallest first wave over the ranks, the largest overlap_prev_us (a rank's launch
    before a peer's previous one ended) and the period; how many launches placed a rank's grid
    only in part (first wave < grid), and the median period (us)."""
    rows = []
    for lc in pipe["launches"]:
        ranks = [v for k, v in lc.items() if k.startswith("rank")]
        rows.append({"first_wave_min": min(r["first_wave"] for r in ranks),
                     "overlap_prev_max_us": max((r.get("overlap_prev_us", 0.0) for r in ranks),
                                                default=0.0),
                     "period_us": lc.get("period_us")})
    return {"launches": rows, "partial_launches": sum(1 for r in rows
                                                      if r["first_wave_min"] < grid),
            "period_us": pipe["period_us"], "peak_ctas": pipe["peak_ctas"]}


def gate_section(rank: int, world: int, ctx, emit, timed_all, with_env) -> None:
    """Section `gate` (module docstring): the fused kernels back to back with and without the
    launch gate, against the anchors at the same SM share; timelines of 8 launches."""
    import torch
    import torch.distributed as dist

    import mkernel

    mk = torch.ops.mkernel
    share = torch.cuda.get_device_properties(0).multi_processor_count
    co = share * 3 // 4 // 2 * 2
    tl_base = Path(tempfile.gettempdir(), f"fused_tl_gate_{os.getppid()}")
    cases = [("ag_gemm", 8192 // world, 8192, 28672 // world, "llama70b-fc1 M=8192")]
    if world >= 4:
        cases.append(("gemm_ar", 16384, 28672 // world, 8192, "llama70b-fc2 M=16384"))
    for op, m, k, nn, label in cases:
        torch.manual_seed(4321 + rank)
        x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
        torch.manual_seed(77)  # w the same on every rank
        w = torch.randn(nn, k, device="cuda", dtype=torch.bfloat16) / 64
        fn = getattr(mkernel, op)
        call = lambda fn=fn, x=x, w=w: fn(x, w, group=ctx)  # noqa: E731
        if op == "ag_gemm":
            full = mk.all_gather.default(x, ctx.handle, world)
            torch.cuda.synchronize()
            ref = full.float() @ w.float().t()
            fns = {"gemm alone (engine)": lambda full=full, w=w: mkernel.gemm(full, w),
                   f"hooked gemm grid {co}, no waits": lambda full=full, w=w: mk.gemm_hooked(
                       full, w, None, 128, 0, None, 1, None, 0, co, 0, 0, 10.0, 1),
                   "unfused": lambda x=x, w=w: mkernel.gemm(
                       mk.all_gather.default(x, ctx.handle, world), w)}
        else:
            # The sum over ranks of x_r @ w.T on the first 1024 rows (every rank's x from its
            # seed: an fp32 reference without a collective).
            ref = torch.zeros(1024, nn, device="cuda", dtype=torch.float32)
            for r in range(world):
                torch.manual_seed(4321 + r)
                xr = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
                ref += xr[:1024].float() @ w.float().t()
                del xr
            fns = {"gemm alone (engine)": lambda x=x, w=w: mkernel.gemm(x, w),
                   "unfused": lambda x=x, w=w: mk.all_reduce.default(mkernel.gemm(x, w),
                                                                   ctx.handle, world)}
        pin = {"MKERNEL_FUSED": "force", "MKERNEL_FUSED_CONFIG": AG_CONFIG}
        variants = {}
        if world == 2:  # (W = 4: the co-resident grid only, to fit the device slot)
            variants["fused grid=share"] = dict(pin, MKERNEL_FUSED_GRIDS="share",
                                                MKERNEL_FUSED_GATE="0")
            variants["fused grid=share, gated"] = dict(pin, MKERNEL_FUSED_GRIDS="share",
                                                       MKERNEL_FUSED_GATE="1")
        variants.update({
            f"fused grid={co}": dict(pin, MKERNEL_FUSED_SMS=str(co), MKERNEL_FUSED_GATE="0"),
            f"fused grid={co}, gated": dict(pin, MKERNEL_FUSED_SMS=str(co),
                                            MKERNEL_FUSED_GATE="1"),
            "op (measured choice)": {"MKERNEL_FUSED_GATE": "0"},
            "op (measured choice), gated": {"MKERNEL_FUSED_GATE": "1"},
        })
        for name, env in variants.items():
            fns[name] = with_env(call, **env)
        # 6 calls per sample: 5 follow a call of the same kind back to back (the steady state).
        t = timed_all(fns, reps=6, samples=5)
        for name, ms in t.items():
            emit(dict(what="gate", op=op, shape=label, m=m, k=k, n=nn, world=world, kind=name,
                      ms=ms, over_gemm=ms / t["gemm alone (engine)"],
                      over_unfused=ms / t["unfused"]))
        # Outputs of every fused variant (the same calls as timed; the exit flags run in all).
        for name in variants:
            out = fns[name]()
            got = out.float() if op == "ag_gemm" else out[:1024].float()
            rel = ((got - ref).norm() / ref.norm()).item()
            bad = torch.tensor([1.0 if not rel < 1e-2 else 0.0])
            dist.all_reduce(bad, op=dist.ReduceOp.MAX)
            emit(dict(what="gate check", op=op, kind=name, rank=rank, rel=rel,
                      ok=bool(bad.item() == 0)))
            del out
        # 8 launches back to back on the co-resident grid, without and with the gate.
        pushed = world * m * k * 2 if op == "ag_gemm" else 0
        for gated in ("0", "1"):
            path = f"{tl_base}_{op}_{gated}"
            run = with_env(call, **pin, MKERNEL_FUSED_SMS=str(co), MKERNEL_FUSED_GATE=gated,
                           MKERNEL_FUSED_TIMELINE=path, MKERNEL_FUSED_TIMELINE_CALLS="8")
            torch.cuda.synchronize()
            dist.barrier()
            for _ in range(8):
                run()
            torch.cuda.synchronize()
            dist.barrier()
            if rank == 0:
                lines = {r: Path(f"{path}.rank{r}").read_text().strip().splitlines()[-8:]
                         for r in range(world)}
                emit(dict(what="gate pipeline", op=op, kind=f"fused grid={co}" +
                          (", gated" if gated == "1" else ""), world=world,
                          **summarise_steady(summarise_pipeline(lines, pushed), co)))
            dist.barrier()


AG_CONFIG = "coop_128x256_c2x1"
# The hooked kernel's configs with an id (configs.inc) worth timing beside the fused ops on a whole GPU: the
# fused kernels exist for coop c2x1 / c1x1 only, the engine's tuned plans at the Llama shapes are ping_128x128_c1x2.
HOOKED_CONFIGS = {"coop_128x256_c2x1": 0, "coop_128x256_c1x2": 2, "ping_128x128_c1x2": 5,
                  "coop_256x128_c2x1": 6}


def hooked_rows(mk, a, w) -> dict:
    """cuBLAS and the hooked GEMM without waits or flags in each of HOOKED_CONFIGS on a [M, K] x [N, K]^T:
    what the fused kernel would cost with no communication, per config."""
    import torch

    rows = {"cublas (torch.matmul)": lambda: torch.matmul(a, w.t())}
    for name, cfg in HOOKED_CONFIGS.items():
        rows[f"hooked {name}, no waits"] = lambda cfg=cfg: mk.gemm_hooked(
            a, w, None, 128, 0, None, 1, None, cfg, 0, 0, 0, 10.0, 1)
    return rows  # the plan s9run3's ag_gemm fc1 ran (grid: the share)


def agfc1_section(rank: int, world: int, ctx, emit, timed_all, with_env) -> None:
    """Section `agfc1`: why ag_gemm at Llama-70B fc1 M=8192 (per rank x [8192/W, 8192], w
    [28672/W, 8192]) runs 1.29x the GEMM alone (s9run3) where gemm_rs / gemm_ar run 0.92-1.01x.
    One interleaved timing of pinned variants (config coop_128x256_c2x1, the share's grid unless
    named; MKERNEL_FUSED=force) with the anchors, each variant's output checked against an fp32
    reference of the gathered rows, then back-to-back timelines (4 launches recorded without a
    host sync, MKERNEL_FUSED_TIMELINE_CALLS) at the share's grid and the co-resident one. The
    hypotheses and predictions: benchmarks/NOTES.md "Fused ops, fused10"."""
    import torch
    import torch.distributed as dist

    import mkernel

    mk = torch.ops.mkernel
    m, k, nn = 8192 // world, 8192, 28672 // world
    share = torch.cuda.get_device_properties(0).multi_processor_count
    co = share * 3 // 4 // 2 * 2
    torch.manual_seed(1234 + rank)
    x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    torch.manual_seed(99)  # w: the same on every rank (any w is fine; the reference uses this one)
    w = torch.randn(nn, k, device="cuda", dtype=torch.bfloat16) / 64
    full = mk.all_gather.default(x, ctx.handle, world)  # every rank's rows (the substrate's)
    torch.cuda.synchronize()
    ref = full.float() @ w.float().t()
    tiny = torch.zeros(8, device="cuda", dtype=torch.float32)
    barrier = lambda: mk.all_gather.default(tiny, ctx.handle, world)  # noqa: E731  (device-side)
    call = lambda: mkernel.ag_gemm(x, w, group=ctx)  # noqa: E731
    base = {"MKERNEL_FUSED": "force", "MKERNEL_FUSED_CONFIG": AG_CONFIG,
            "MKERNEL_FUSED_GRIDS": "share"}
    # name -> (hypothesis it tests, extra environment)
    variants = {
        "fused grid=share (s9run3's plan)": ("baseline", {}),
        f"fused grid={co} (co-resident)": ("H1 placement / squatting",
                                           {"MKERNEL_FUSED_SMS": str(co)}),
        "fused side bulk": ("H2 copy warps' share", {"MKERNEL_FUSED_SIDE": "bulk"}),
        "fused side staged": ("H2 copy warps' share", {"MKERNEL_FUSED_SIDE": "staged"}),
        "fused natural order": ("H3 own rows first", {"MKERNEL_FUSED_AG_ORDER": "natural"}),
        "fused chunk 32 rows": ("H4 wait granularity", {"MKERNEL_FUSED_AG_CHUNK_ROWS": "32"}),
        "fused chunk 2 rows": ("H4 wait granularity", {"MKERNEL_FUSED_AG_CHUNK_ROWS": "2"}),
        "fused peer TMA": ("H5 the route", {"MKERNEL_FUSED_AG_PEER_TMA": "1"}),
        "fused copy role": ("H5 the route", {"MKERNEL_FUSED_AG_PEER_TMA": "0"}),
        "fused measured plan": ("H6 the pins", {"MKERNEL_FUSED_CONFIG": "", "MKERNEL_FUSED_GRIDS": ""}),
        # s24 call B: the baseline 3.23 ms, the same kernel with PEER_TMA=0 2.81, its 4-launch timeline 2.72 per
        # launch: the baseline again, later in the rotation (is the spread the harness's?)
        "fused grid=share, again": ("H7 the timing", {}),
    }
    fns = {"gemm alone (engine)": lambda: mkernel.gemm(full, w),
           "hooked gemm, fused config, no waits": lambda: mk.gemm_hooked(
               full, w, None, 128, 0, None, 1, None, 0, 0, 0, 0, 10.0, 1),
           f"hooked gemm, fused config, grid {co}": lambda: mk.gemm_hooked(
               full, w, None, 128, 0, None, 1, None, 0, co, 0, 0, 10.0, 1),
           "unfused": lambda: mkernel.gemm(mk.all_gather.default(x, ctx.handle, world), w),
           "device barrier alone": barrier}
    fns.update(hooked_rows(mk, full, w))
    for name, (_, env) in variants.items():
        fns[name] = with_env(call, **{**base, **env})
    # H1: the same kernel with every rank aligned before each call (no back-to-back overlap of
    # one rank's next call with a peer's previous one); minus "device barrier alone".
    aligned = with_env(call, **base)
    fns["fused grid=share, ranks aligned per call"] = lambda: (barrier(), aligned())
    # 4 calls per sample: 3 of them follow a call of the same kind back to back (the steady state
    # H1 is about; the first starts after the host barrier).
    t = timed_all(fns, reps=4, samples=5)
    gemm = t["gemm alone (engine)"]
    for name, ms in t.items():
        emit(dict(what="agfc1", m=m, k=k, n=nn, world=world, kind=name, ms=ms,
                  over_gemm=ms / gemm, over_unfused=ms / t["unfused"],
                  hypothesis=variants.get(name, ("",))[0] or None))
    # H7: a sample's first call absorbs the ranks' skew after the host barrier; 12 calls per sample amortise it 3x
    # more than 4 (a per-call figure that drops with more calls is the harness's, not the kernel's).
    few = ["gemm alone (engine)", "cublas (torch.matmul)", "unfused", "fused grid=share (s9run3's plan)",
           "fused copy role", "fused measured plan"]
    for name, ms in timed_all({n: fns[n] for n in few}, reps=12, samples=3).items():
        emit(dict(what="agfc1", m=m, k=k, n=nn, world=world, kind=f"{name} (12 calls per sample)", ms=ms,
                  over_gemm=ms / gemm, over_unfused=None, hypothesis="H7 the timing"))
    emit(dict(what="agfc1 plan", m=m, k=k, n=nn, world=world,
              engine_plan=mkernel.gemm_plan(full, w)))
    # Correctness of every pinned variant (the same call as timed).
    for name, (_, env) in variants.items():
        out = with_env(call, **{**base, **env})()
        rel = ((out.float() - ref).norm() / ref.norm()).item()
        bad = torch.tensor([1.0 if not rel < 1e-2 else 0.0])
        dist.all_reduce(bad, op=dist.ReduceOp.MAX)
        emit(dict(what="agfc1 check", kind=name, rank=rank, rel=rel, ok=bool(bad.item() == 0)))
        del out
    # Back-to-back timelines: 4 launches, the 4 lines written after the last.
    tl_base = Path(tempfile.gettempdir(), f"fused_tl_agfc1_{os.getppid()}")
    pushed = world * m * k * 2  # bytes each rank pushes (its rows to every rank, itself included)
    for gname, env in (("share", {}), (str(co), {"MKERNEL_FUSED_SMS": str(co)})):
        path = f"{tl_base}_{gname}"
        run = with_env(call, **base, **env, MKERNEL_FUSED_TIMELINE=path,
                       MKERNEL_FUSED_TIMELINE_CALLS="4")
        torch.cuda.synchronize()
        dist.barrier()
        for _ in range(4):
            run()
        torch.cuda.synchronize()
        dist.barrier()
        if rank == 0:
            lines = {r: Path(f"{path}.rank{r}").read_text().strip().splitlines()[-4:]
                     for r in range(world)}
            emit(dict(what="agfc1 pipeline", kind=f"fused grid={gname}", m=m, k=k, n=nn,
                      world=world, **summarise_pipeline(lines, pushed)))
        dist.barrier()


def rank_main() -> None:
    import torch
    import torch.distributed as dist
    from torch.multiprocessing.reductions import reduce_tensor

    sys.path.insert(0, str(ROOT / "benchmarks"))
    from common import commit, device_info, env_set, write_result  # noqa: E402

    import mkernel

    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    sections = os.environ.get("DIAG_SECTIONS", "variants,timeline,ag,orders").split(",")
    gpus = torch.cuda.device_count()
    # A GPU per rank where there are enough (nvidia-h200-x2), else every rank on GPU 0 under MPS.
    torch.cuda.set_device(rank % gpus if gpus >= world else 0)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    ctx = mkernel.init()
    rows = []

    def emit(row: dict) -> None:
        rows.append(row)
        if rank == 0:
            print("DIAG " + json.dumps(row), flush=True)

    def timed_all(fns: dict, reps: int = 5, samples: int = 7) -> dict:
        """Max over ranks of the median ms per call of each fn, interleaved round by round
        (rotating order, a barrier before each sample), so drift reaches every figure alike."""
        names = list(fns)
        for n in names:
            fns[n]()
        torch.cuda.synchronize()
        got = {n: [] for n in names}
        for i in range(samples):
            for j in range(len(names)):
                n = names[(i + j) % len(names)]
                dist.barrier()
                a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                a.record()
                for _ in range(reps):
                    fns[n]()
                b.record()
                b.synchronize()
                got[n].append(a.elapsed_time(b) / reps)
        t = torch.tensor([statistics.median(got[n]) for n in names], dtype=torch.float64)
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        return dict(zip(names, t.tolist()))

    def with_env(fn, **env):
        def run():
            with env_set(env):
                return fn()
        return run

    if "ipc" in sections:
        n = 128 << 20  # bf16 elements: 256 MiB
        mine = torch.ones(n, dtype=torch.bfloat16, device="cuda")
        dst = torch.empty_like(mine)
        handles = [None] * world
        dist.all_gather_object(handles, reduce_tensor(mine)[1])
        peer = reduce_tensor(mine)[0](*handles[(rank + 1) % world])
        t = timed_all({"local": lambda: dst.copy_(mine), "peer": lambda: dst.copy_(peer)})
        for name, ms in t.items():
            emit({"what": "ipc", "read": name, "ms": ms, "read_write_gbs": 4 * n / ms / 1e6})
        torch.cuda.synchronize()
        dist.barrier()
        del peer

    sms = torch.cuda.get_device_properties(0).multi_processor_count
    for m, k, nn in SHAPES:
        x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
        w = torch.randn(nn, k, device="cuda", dtype=torch.bfloat16) / 32
        shape = {"m": m, "k": k, "n": nn, "world": world, "sms": sms}
        gemm = lambda x=x, w=w: mkernel.gemm(x, w)  # noqa: E731
        if "gemm" in sections:
            cfg = 0 if -(-m // 128) * -(-nn // 256) >= sms else 1  # fused_dispatch.cu
            bn = 256 if cfg == 0 else 128
            flags = torch.zeros(-(-m // 128) * -(-nn // bn), dtype=torch.int64, device="cuda")
            fns = {
                "engine auto": gemm,
                "hooked": lambda: torch.ops.mkernel.gemm_hooked(
                    x, w, None, 128, 0, None, 1, None, cfg, 0, 0, 0, 10.0, 1),
                "hooked, tile flags": lambda: torch.ops.mkernel.gemm_hooked(
                    x, w, None, 128, 0, flags, 1, None, cfg, 0, 0, 0, 10.0, 1),
            }
            for name, ms in timed_all(fns).items():
                emit(dict(shape, what="gemm", kind=name, config=cfg, ms=ms,
                          plan=mkernel.gemm_plan(x, w) if name == "engine auto" else None))
        if "variants" in sections:
            fns = {"gemm alone": gemm}
            for op in ("gemm_rs", "gemm_ar"):
                fn = getattr(mkernel, op)
                for name, side, tail in VARIANTS:
                    fns[f"{op}: {name}"] = with_env(lambda fn=fn: fn(x, w, group=ctx),
                                                    MKERNEL_FUSED="force", MKERNEL_FUSED_SIDE=side,
                                                    MKERNEL_FUSED_TAIL=tail)
            t = timed_all(fns, reps=5 if k < 8192 else 2, samples=7 if k < 8192 else 5)
            for name, ms in t.items():
                emit(dict(shape, what="variant", kind=name, ms=ms,
                          over_gemm=ms / t["gemm alone"]))
        if "timeline" in sections:
            base = Path(tempfile.gettempdir(), f"fused_tl_{os.getppid()}")
            for op in ("gemm_rs", "gemm_ar"):
                fn = getattr(mkernel, op)
                for name, side, tail in VARIANTS:
                    path = f"{base}_{op}_{side}_{tail}"
                    run = with_env(lambda fn=fn: fn(x, w, group=ctx), MKERNEL_FUSED="force",
                                   MKERNEL_FUSED_SIDE=side, MKERNEL_FUSED_TAIL=tail,
                                   MKERNEL_FUSED_TIMELINE=path)
                    for _ in range(3):  # the last call's line is summarised
                        run()
                    torch.cuda.synchronize()
                    dist.barrier()
                    if rank == 0:
                        lines = {}
                        for r in range(world):
                            text = Path(f"{path}.rank{r}").read_text().strip().splitlines()
                            lines[r] = text[-1]
                        emit(dict(shape, what="timeline", op=op, kind=name,
                                  **summarise_timeline(lines)))
                    dist.barrier()

    if "trigger" in sections:
        # Whether the ranks' fused kernels run at the same time (session 7 device run 2: under
        # MPS the second rank's CTAs started as the first's reached griddepcontrol.
        # launch_dependents at the end of their mainloop): the trigger at the kernel's start
        # (the default now) against after the mainloop (MKERNEL_FUSED_TRIGGER=late), fused
        # kernel pinned, interleaved with the GEMM alone and the unfused path; then one
        # timeline call of each (per-rank start / GEMM end / exit).
        mk = torch.ops.mkernel
        for m, k, nn in [(8192, 2048, 8192), (8192, 28672 // world, 8192)]:
            x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
            w = torch.randn(nn, k, device="cuda", dtype=torch.bfloat16) / 64
            shape = {"m": m, "k": k, "n": nn, "world": world}
            fns = {"gemm alone": lambda x=x, w=w: mkernel.gemm(x, w),
                   "unfused rs": lambda x=x, w=w: mk.reduce_scatter.default(mkernel.gemm(x, w),
                                                                           ctx.handle, world)}
            for op in ("gemm_rs", "gemm_ar"):
                fn = getattr(mkernel, op)
                for trig in ("early", "late"):
                    fns[f"{op} trigger {trig}"] = with_env(
                        lambda fn=fn, x=x, w=w: fn(x, w, group=ctx), MKERNEL_FUSED="force",
                        MKERNEL_FUSED_TRIGGER=trig)
            # A persistent grid of 4 SMs fewer than the share: whether the second rank waits for
            # SMs (cluster placement) rather than for the trigger.
            fns["gemm_rs trigger late, grid -4"] = with_env(
                lambda x=x, w=w: mkernel.gemm_rs(x, w, group=ctx), MKERNEL_FUSED="force",
                MKERNEL_FUSED_TRIGGER="late", MKERNEL_FUSED_SMS=str(sms - 4))
            t = timed_all(fns, reps=5 if k < 8192 else 2, samples=5)
            for name, ms in t.items():
                emit(dict(shape, what="trigger", kind=name, ms=ms, over_gemm=ms / t["gemm alone"]))
            base = Path(tempfile.gettempdir(), f"fused_tl_{os.getppid()}")
            for trig in ("early", "late"):
                path = f"{base}_trigger_{m}_{k}_{trig}"
                run = with_env(lambda x=x, w=w: mkernel.gemm_rs(x, w, group=ctx),
                               MKERNEL_FUSED="force", MKERNEL_FUSED_TRIGGER=trig,
                               MKERNEL_FUSED_TIMELINE=path)
                for _ in range(2):
                    run()
                torch.cuda.synchronize()
                dist.barrier()
                if rank == 0:
                    lines = {r: Path(f"{path}.rank{r}").read_text().strip().splitlines()[-1]
                             for r in range(world)}
                    emit(dict(shape, what="timeline", op="gemm_rs", kind=f"trigger {trig}",
                              **summarise_timeline(lines)))
                dist.barrier()
        # ag_gemm at Llama fc1 (per rank x [8192 / W, 8192], w [28672 / W, 8192]).
        m, k, nn = 8192 // world, 8192, 28672 // world
        x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
        w = torch.randn(nn, k, device="cuda", dtype=torch.bfloat16) / 64
        full = torch.randn(world * m, k, device="cuda", dtype=torch.bfloat16)
        fns = {"gemm alone": lambda: mkernel.gemm(full, w),
               "unfused ag": lambda: mkernel.gemm(mk.all_gather.default(x, ctx.handle, world), w)}
        for trig in ("early", "late"):
            fns[f"ag_gemm trigger {trig}"] = with_env(lambda: mkernel.ag_gemm(x, w, group=ctx),
                                                      MKERNEL_FUSED="force",
                                                      MKERNEL_FUSED_TRIGGER=trig)
        t = timed_all(fns, reps=2, samples=5)
        for name, ms in t.items():
            emit(dict(m=m, k=k, n=nn, world=world, what="trigger", kind=name, ms=ms,
                      over_gemm=ms / t["gemm alone"]))

    if "orders" in sections:
        # The persistent tile order of the fused kernel (MKERNEL_FUSED_ORDER) at the Llama-70B
        # shapes, where K is long and a band of A rows or B columns no longer fits in L2: gemm_rs
        # fc2 (any order) and ag_gemm fc1 (along N only: its rows arrive by M unit).
        fc2 = (8192, 28672 // world, 8192, mkernel.gemm_rs,
               ("8n", "1m", "2m", "4m", "1n", "2n", "4n"))
        fc1 = (8192 // world, 8192, 28672 // world, mkernel.ag_gemm, ("8n", "1n", "2n", "4n"))
        for m, k, nn, op, orders in (fc2, fc1):  # "8n": the scheduler's default
            x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
            w = torch.randn(nn, k, device="cuda", dtype=torch.bfloat16) / 64
            # the GEMM alone on the rows the op multiplies (ag: every rank's, gathered)
            a = x if op is mkernel.gemm_rs else torch.randn(world * m, k, device="cuda",
                                                             dtype=torch.bfloat16)
            call = lambda op=op, x=x, w=w: op(x, w, group=ctx)  # noqa: E731
            fns = {"gemm alone": lambda a=a, w=w: mkernel.gemm(a, w)}
            fns.update(hooked_rows(torch.ops.mkernel, a, w))
            for order in orders:
                fns[f"{op.__name__} order {order}"] = with_env(call, MKERNEL_FUSED="force",
                                                               MKERNEL_FUSED_ORDER=order)
            fns[f"{op.__name__} measured choice"] = with_env(call, MKERNEL_FUSED="force")
            t = timed_all(fns, reps=2, samples=5)
            for name, ms in t.items():
                emit(dict(m=m, k=k, n=nn, world=world, what="order", kind=name, ms=ms,
                          over_gemm=ms / t["gemm alone"], plan=mkernel.gemm_plan(a, w)))

    if "ag" in sections:
        # ag_gemm: the copy role from registers (the default) vs bulk copies, vs the GEMM alone on
        # the gathered rows; per-rank x [m, K], w [N, K].
        for m, k, nn in [(1024, 8192, 3584), (4096, 8192, 512)]:
            x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
            w = torch.randn(nn, k, device="cuda", dtype=torch.bfloat16) / 64
            full = torch.randn(world * m, k, device="cuda", dtype=torch.bfloat16)
            fns = {"gemm alone": lambda full=full, w=w: mkernel.gemm(full, w)}
            for side in ("regs", "bulk", "staged"):
                fns[f"ag_gemm: side {side}"] = with_env(
                    lambda x=x, w=w: mkernel.ag_gemm(x, w, group=ctx), MKERNEL_FUSED="force",
                    MKERNEL_FUSED_SIDE=side)
            t = timed_all(fns)
            for name, ms in t.items():
                emit(dict(m=m, k=k, n=nn, world=world, what="ag", kind=name, ms=ms,
                          over_gemm=ms / t["gemm alone"]))

    if "mps" in sections:
        mps_section(rank, world, ctx, emit, timed_all, with_env)

    if "agfc1" in sections:
        agfc1_section(rank, world, ctx, emit, timed_all, with_env)

    if "gate" in sections:
        gate_section(rank, world, ctx, emit, timed_all, with_env)

    if rank == 0:
        path = write_result("fused_diag", {"bench": "fused_diag", "commit": commit(),
                                           "device": device_info(), "world": world,
                                           "mps_share_percent":
                                               os.environ.get("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"),
                                           "rows": rows})
        print(f"wrote {path}", flush=True)
    mkernel.shutdown()
    dist.destroy_process_group()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--world", type=int, default=2)
    ap.add_argument("--sections", default="variants,timeline,ag,orders")
    ap.add_argument("--timeout", type=float, default=80)
    ap.add_argument("--device-sms", type=int, default=132,
                    help="the GPU's SMs (section mps, no-limit run: fused grids of SMs / W)")
    args = ap.parse_args()
    sys.path.insert(0, str(ROOT))
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import contextlib

    import torch
    from common import mps_daemon

    from tests.launch import run_ranks

    per_gpu = torch.cuda.device_count() >= args.world  # a GPU per rank: no MPS, whole GPUs
    env = {"CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": str(100 // args.world), "NCCL_NVLS_ENABLE": "0",
           "DIAG_SECTIONS": args.sections}
    if per_gpu:
        del env["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"]
    # Section `mps` runs once more with no MPS limit and every fused grid capped at SMs / W.
    launches = [env]
    if "mps" in args.sections.split(","):
        launches.append(dict(env, CUDA_MPS_ACTIVE_THREAD_PERCENTAGE="100", DIAG_SECTIONS="mps",
                             DIAG_MPS_SETTING="full",
                             MKERNEL_FUSED_SMS=str(args.device_sms // args.world)))
    code = f"import runpy; runpy.run_path({str(Path(__file__).resolve())!r}, run_name='__rank__')"
    worst = 0
    with (contextlib.nullcontext({}) if per_gpu else mps_daemon("fused_diag")) as mps_env:
        for launch_env in launches:
            results = run_ranks(code, args.world, timeout=args.timeout,
                                env=dict(launch_env, **mps_env))
            for r in results:
                if r.returncode != 0 or r.rank == 0:
                    sys.stdout.write(r.stdout[-60000:])
                    sys.stderr.write(r.stderr[-4000:])
            worst = max([worst] + [r.returncode if r.returncode is not None else 124
                                   for r in results])
    sys.exit(worst)


if __name__ == "__main__":
    main()
elif __name__ == "__rank__":
    rank_main()
