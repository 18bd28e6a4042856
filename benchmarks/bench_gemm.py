"""GEMM engine vs cuBLAS (torch.matmul), side by side in one process.

For every shape of issue #4 (M×N×K, D = A·Bᵀ, bf16): a short sweep of the
engine's configs (CUTLASS-kernel layer and mkernel's hooked kernel, with tile
orders and split-K), then the plan (``auto``, what users get) and the sweep's
best three measured *interleaved* with cuBLAS — each iteration times every
candidate in rotating order — over several rounds, so clock drift on a shared
machine reaches both sides alike. Writes JSON under results/.

    python benchmarks/bench_gemm.py [--quick] [--rounds R] [--shapes MxNxK,...|heldout] [--no-sweep]
    python benchmarks/bench_gemm.py --decode [--dtypes bf16,fp16]

Also recorded per shape: the autotune's first-call cost (``autotune_first_call_s``: wall time
of the first ``gemm_plan`` of the shape, which tunes it as a first ``gemm`` call would, GPU
synchronized before and after) and the cached lookup after it (``plan_cached_call_s``).

``--decode``: the small-M set (issue 12 item 3): M in DECODE_M against 8192x8192 weights and
Llama-70B TP=8 decode weights (DECODE_NK), bf16 and fp16. Per case cuBLAS is timed two ways
(``torch.matmul(a, b.T)`` and ``F.linear(a, b)``, the anchor is the faster) interleaved with
``auto`` (what users get: the GEMV kernel at M <= 8, the tuned plan above) and the candidates
of that M class (GEMV variants; tile configs, stream-K and split-K at a few hundred rows).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time

import torch

sys.path.insert(0, __file__.rsplit("/", 1)[0])
from common import commit, device_info, interleaved_ms, write_result  # noqa: E402

import mkernel  # noqa: E402
from mkernel.ops import GEMM_CONFIGS  # noqa: E402

SHAPES = [  # (M, N, K)
    (8192, 8192, 8192), (8192, 7168, 8192), (16384, 7168, 8192), (8192, 8192, 3584),
    (4096, 3584, 8192), (1024, 8192, 3584), (128, 8192, 3584), (3000, 8192, 3584),  # last: ragged M
]
# The held-out check of 2026-12-01 (issue 10): the large shapes where the engine was slower than
# cuBLAS, and 8192x8192 weights at decode/prefill row counts.
HELDOUT = [(8192, 7168, 8192), (16384, 7168, 8192), (1, 8192, 8192), (16, 8192, 8192),
           (64, 8192, 8192), (128, 8192, 8192), (333, 8192, 8192)]
HOOKED = ("coop_128x256_c2x1", "coop_128x128_c2x1", "coop_128x256_c1x2", "coop_256x128_c2x1",
          "coop_256x128_c1x2", "ping_128x128_c1x2")


def input_sets(m: int, n: int, k: int, dtype) -> list[tuple[torch.Tensor, torch.Tensor]]:
    # Enough sets that the rotation exceeds the 60 MB L2 (at least 2 sets).
    per_set = (m * k + n * k) * 2
    count = max(2, min(8, (256 << 20) // max(per_set, 1)))
    return [(torch.randn(m, k, device="cuda", dtype=dtype), torch.randn(n, k, device="cuda", dtype=dtype))
            for _ in range(count)]


def candidates(m: int, n: int, k: int) -> list[str]:
    """Names: 'auto', 'cutlass:<config>/s<swizzle>/<raster>', 'hooked:<config>/s<swizzle>/<raster>/k<splits>'."""
    names = ["auto"]
    for cfg in GEMM_CONFIGS:
        if cfg in ("auto", "coop_128x128_streamk", "coop_256x128_c2x1"):  # never won a sweep
            continue
        for swz in (1, 4, 8) if cfg in ("coop_128x256_c2x1", "ping_128x128_c1x2") else (1, 8):
            for ras in ("m", "n"):
                names.append(f"cutlass:{cfg}/s{swz}/{ras}")
    for cfg in HOOKED:
        for swz, ras in ((1, "m"), (8, "n")):
            names.append(f"hooked:{cfg}/s{swz}/{ras}/k1")
    tiles_small = -(-m // 128) * -(-n // 256)
    if tiles_small * 2 <= 132:  # few tiles: split-K candidates
        for cfg in ("coop_128x256_c1x2", "coop_128x128_c2x1", "coop_256x128_c1x2"):
            for splits in (0, 2, 3, 4, 6, 8):
                names.append(f"hooked:{cfg}/s1/n/k{splits}")
    return names


def runner(name: str, a: torch.Tensor, b: torch.Tensor):
    if name == "auto":
        return lambda: mkernel.gemm(a, b)
    if name == "auto-pdl":  # the same plan launched with programmatic dependent launch
        return lambda: mkernel.gemm(a, b, pdl=True)
    kind, spec = name.split(":")
    parts = spec.split("/")
    cfg, swz, ras = parts[0], int(parts[1][1:]), parts[2]
    if kind == "cutlass":
        return lambda: mkernel.gemm(a, b, config=cfg, swizzle=swz, raster=ras, splits=1)
    splits = int(parts[3][1:])
    r = {"m": 1, "n": 2}[ras]
    return lambda: torch.ops.mkernel.gemm_hooked(a, b, None, 1, 1, None, 1, None, GEMM_CONFIGS[cfg], 0, swz, r,
                                                 10.0, splits)


DECODE_NK = [  # (N, K): square 8192 weights, Llama-70B QKV unsharded, then TP=8 slices of it
    # (hidden 8192, ffn 28672: down 8192x3584, up/gate 3584x8192, o 8192x1024, qkv (64+16)*128/8)
    (8192, 8192), (10240, 8192), (8192, 3584), (3584, 8192), (8192, 1024), (1280, 8192)]
DECODE_M = [1, 16, 64, 333]
GEMV_VARIANTS = ["w2u2r1", "w4u2r1", "w8u2r1", "w16u2r1", "w4u4r1", "w8u2r2",  # gemv_sm90.cu order
                 "w2s6", "w4s4", "w4s8", "w8s4", "w8u1r4", "rows_w8u2", "rows_w16u2", "rows_w8u4", "ks_w8r2", "ks_w16r2"]


GEMV_BLOCKS_PER_SM = [8, 4, 2, 1, 2, 1, 6, 4, 2, 2, 1, 2, 1, 1, 2, 1]  # gemv_sm90.cu kVariants
SWAP_VARIANTS = ["swap_128x176_c2x1", "swap_128x176_streamk", "swap_128x64_streamk",
                 "swap_128x128_streamk", "swap_128x176_c2x2", "swap_128x192_c2x1",
                 "swap_64x64_ping", "swap_64x16_ping", "swap_128x16_streamk", "swap_128x112_streamk",
                 "swap_64x176_ping", "swap_256x176_streamk", "swap_256x176_k2", "swap_128x176_sk",
                 "swap_256x176_k4", "swap_64x16k256_ping", "swap_128x176_k2", "swap_128x176_tk",
                 "swap_128x112_tk", "swap_128x112k128_tk",
                 "swap_256x112_tk", "swap_128x336_wide",
                 "swap_128x176_c1x2", "swap_64x176_c4x2",
                 "swap_128x168", "swap_128x168_c1x2", "swap_128x168_c2x1", "swap_64x168_c4x2",
                 "swap_64x168_c1x2", "swap_128x176_ds", "swap_64x176_c4x2_ds",
                 "swap_128x168_c1x2_h", "swap_64x168_c4x2_h"]  # gemm_swap_dispatch.cu order
SWAP_TILE_TOKENS = [176, 176, 64, 128, 176, 192, 64, 16, 16, 112, 176, 176, 176, 176, 176, 16, 176, 176, 112, 112, 112,
                    336, 176, 176, 168, 168, 168, 168, 168, 176, 176, 168, 168]


def decode_candidates(m: int, n: int = 8192, k: int = 8192, sms: int = 132) -> list[str]:
    """Candidates of the decode set for M rows (runner names, plus 'gemv:<variant>[/k<splits>]':
    the cp.async variants also with K split over enough blocks to fill one wave)."""
    if m <= 16:  # the GEMV kernel's range (w16u2r1 takes one group of 8 rows only)
        names = [f"gemv:{i}" for i in range(len(GEMV_VARIANTS)) if m <= 8 or i != 3]
        tiles, steps = -(-n // 16), -(-k // 64)
        for v in range(6, 10):
            splits = min(sms * GEMV_BLOCKS_PER_SM[v] // tiles, steps // 8)
            if splits > 1:
                names.append(f"gemv:{v}/k{splits}")
        # from 9 rows the swapped GEMM's 64-wide stream-K tile too, against the GEMV (and the
        # 16-wide tiles of session 9)
        return names + ["cutlass:ping_64x128_c1x1/s1/m", "cutlass:ping_64x256_c1x1/s8/m"] + (
            ["swap:2", "swap:6", "swap:7", "swap:8", "swap:15"] if m > 8 else [])
    # The swapped-operand GEMM (gemm_swap_api.h: A's rows on the MMA's N), every variant whose
    # token tile is no wider than 2 M (the small-M tuner's own filter is stricter).
    swaps = [f"swap:{v}" for v, width in enumerate(SWAP_TILE_TOKENS) if 64 <= width <= 2 * m]
    if m <= 128:  # run 1: the 64-row tiles (split-K lost everywhere in run 1)
        return ["cutlass:ping_64x128_c1x1/s1/m", "cutlass:ping_64x128k128_c1x1/s1/m",
                "cutlass:ping_64x128_c1x1/s8/n"] + swaps
    # run 1's two fastest at M=333 (the rest of its 15 ran 0.26-0.65x cuBLAS)
    return ["cutlass:ping_64x256_c1x1/s1/m", "cutlass:coop_128x128_streamk/s1/m"] + swaps + split_names(m, n, k, sms)


def split_names(m: int, n: int, k: int, sms: int) -> list[str]:
    """Session 11: the engine's hooked 128x256 tile (tokens on M) with K split to fill one wave,
    where its tiles fill under half the SMs (gemm_autotune.cpp split_candidate: 333x3584x8192 ->
    3 x 14 tiles x 3 splits = 126 CTAs), and one split fewer; 'split:<config>/k<splits>'."""
    tiles = -(-m // 128) * -(-n // 256)
    if m <= 128 or 2 * tiles > sms:
        return []
    s = min(8, sms // tiles, -(-k // 64) // 4)
    return [f"split:coop_128x256_c1x2/k{v}" for v in (s, s - 1) if v >= 2]


def decode_runner(name: str, a: torch.Tensor, b: torch.Tensor):
    if name == "cublas":
        return lambda: torch.matmul(a, b.T)
    if name == "linear":
        return lambda: torch.nn.functional.linear(a, b)
    if name.startswith("gemv:"):
        v, _, splits = name[5:].partition("/k")
        v, splits = int(v), int(splits or 0)
        return lambda: torch.ops.mkernel.gemv(a, b, v, splits)
    if name.startswith("swap:"):
        v = int(name[5:])
        return lambda: torch.ops.mkernel.gemm_swap(a, b, v)
    if name.startswith("split:"):  # what auto's kSplit plan runs (gemm.cpp engine_split)
        cfg, _, splits = name[6:].partition("/k")
        return lambda: mkernel.gemm(a, b, config=cfg, splits=int(splits))
    return runner(name, a, b)


def graph_times(cands: dict, args, calls: int = 20) -> dict:
    """Per-call GPU time of each candidate with the host out of the way: `calls` calls (input
    sets rotating) captured in one CUDA graph, replays interleaved as in interleaved_ms. What
    a decode step run from a graph sees; short kernels are host-bound when launched eagerly."""
    graphs, out = {}, {}
    stream = torch.cuda.Stream()
    for c, fns in cands.items():
        try:
            g = torch.cuda.CUDAGraph()
            with torch.cuda.stream(stream):
                with torch.cuda.graph(g, stream=stream):
                    for i in range(calls):
                        fns[i % len(fns)]()
            graphs[c] = [g.replay]
        except RuntimeError as e:
            out[c] = f"capture failed: {str(e).splitlines()[0]}"
    torch.cuda.synchronize()
    t = interleaved_ms(graphs, iters=args.iters)
    out.update({c: round(v["median_ms"] * 1e3 / calls, 2) for c, v in t.items()})
    del graphs
    return out


def decode_cases(args, save) -> int:
    """Times every case of the decode set; save(rows, path) writes the JSON after each."""
    dtypes = {"bf16": torch.bfloat16, "fp16": torch.float16}
    rows, path = [], None
    nks = DECODE_NK if not args.shapes else [tuple(int(v) for v in s.split("x")) for s in args.shapes.split(",")]
    ms = [int(v) for v in args.ms.split(",")] if args.ms else DECODE_M
    for dname in args.dtypes.split(","):
        dtype = dtypes[dname]
        for n, k in nks:
            for m in ms:
                sets = input_sets(m, n, k, dtype)
                bytes_ = 2.0 * (n * k + m * k + m * n)
                flops = 2.0 * m * n * k
                est_ms = max(bytes_ / 3.5e12, flops / 600e12) * 1e3
                reps = max(1, min(20, int(0.3 / est_ms)))
                res = {"m": m, "n": n, "k": k, "dtype": dname, "plan": mkernel.gemm_plan(*sets[0]),
                       "reps": reps, "bytes_floor_us": 2.0 * n * k / 4.2e12 * 1e6}
                sms = torch.cuda.get_device_properties(0).multi_processor_count
                names = ["cublas", "linear", "auto"] + decode_candidates(m, n, k, sms)
                if args.lean:  # anchors, auto, the tile kernels' old plan, and at M <= 16 two GEMV variants
                    names = (["cublas", "linear", "auto"] + [c for c in names[3:] if c.startswith("cutlass:")][:1]
                             + (["gemv:1", "gemv:2", "gemv:7"] if m <= 16 else [])
                             + (["gemv:5", "gemv:10"] if 8 < m <= 16 else [])
                             + (["gemv:11", "gemv:12", "gemv:13", "gemv:14", "gemv:15"] if m <= 16 else [])
                             + [c for c in names if c.startswith(("swap:", "split:"))])
                if args.swaps:  # a short run: only the named swapped variants
                    keep = {f"swap:{v}" for v in args.swaps.split(",") if v}
                    names = [c for c in names if not c.startswith("swap:") or c in keep]
                cands, errors = {}, {}
                for c in names:
                    try:  # a candidate that cannot run this shape is recorded, not timed
                        fns = [decode_runner(c, a, b) for a, b in sets]
                        fns[0]()
                        cands[c] = fns
                    except (RuntimeError, ValueError) as e:  # ValueError: the op's can_implement
                        errors[c] = str(e).splitlines()[0]
                torch.cuda.synchronize()
                per_round = [interleaved_ms(cands, iters=args.iters, reps=reps) for _ in range(args.rounds)]
                if est_ms < args.graph_below_us * 1e-3:
                    res["graph_us"] = graph_times(cands, args)
                final = {c: statistics.median(r[c]["median_ms"] for r in per_round) for c in cands}
                anchor = min(final["cublas"], final["linear"])
                res["us"] = {c: round(v * 1e3, 2) for c, v in final.items()}
                res["errors"] = errors
                res["anchor"] = "cublas" if final["cublas"] <= final["linear"] else "linear"
                res["auto_ratio"] = anchor / final["auto"]
                res["auto_round_ratios"] = [min(r["cublas"]["median_ms"], r["linear"]["median_ms"]) /
                                            r["auto"]["median_ms"] for r in per_round]
                ours = {c: v for c, v in final.items() if c not in ("cublas", "linear")}
                best = min(ours, key=ours.get)
                res["best"], res["best_ratio"] = best, anchor / ours[best]
                res["auto_gbps"] = bytes_ / (final["auto"] * 1e-3) / 1e9
                rows.append(res)
                top = sorted(ours.items(), key=lambda kv: kv[1])[:4]
                gr = res.get("graph_us", {})
                graph_note = (f" | graph replay: cuBLAS {gr.get('cublas')} linear {gr.get('linear')} auto "
                              f"{gr.get('auto')} us" if gr else "")
                print(f"{dname} {m:>4}x{n:>5}x{k:>5}  cuBLAS {final['cublas'] * 1e3:7.1f}us linear "
                      f"{final['linear'] * 1e3:7.1f}us | auto [{res['plan']}] {final['auto'] * 1e3:7.1f}us "
                      f"{res['auto_ratio']:.3f}x ({res['auto_gbps']:.0f} GB/s; rounds "
                      f"{' '.join(f'{x:.3f}' for x in res['auto_round_ratios'])}) | "
                      + ", ".join(f"{c} {v * 1e3:.1f}" for c, v in top)
                      + graph_note + (f" | errors: {sorted(errors)}" if errors else ""), flush=True)
                if args.swaps and gr:  # the short run's point: every candidate's graph time
                    timed = sorted((v, c) for c, v in gr.items() if isinstance(v, (int, float)))
                    print("    graph us: " + ", ".join(f"{c} {v}" for v, c in timed), flush=True)
                del sets, cands
                torch.cuda.empty_cache()
                path = save(rows, path)  # after every case: a run cut short keeps what it measured
    return summary(rows, path)


def run_decode(args) -> int:
    """The small-M set: every (N, K) of DECODE_NK at every M of DECODE_M, per dtype."""
    commit_id, device = commit(), device_info()

    def save(rows, path):
        payload = {"benchmark": "gemm_decode",
                   "anchor": "cuBLAS: min of torch.matmul(a, b.T) and F.linear(a, b), same run, interleaved",
                   "commit": commit_id, "device": device,
                   "timing": f"CUDA events; {args.rounds} rounds x {args.iters} iterations of `reps` calls, "
                             "candidates interleaved per iteration; median of round medians; rotated input "
                             "sets (together larger than L2)",
                   "results": rows}
        if path is None:
            return write_result("gemm_decode", payload)
        path.write_text(json.dumps(payload, indent=2))
        return path

    return decode_cases(args, save)


def summary(rows: list, path) -> int:
    print(f"wrote {path}")
    worst = min(rows, key=lambda r: r["auto_ratio"])
    print(f"auto vs cuBLAS: min {worst['auto_ratio']:.3f}x ({worst['dtype']} {worst['m']}x{worst['n']}x{worst['k']}), "
          f"median {statistics.median(r['auto_ratio'] for r in rows):.3f}x over {len(rows)} cases")
    return 0


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="fewer iterations")
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--shapes", default="",
                    help="MxNxK,... or 'heldout' (default: all of issue #4's shapes)")
    ap.add_argument("--no-sweep", action="store_true",
                    help="time only auto against cuBLAS (no config sweep, no finalists)")
    ap.add_argument("--decode", action="store_true", help="the small-M set (DECODE_NK x DECODE_M)")
    ap.add_argument("--dtypes", default="bf16,fp16", help="--decode: bf16,fp16")
    ap.add_argument("--ms", default="", help="--decode: M values (default DECODE_M)")
    ap.add_argument("--lean", action="store_true",
                    help="--decode: only cuBLAS, auto, one tile-kernel plan and the swapped GEMM (a short run)")
    ap.add_argument("--swaps", default="",
                    help="--decode: time only these swapped variants (indices, e.g. 1,10,17), not every one that fits")
    ap.add_argument("--graph-below-us", type=float, default=20.0,
                    help="--decode: also time cases estimated under this many us from CUDA-graph replays")
    args = ap.parse_args()
    if args.decode:
        if args.iters == 20 and args.quick:
            args.iters = 8
        return run_decode(args)
    if args.shapes == "heldout":
        shapes = HELDOUT
    else:
        shapes = [tuple(int(v) for v in s.split("x")) for s in args.shapes.split(",")] if args.shapes else SHAPES
    iters = 8 if args.quick else args.iters
    dtype = torch.bfloat16
    rows = []
    for m, n, k in shapes:
        sets = input_sets(m, n, k, dtype)
        flops = 2.0 * m * n * k
        # The plan "auto" runs (the first query of a shape tunes it, as a first call would):
        # its wall time is the autotune's first-call cost for this shape.
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        plan = mkernel.gemm_plan(*sets[0])
        torch.cuda.synchronize()
        first_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        mkernel.gemm_plan(*sets[0])
        cached_s = time.perf_counter() - t0
        res = {"m": m, "n": n, "k": k, "plan": plan, "autotune_first_call_s": first_s,
               "plan_cached_call_s": cached_s, "sweep": {}}
        # Short kernels are timed in batches of calls (see interleaved_ms): one call per
        # sample would time the host's launch path, not the GPU.
        sweep_reps = max(1, min(20, int(0.3 / (flops / 600e12 * 1e3))))
        for name in ([] if args.no_sweep else candidates(m, n, k)):
            try:
                t = interleaved_ms({name: [runner(name, a, b) for a, b in sets]}, warmup=2, iters=6,
                                   reps=sweep_reps)[name]
            except RuntimeError as e:
                res["sweep"][name] = {"error": str(e).splitlines()[0]}
                continue
            res["sweep"][name] = dict(t, tflops=flops / t["median_ms"] / 1e9)
        ok = {c: v for c, v in res["sweep"].items() if "median_ms" in v and c != "auto"}
        finalists = sorted(ok, key=lambda c: ok[c]["median_ms"])[:3]
        cands = {"cublas": [lambda a=a, b=b: torch.matmul(a, b.T) for a, b in sets]}
        for c in ["auto"] + ([] if args.no_sweep else ["auto-pdl"]) + finalists:
            cands[c] = [runner(c, a, b) for a, b in sets]
        # Kernels under ~0.3 ms: time batches of calls (the host runs ahead, as in a step);
        # both figures are kept: "final" (batched) and "single_call" (one call per sample).
        cublas_one = res_one = None
        reps = sweep_reps
        per_round = [interleaved_ms(cands, iters=iters, reps=reps) for _ in range(args.rounds)]
        if reps > 1:
            single = interleaved_ms(cands, iters=iters)
            res["single_call"] = {c: dict(single[c], ratio_vs_cublas=single["cublas"]["median_ms"] / single[c]["median_ms"])
                                  for c in cands}
            cublas_one, res_one = single["cublas"]["median_ms"], single["auto"]["median_ms"]
        res["reps"] = reps
        final = {}
        for c in cands:
            med = statistics.median(r[c]["median_ms"] for r in per_round)
            final[c] = {"median_ms": med, "round_medians_ms": [r[c]["median_ms"] for r in per_round],
                        "tflops": flops / med / 1e9}
        for c in cands:
            if c != "cublas":
                final[c]["ratio_vs_cublas"] = final["cublas"]["median_ms"] / final[c]["median_ms"]
                final[c]["round_ratios"] = [r["cublas"]["median_ms"] / r[c]["median_ms"] for r in per_round]
        res["final"] = final
        best = max((c for c in final if c not in ("cublas", "auto-pdl")), key=lambda c: final[c]["ratio_vs_cublas"])
        res["best"], res["best_ratio"] = best, final[best]["ratio_vs_cublas"]
        res["auto_ratio"] = final["auto"]["ratio_vs_cublas"]
        rows.append(res)
        pdl = f"with PDL {final['auto-pdl']['ratio_vs_cublas']:.3f}x, " if "auto-pdl" in final else ""
        print(f"{m:>6}x{n:>5}x{k:>5}  cuBLAS {final['cublas']['tflops']:6.1f} TF/s  "
              f"auto [{res['plan']}] {final['auto']['tflops']:6.1f} TF/s ({res['auto_ratio']:.3f}x, "
              f"{pdl}tuned in {first_s:.2f} s, rounds "
              f"{' '.join(f'{x:.3f}' for x in final['auto']['round_ratios'])})  "
              f"best {best} {res['best_ratio']:.3f}x"
              + (f"  [x{reps} batched; single call: auto {cublas_one / res_one:.3f}x]" if reps > 1 else ""),
              flush=True)
        if m <= 256:
            print("    sweep:", ", ".join(f"{c} {v['median_ms'] * 1e3:.1f}us" for c, v in
                                        sorted(ok.items(), key=lambda kv: kv[1]["median_ms"])[:12]), flush=True)
        del sets
        torch.cuda.empty_cache()
    payload = {"benchmark": "gemm", "anchor": "cuBLAS via torch.matmul (same run, interleaved)",
               "dtype": "bf16", "commit": commit(), "device": device_info(),
               "timing": f"CUDA events; {args.rounds} rounds x {iters} iterations, candidates interleaved "
                         "per iteration; median of round medians; rotated input sets",
               "results": rows}
    if args.no_sweep:
        payload["timing"] += "; no config sweep (auto and cuBLAS only)"
    path = write_result("gemm", payload)
    print(f"wrote {path}")
    print(json.dumps({f"{r['m']}x{r['n']}x{r['k']}": sorted(
        ((round(v["tflops"], 1), c) for c, v in r["sweep"].items() if "tflops" in v), reverse=True)[:5]
        for r in rows}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
