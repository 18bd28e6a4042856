"""The grouped (MoE) GEMM against torch._grouped_mm in sustained windows beside the SM clock and the
board power (benchmarks/power_windows.py). bench_grouped_gemm.py's short interleaved samples run
partly above the clock a training step sees; session 52 found the dense engine's plans ranking
differently at the H100's 700 W cap than near the boost clock.

ANCHORS.md's case, as in bench_grouped_gemm.py: 32 experts, 32768 tokens, H = 7168 (K), F = 2048 (N),
bf16, uniform and skewed routing, the packed layout (rows of all experts back to back, int32 offsets).
Candidates: `grouped_mm` (torch._grouped_mm, the anchor), `mkernel` (gemm_grouped, the tuned plan)
and the packed kernel pinned to the plans named by --plans.

    python benchmarks/grouped_gemm_power.py [--window 1.5] [--rounds 3]
        [--plans coop_128x256_c2x1/s8/n,ping_128x128_c1x2/s8/n]
"""

from __future__ import annotations

import argparse
import sys

import torch

sys.path.insert(0, __file__.rsplit("/", 1)[0])
from common import commit, device_info, write_result  # noqa: E402
from bench_grouped_gemm import routing_counts  # noqa: E402
from gemm_power import parse_plans  # noqa: E402
from power_windows import row_fields, sustained  # noqa: E402

from mkernel.ops import gemm_grouped, gemm_grouped_plan  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--window", type=float, default=2.0, help="seconds per candidate window")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--plans", type=str, default="coop_128x256_c2x1/s8/n,ping_128x128_c1x2/s8/n",
                    help="the packed kernel pinned to these '<config>/s<swizzle>/<m|n>' plans, as columns")
    args = ap.parse_args()
    plans = parse_plans(args.plans)
    experts, tokens, h, f = 32, 32768, 7168, 2048
    torch.manual_seed(52)
    gen = torch.Generator(device="cuda").manual_seed(52)
    rows = []
    for kind in ("uniform", "skewed"):
        counts = routing_counts(kind, experts, tokens)
        x = torch.randn(tokens, h, device="cuda", dtype=torch.bfloat16, generator=gen)
        b = torch.randn(experts, f, h, device="cuda", dtype=torch.bfloat16, generator=gen)
        offs = torch.cumsum(counts, 0).to(torch.int32).cuda()
        bt = b.transpose(1, 2)  # [E, H, F], K-major: _grouped_mm's layout
        # The engine against the float32 product, expert by expert, before anything is timed.
        got = gemm_grouped(x, b, offs=offs).float()
        start = 0
        for e, n in enumerate(counts.tolist()):
            want = x[start:start + n].float() @ b[e].float().T
            err = ((got[start:start + n] - want).norm() / want.norm().clamp_min(1e-30)).item() if n else 0.0
            if not err < 1e-2:
                raise SystemExit(f"{kind}: expert {e}'s rows are off (relative error {err:.3g})")
            start += n
        plan = gemm_grouped_plan(x, b, offs)
        cands = {"mkernel": lambda: gemm_grouped(x, b, offs=offs),
                 "grouped_mm": lambda: torch._grouped_mm(x, bt, offs=offs)}
        for cfg, swz, ras in plans:
            cands[f"mkernel@{cfg}/s{swz}/{ras}"] = (lambda cfg=cfg, swz=swz, ras=ras: gemm_grouped(
                x, b, offs=offs, config=cfg, swizzle=swz, raster=ras))
        res = sustained(cands, 2.0 * tokens * h * f, args.window, args.rounds,
                        label=f"{kind} E={experts} T={tokens} H={h} F={f}", anchor="grouped_mm")
        rows.append({"routing": kind, "experts": experts, "tokens": tokens, "h": h, "f": f, "plan": plan,
                     "counts": counts.tolist(), **row_fields(res)})
    payload = {"bench": "grouped_gemm_power", "device": device_info(), "commit": commit(),
               "anchor": "torch._grouped_mm(x, b^T, offs) on the same packed rows", "rows": rows}
    print(write_result("grouped_gemm_power", payload))


if __name__ == "__main__":
    main()
