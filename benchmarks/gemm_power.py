"""The GEMM engine against cuBLAS in sustained windows beside the SM clock and the board power
(benchmarks/power_windows.py): is a GEMM at the board's power cap, and does the engine lose per
cycle or per joule where it loses? Session 51 found the attention kernels at the H100's 700 W cap,
where a kernel's DRAM bytes cost clock; bench_gemm.py's short samples cannot show that.

Candidates: `mkernel` (mkernel.gemm(a, b), the tuned plan), `cublas` (torch.matmul(a, b.T)) and
`linear` (F.linear(a, b)); a = [M, K], b = [N, K] (the engine's layout), bf16. Shapes as
M,N,K triples; the default holds the held-out rows the engine misses (M = 333) and a square one.

    python benchmarks/gemm_power.py [--shapes 333,8192,8192;8192,8192,8192] [--window 2] [--swizzles 1,8]
        [--plans coop_128x256_c2x1/s4/m,coop_256x128_c1x2/s4/n]

A dev build (MKERNEL_DEV_BUILD=1) has no swapped-operand kernels: its small-M plans are not the
shipped engine's (session 52's M = 333 rows ran ping_64x256 at 0.72x cuBLAS for that reason).
"""

from __future__ import annotations

import argparse
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, __file__.rsplit("/", 1)[0])
from common import commit, device_info, write_result  # noqa: E402
from power_windows import row_fields, sustained  # noqa: E402

import mkernel  # noqa: E402
from mkernel.ops import GEMM_CONFIGS  # noqa: E402


def parse_plans(text: str) -> list[tuple[str, int, str]]:
    """'<config>/s<swizzle>/<m|n>,...' (gemm_plan's form) as (config, swizzle, raster) triples."""
    out = []
    for p in (x.split("/") for x in text.split(",") if x):
        if len(p) != 3 or not p[1][1:].isdigit() or p[1][0] != "s" or p[2] not in ("m", "n") \
                or p[0] not in GEMM_CONFIGS:
            raise SystemExit(f"--plans: {'/'.join(p)!r} is not '<config>/s<swizzle>/<m|n>' with a config "
                             f"from mkernel.ops.GEMM_CONFIGS")
        out.append((p[0], int(p[1][1:]), p[2]))
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--shapes", type=str, default="333,8192,8192;333,8192,3584;8192,8192,8192",
                    help="M,N,K triples separated by ';'")
    ap.add_argument("--window", type=float, default=2.0, help="seconds per candidate window")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--swizzles", type=str, default="",
                    help="extra engine columns: the tuned plan's config and raster with these tile-order "
                         "swizzles (1, 2, 4, 8), e.g. 1,8: does a wider band (more L2 reuse, fewer DRAM "
                         "bytes) pay at the power cap?")
    ap.add_argument("--plans", type=str, default="",
                    help="extra engine columns, each '<config>/s<swizzle>/<m|n>' (gemm_plan's form), e.g. "
                         "coop_128x256_c2x1/s4/m: at the cap a larger tile reads fewer L2 bytes per flop")
    args = ap.parse_args()
    extra = parse_plans(args.plans)
    dev_build = device_info().get("dev_build", False)
    rows = []
    for spec in (x for x in args.shapes.split(";") if x):
        m, n, k = (int(v) for v in spec.split(","))
        gen = torch.Generator(device="cuda").manual_seed(m + n + k)
        a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16, generator=gen)
        b = torch.randn(n, k, device="cuda", dtype=torch.bfloat16, generator=gen)
        want = torch.matmul(a.float(), b.float().T)
        got = mkernel.gemm(a, b).float()
        err = ((got - want).norm() / want.norm()).item()
        if not err < 1e-2:
            raise SystemExit(f"M,N,K = {spec}: the engine's result is off (relative error {err:.3g})")
        plan = mkernel.gemm_plan(a, b)
        if dev_build and m <= 512:  # the small-M path's swapped kernels are not in a dev build
            print(f"gemm_power: M,N,K = {spec} in a dev build (MKERNEL_DEV_BUILD=1): no swapped-operand "
                  f"kernels, so the plan ({plan}) is not the shipped engine's", file=sys.stderr, flush=True)
            plan += " [dev build: no swapped-operand kernels]"
        cands = {"mkernel": lambda: mkernel.gemm(a, b), "cublas": lambda: torch.matmul(a, b.T),
                 "linear": lambda: F.linear(a, b)}
        # "<config>/s<swizzle>/<m|n>" for the engine's own kernel (not gemv / swap / split plans).
        parts = plan.split(" ")[0].split("/")
        if args.swizzles and len(parts) == 3 and parts[1].startswith("s") and ":" not in parts[0] \
                and not parts[0].startswith(("gemv", "swap")):
            for swz in (int(x) for x in args.swizzles.split(",") if x):
                cands[f"mkernel@swz={swz}"] = (lambda swz=swz: mkernel.gemm(
                    a, b, config=parts[0], swizzle=swz, raster=parts[2]))
        for cfg, swz, ras in extra:
            cands[f"mkernel@{cfg}/s{swz}/{ras}"] = (lambda cfg=cfg, swz=swz, ras=ras: mkernel.gemm(
                a, b, config=cfg, swizzle=swz, raster=ras))
        res = sustained(cands, 2.0 * m * n * k, args.window, args.rounds, label=f"M,N,K={spec}",
                        anchor="cublas")
        rows.append({"m": m, "n": n, "k": k, "dtype": "bf16", "plan": plan, "rel_err_vs_fp32": err,
                     **row_fields(res)})
    payload = {"bench": "gemm_power", "device": device_info(), "commit": commit(),
               "anchor": "cuBLAS: torch.matmul(a, b.T) (and F.linear(a, b) beside it)", "rows": rows}
    print(write_result("gemm_power", payload))


if __name__ == "__main__":
    main()
