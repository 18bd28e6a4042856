"""gemm15's verdict lines from bench_gemm.py --decode JSONs (graph-replay figures, the decision
figures of benchmarks/NOTES.md "Small M, gemm15").

    python benchmarks/gemm15_verdict.py --passed 24,25,26,27,28,29 RESULT.json [RESULT.json ...]

Per case (dtype, M x N x K) one line: cuBLAS (the faster of matmul / F.linear), today's pick (the
fastest of swap:1 / swap:10 / swap:23, the default tuner's M = 333 picks since s14run1), every
timed gemm15 variant (with its time over its 176-wide sibling's: 24/1, 25/22, 26/0, 27/23, and the
controls 29/1 and 30/23: the register-stored epilogue's cost; the hinted 31/25 and 32/27), auto
(run with MKERNEL_GEMM_SMALLM_S15=1) and its plan. Then, per weight shape at M = 333, the rule:
a variant whose tests passed becomes a default candidate there only if its graph time is
<= 0.99 x the pick in bf16 AND fp16; and whether the best such variant is >= 1.0x cuBLAS in both
(issue 12 item 3 at 333 tokens). A variant not in --passed is reported, never flipped.
"""

from __future__ import annotations

import argparse
import json
import sys

NEW = [24, 25, 26, 27, 28, 29, 30, 31, 32]
NAMES = {24: "swap_128x168", 25: "swap_128x168_c1x2", 26: "swap_128x168_c2x1", 27: "swap_64x168_c4x2",
         28: "swap_64x168_c1x2", 29: "swap_128x176_ds", 30: "swap_64x176_c4x2_ds",
         31: "swap_128x168_c1x2_h", 32: "swap_64x168_c4x2_h"}
FLIP_AT = 0.99  # graph time <= 0.99 x the pick, both dtypes
PICKS = ("swap:1", "swap:10", "swap:23")  # the default tuner's candidates that win at 333 (s14run1)
SIBLING = {24: 1, 25: 22, 26: 0, 27: 23, 28: 23, 29: 1, 30: 23, 31: 25, 32: 27}  # the same structure with 176-wide tiles


def num(x):
    return x if isinstance(x, (int, float)) else None


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--passed", default="", help="variants whose GPU tests passed, e.g. 24,25")
    ap.add_argument("json", nargs="+")
    args = ap.parse_args()
    passed = {int(v) for v in args.passed.split(",") if v}
    rows = []
    for path in args.json:
        try:
            rows += json.load(open(path))["results"]
        except (OSError, ValueError, KeyError) as e:
            print(f"verdict: cannot read {path}: {e}")
    if not rows:
        print("verdict: no rows (bench did not run or wrote nothing)")
        return 1
    at333 = {}  # (n, k) -> dtype -> {variant: ratio to pick, "cublas_ratio": {variant: ..}}
    for r in rows:
        g = r.get("graph_us") or {}
        case = f"{r['dtype']} {r['m']}x{r['n']}x{r['k']}"
        cub = [v for v in (num(g.get("cublas")), num(g.get("linear"))) if v]
        if not cub:
            print(f"verdict {case}: no graph-replay figures (not timed by graph replay)")
            continue
        anchor = min(cub)
        picks = {c: num(g.get(c)) for c in PICKS if num(g.get(c))}
        pick_name = min(picks, key=picks.get) if picks else None
        pick = picks.get(pick_name) if pick_name else None
        news = {v: num(g.get(f"swap:{v}")) for v in NEW if num(g.get(f"swap:{v}"))}
        parts = [f"cuBLAS {anchor:.2f}"]
        parts.append(f"pick {pick_name} {pick:.2f} ({anchor / pick:.3f}x cuBLAS)" if pick else "pick: not timed")
        for v, t in sorted(news.items(), key=lambda kv: kv[1]):
            rel = f" {t / pick:.3f}x pick" if pick else ""
            sib = num(g.get(f"swap:{SIBLING[v]}"))
            rel += f" {t / sib:.3f}x swap:{SIBLING[v]}" if sib else ""
            tag = "" if v in passed else " [tests not passed]"
            parts.append(f"swap:{v} {t:.2f}{rel} {anchor / t:.3f}x cuBLAS{tag}")
        auto = num(g.get("auto"))
        if auto:
            parts.append(f"auto [{r.get('plan', '?')}] {auto:.2f} = {anchor / auto:.3f}x cuBLAS")
        errs = r.get("errors") or {}
        if errs:
            parts.append(f"errors {sorted(errs)}")
        print(f"verdict {case}: " + " | ".join(parts), flush=True)
        if r["m"] == 333 and pick:
            d = at333.setdefault((r["n"], r["k"]), {})
            d[r["dtype"]] = {"pick": pick, "anchor": anchor, "news": news, "auto": auto}
    for (n, k), by_dtype in sorted(at333.items()):
        shape = f"333x{n}x{k}"
        if not {"bf16", "fp16"} <= set(by_dtype):
            print(f"RULE {shape}: only {sorted(by_dtype)} timed -> no flip (the rule needs bf16 and fp16)")
            continue
        flips = []
        for v in NEW:
            ratios = [by_dtype[dt]["news"].get(v, float("inf")) / by_dtype[dt]["pick"] for dt in ("bf16", "fp16")]
            ok = v in passed and all(x <= FLIP_AT for x in ratios)
            shown = " / ".join(f"{x:.3f}" if x != float("inf") else "n/a" for x in ratios)
            print(f"RULE {shape} swap:{v} {NAMES[v]}: time / pick bf16 / fp16 = {shown}; tests "
                  f"{'passed' if v in passed else 'NOT passed'} -> {'FLIP (default candidate here)' if ok else 'stays opt-in'}")
            if ok:
                flips.append(v)
        if flips:
            best = min(flips, key=lambda v: max(by_dtype[dt]["news"][v] / by_dtype[dt]["anchor"] for dt in ("bf16", "fp16")))
            vs = [by_dtype[dt]["anchor"] / by_dtype[dt]["news"][best] for dt in ("bf16", "fp16")]
            met = all(x >= 1.0 for x in vs)
            print(f"ISSUE12 333 {shape}: best flipped swap:{best} = {vs[0]:.3f}x / {vs[1]:.3f}x cuBLAS (bf16 / fp16) "
                  f"-> item 3 at 333 {'MET by the kernel (auto must show it next run)' if met else 'not met'}")
        else:
            autos = [by_dtype[dt]["anchor"] / by_dtype[dt]["auto"] for dt in ("bf16", "fp16") if by_dtype[dt]["auto"]]
            print(f"ISSUE12 333 {shape}: no flip; auto (S15 on) " + " / ".join(f"{x:.3f}x" for x in autos)
                  + " cuBLAS -> not met by gemm15")
    return 0


if __name__ == "__main__":
    sys.exit(main())
