"""GEMM engine vs cuBLAS (torch.matmul), side by side in one process.

For every shape of issue #4 (M×N×K, D = A·Bᵀ, bf16): a short sweep of the
engine's configs (CUTLASS-kernel layer and mkernel's hooked kernel, with tile
orders and split-K), then the plan (``auto``, what users get) and the sweep's
best three measured *interleaved* with cuBLAS — each iteration times every
candidate in rotating order — over several rounds, so clock drift on a shared
machine reaches both sides alike. Writes JSON under results/.

    python benchmarks/bench_gemm.py [--quick] [--rounds R] [--shapes MxNxK,...|heldout] [--no-sweep]

Also recorded per shape: the autotune's first-call cost (``autotune_first_call_s``: wall time
of the first ``gemm_plan`` of the shape, which tunes it as a first ``gemm`` call would, GPU
synchronized before and after) and the cached lookup after it (``plan_cached_call_s``).
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


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="fewer iterations")
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--shapes", default="",
                    help="MxNxK,... or 'heldout' (default: all of issue #4's shapes)")
    ap.add_argument("--no-sweep", action="store_true",
                    help="time only auto against cuBLAS (no config sweep, no finalists)")
    args = ap.parse_args()
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
