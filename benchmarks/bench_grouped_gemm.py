"""Grouped (MoE) GEMM: mkernel.gemm_grouped vs torch._grouped_mm, same run.

ANCHORS.md's case: 32 experts, 32768 tokens (uniform: 1024 per expert),
H=7168 (K), F=2048 (N), bf16; plus a skewed routing (counts drawn at random,
same total). Both sides take the same packed rows and offsets (mkernel's
packed layout); the capacity-padded variant (device-side counts) is timed
too, for reference. Interleaved timing (see common.interleaved_ms), several
rounds. TFLOP/s count valid rows only.
"""

from __future__ import annotations

import sys

import torch

sys.path.insert(0, __file__.rsplit("/", 1)[0])
import statistics  # noqa: E402
import time  # noqa: E402

from common import commit, device_info, interleaved_ms, write_result  # noqa: E402

from mkernel.ops import gemm_grouped, gemm_grouped_plan  # noqa: E402


def routing_counts(kind: str, experts: int, tokens: int) -> torch.Tensor:
    """Rows per expert: uniform, or Dirichlet(2) shares of the same total ("skewed")."""
    if kind == "uniform":
        return torch.full((experts,), tokens // experts, dtype=torch.int32)
    w = torch.distributions.Dirichlet(torch.full((experts,), 2.0)).sample()
    counts = (w * tokens).floor().to(torch.int32)
    counts[0] += tokens - int(counts.sum())
    return counts


def main() -> int:
    e, tokens, h, f = 32, 32768, 7168, 2048
    dt = torch.bfloat16
    rows = []
    for routing in ("uniform", "skewed"):
        counts = routing_counts(routing, e, tokens)
        cap = int(counts.max())
        cap = (cap + 127) // 128 * 128
        a = torch.randn(e, cap, h, device="cuda", dtype=dt)
        b = torch.randn(e, f, h, device="cuda", dtype=dt)
        x = torch.cat([a[i, :int(counts[i])] for i in range(e)])  # ragged [T, H] for _grouped_mm
        offs = torch.cumsum(counts, 0).to(torch.int32).cuda()
        bt = b.transpose(1, 2)  # [E, H, F] view, K-major
        cd = counts.cuda()
        flops = 2.0 * tokens * h * f
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        plan = gemm_grouped_plan(x, b, offs)  # tunes (E, T, N, K) on this routing: its first-call cost
        torch.cuda.synchronize()
        first_s = time.perf_counter() - t0
        cands = {"grouped_mm": [lambda: torch._grouped_mm(x, bt, offs=offs)],
                 "mkernel_packed": [lambda: gemm_grouped(x, b, offs=offs)],
                 "mkernel_padded": [lambda: gemm_grouped(a, b, cd)]}
        for cfg, swz, ras in (("coop_128x256_c2x1", 8, "n"), ("ping_128x128_c1x2", 8, "n"),
                              ("ping_128x128_c1x2", 1, "m")):  # the packed kernel's plans, fixed
            cands[f"packed:{cfg}/s{swz}/{ras}"] = [
                lambda cfg=cfg, swz=swz, ras=ras: gemm_grouped(x, b, offs=offs, config=cfg, swizzle=swz, raster=ras)]
        rounds = [interleaved_ms(cands, iters=20) for _ in range(3)]
        row = {"routing": routing, "experts": e, "tokens": tokens, "h": h, "f": f, "capacity": cap,
               "plan": plan, "autotune_first_call_s": first_s, "counts": counts.tolist()}
        for c in cands:
            med = statistics.median(r[c]["median_ms"] for r in rounds)
            row[c] = {"median_ms": med, "round_medians_ms": [r[c]["median_ms"] for r in rounds],
                      "tflops": flops / med / 1e9}
        row["ratio"] = row["grouped_mm"]["median_ms"] / row["mkernel_packed"]["median_ms"]
        row["ratio_padded"] = row["grouped_mm"]["median_ms"] / row["mkernel_padded"]["median_ms"]
        print(f"{routing:<8} _grouped_mm {row['grouped_mm']['tflops']:6.1f} TF/s  "
              f"packed {row['mkernel_packed']['tflops']:6.1f} TF/s ({row['ratio']:.3f}x)  "
              f"padded(cap {cap}) {row['mkernel_padded']['tflops']:6.1f} TF/s ({row['ratio_padded']:.3f}x)  "
              f"plan {plan} (tuned in {first_s:.2f} s)", flush=True)
        for c in cands:
            if c.startswith("packed:"):
                print(f"         {c:<34} {row[c]['tflops']:6.1f} TF/s "
                      f"({row['grouped_mm']['median_ms'] / row[c]['median_ms']:.3f}x)", flush=True)
        rows.append(row)
    path = write_result("grouped_gemm", {"benchmark": "grouped_gemm", "anchor": "torch._grouped_mm (same run)",
                                         "dtype": "bf16", "commit": commit(), "device": device_info(),
                                         "results": rows})
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
