"""GEMM engine vs cuBLAS (torch.matmul), side by side in one process.

For every shape of issue #4 (M×N×K, D = A·Bᵀ, bf16) and each engine config,
CUDA-event medians over rotated input sets; writes JSON under results/ with
the cuBLAS figure, the engine's best config and auto, and the ratios.

    python benchmarks/bench_gemm.py [--quick] [--out-dir DIR]
"""

from __future__ import annotations

import argparse
import json
import sys

import torch

sys.path.insert(0, __file__.rsplit("/", 1)[0])
from common import commit, cuda_median_ms, device_info, write_result  # noqa: E402

import mkernel  # noqa: E402
from mkernel.ops import GEMM_CONFIGS  # noqa: E402

SHAPES = [  # (M, N, K)
    (8192, 8192, 8192), (8192, 7168, 8192), (16384, 7168, 8192), (8192, 8192, 3584),
    (4096, 3584, 8192), (1024, 8192, 3584), (128, 8192, 3584), (3000, 8192, 3584),  # last: ragged M
]


def input_sets(m: int, n: int, k: int, dtype) -> list[tuple[torch.Tensor, torch.Tensor]]:
    # Enough sets that the rotation exceeds the 60 MB L2 (at least 2 sets).
    per_set = (m * k + n * k) * 2
    count = max(2, min(8, (256 << 20) // max(per_set, 1)))
    return [(torch.randn(m, k, device="cuda", dtype=dtype), torch.randn(n, k, device="cuda", dtype=dtype))
            for _ in range(count)]


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="fewer iterations")
    ap.add_argument("--iters", type=int, default=30)
    args = ap.parse_args()
    iters = 10 if args.quick else args.iters
    dtype = torch.bfloat16
    rows = []
    for m, n, k in SHAPES:
        sets = input_sets(m, n, k, dtype)
        flops = 2.0 * m * n * k
        res = {"m": m, "n": n, "k": k}
        cublas = cuda_median_ms([lambda a=a, b=b: torch.matmul(a, b.T) for a, b in sets], iters=iters)
        res["cublas"] = dict(cublas, tflops=flops / cublas["median_ms"] / 1e9)
        res["configs"] = {}
        # Sweep: every config x tile order, short runs; then the best three again, long.
        for name in GEMM_CONFIGS:
            for swz in ((0,) if name == "auto" else (1, 4, 8)):
                for ras in (("auto",) if name == "auto" else ("m", "n")):
                    key = f"{name}/s{swz}/{ras}"
                    try:
                        t = cuda_median_ms([lambda a=a, b=b: mkernel.gemm(a, b, config=name, swizzle=swz, raster=ras)
                                            for a, b in sets], warmup=3, iters=max(8, iters // 2))
                    except RuntimeError as e:
                        res["configs"][key] = {"error": str(e).splitlines()[0]}
                        continue
                    res["configs"][key] = dict(t, tflops=flops / t["median_ms"] / 1e9)
        ok = {c: v for c, v in res["configs"].items() if "median_ms" in v}
        finalists = sorted((c for c in ok if not c.startswith("auto")), key=lambda c: ok[c]["median_ms"])[:3]
        final = {}
        cublas = cuda_median_ms([lambda a=a, b=b: torch.matmul(a, b.T) for a, b in sets], iters=iters)
        for c in finalists + ["auto/s0/auto"]:
            name, swz, ras = c.split("/")
            t = cuda_median_ms([lambda a=a, b=b: mkernel.gemm(a, b, config=name, swizzle=int(swz[1:]), raster=ras)
                                for a, b in sets], iters=iters)
            final[c] = dict(t, tflops=flops / t["median_ms"] / 1e9, ratio_vs_cublas=cublas["median_ms"] / t["median_ms"])
        # The hooked kernel (mkernel's own kernel layer, hooks idle) on the cooperative configs.
        for name in ("coop_128x256_c2x1", "coop_256x128_c2x1", "coop_128x128_c2x1"):
            cfg = GEMM_CONFIGS[name]
            t = cuda_median_ms([lambda a=a, b=b: torch.ops.mkernel.gemm_hooked(
                a, b, None, 1, 1, None, 1, None, cfg, 0, 0, 0, 10.0) for a, b in sets], iters=iters)
            final[f"hooked/{name}"] = dict(t, tflops=flops / t["median_ms"] / 1e9,
                                           ratio_vs_cublas=cublas["median_ms"] / t["median_ms"])
        res["cublas_final"] = dict(cublas, tflops=flops / cublas["median_ms"] / 1e9)
        res["final"] = final
        best = min((c for c in final if not c.startswith(("auto", "hooked"))), key=lambda c: final[c]["median_ms"])
        hooked_best = min((c for c in final if c.startswith("hooked")), key=lambda c: final[c]["median_ms"])
        res["hooked_best"], res["hooked_ratio"] = hooked_best, final[hooked_best]["ratio_vs_cublas"]
        res["best_config"] = best
        res["best_ratio"] = final[best]["ratio_vs_cublas"]
        res["auto_ratio"] = final["auto/s0/auto"]["ratio_vs_cublas"]
        rows.append(res)
        print(f"{m:>6}x{n:>5}x{k:>5}  cuBLAS {res['cublas_final']['tflops']:7.1f} TF/s  "
              f"best {best:<26} {final[best]['tflops']:7.1f} TF/s ({res['best_ratio']:.3f}x)  "
              f"auto {res['auto_ratio'] or float('nan'):.3f}x  {hooked_best} {res['hooked_ratio']:.3f}x", flush=True)
        del sets
        torch.cuda.empty_cache()
    payload = {"benchmark": "gemm", "anchor": "cuBLAS via torch.matmul (same run)", "dtype": "bf16",
               "commit": commit(), "device": device_info(), "timing": "CUDA events, median, rotated inputs",
               "results": rows}
    path = write_result("gemm", payload)
    print(f"wrote {path}")
    print(json.dumps({f"{r['m']}x{r['n']}x{r['k']}": sorted(
        ((round(v["tflops"], 1), c) for c, v in r["configs"].items() if "tflops" in v), reverse=True)[:6]
        for r in rows}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
