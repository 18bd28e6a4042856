"""The native attention backward on its own: a ladder of small cases (one key block, ragged,
causal, GQA, s != s_kv) with the relative error of dq/dk/dv against the fp64 math backward
(to localize a bug: which gradient, which feature), then backward-only timing of the native
kernels vs torch's cuDNN and FA2 backward kernels fed with the same out/lse (issue 13's target:
backward >= 1.0x the best SDPA backend).

    python benchmarks/attention_bwd_check.py [--seqs 4096,8192] [--iters 10]

One line per case: ``CHECK {...}``, one per timing row: ``BWD {...}``; JSON under
benchmarks/results/attention_bwd_native_*.json.
"""

from __future__ import annotations

import argparse
import json
import sys

import torch

sys.path.insert(0, __file__.rsplit("/", 1)[0])
from common import commit, device_info, interleaved_ms, write_result  # noqa: E402

import mkernel  # noqa: E402
from mkernel.ops import (_attention_backward_cudnn, _attention_backward_flash,  # noqa: E402
                         _attention_backward_math)

LADDER = [  # (b, s, s_kv, h, h_kv, d, causal)
    (1, 64, 64, 1, 1, 128, False),     # one query block, one key block
    (1, 128, 128, 1, 1, 128, False),   # 2 x 2 blocks
    (1, 100, 100, 1, 1, 128, False),   # ragged tail
    (1, 128, 128, 1, 1, 128, True),
    (1, 100, 37, 2, 2, 128, True),     # s > s_kv: rows that see no key
    (2, 256, 256, 4, 2, 128, True),    # GQA
    (1, 256, 256, 2, 2, 64, False),    # d = 64
    (2, 333, 517, 8, 1, 128, False),   # MQA, s < s_kv
]


def check(dtype: torch.dtype) -> list[dict]:
    rows = []
    for b, s, s_kv, h, h_kv, d, causal in LADDER:
        gen = torch.Generator(device="cuda").manual_seed(s + s_kv + h)
        q = torch.randn(b, s, h, d, device="cuda", dtype=dtype, generator=gen)
        k = torch.randn(b, s_kv, h_kv, d, device="cuda", dtype=dtype, generator=gen)
        v = torch.randn(b, s_kv, h_kv, d, device="cuda", dtype=dtype, generator=gen)
        dout = torch.randn(b, s, h, d, device="cuda", dtype=dtype, generator=gen)
        out, lse = mkernel.attention(q, k, v, causal=causal)
        scale = d ** -0.5
        got = torch.ops.mkernel.attention_backward.default(dout, q, k, v, out, lse, causal, scale)
        ref = _attention_backward_math(dout.double(), q.double(), k.double(), v.double(),
                                       out.double(), lse.double(), causal, scale)
        row = {"b": b, "s": s, "s_kv": s_kv, "h": h, "h_kv": h_kv, "d": d, "causal": causal,
               "dtype": str(dtype).split(".")[-1]}
        for name, g, r in zip(("dq", "dk", "dv"), got, ref):
            row[f"rel_{name}"] = ((g.double() - r).norm() / r.norm().clamp_min(1e-30)).item()
            row[f"nan_{name}"] = int((~torch.isfinite(g)).sum().item())
        row["ok"] = all(row[f"rel_{n}"] < 2e-2 and row[f"nan_{n}"] == 0 for n in ("dq", "dk", "dv"))
        print("CHECK " + json.dumps(row), flush=True)
        rows.append(row)
    return rows


def timing(seqs: list[int], iters: int) -> list[dict]:
    rows = []
    h, d = 32, 128
    for s in seqs:
        b = max(1, 16384 // s)
        for causal in (False, True):
            sets = []
            for _ in range(2):
                q, k, v, dout = (torch.randn(b, s, h, d, device="cuda", dtype=torch.bfloat16)
                                 for _ in range(4))
                out, lse = mkernel.attention(q, k, v, causal=causal)
                sets.append((dout, q, k, v, out, lse))
            scale = d ** -0.5
            cands = {
                "native": [lambda a=a: torch.ops.mkernel.attention_backward.default(*a, causal, scale)
                           for a in sets],
                "cudnn": [lambda a=a: _attention_backward_cudnn(*a, causal, scale) for a in sets],
                "flash": [lambda a=a: _attention_backward_flash(*a, causal, scale) for a in sets],
            }
            times = interleaved_ms(cands, warmup=3, iters=iters)
            f = 2.5 * 4.0 * b * h * s * s * d / (2 if causal else 1)  # backward = 2.5x forward
            row = {"b": b, "s": s, "h": h, "d": d, "causal": causal, "what": "backward only"}
            for name, t in times.items():
                row[f"{name}_ms"] = t["median_ms"]
                row[f"{name}_tflops"] = f / (t["median_ms"] * 1e-3) / 1e12
            row["native_vs_best_sdpa"] = min(row["cudnn_ms"], row["flash_ms"]) / row["native_ms"]
            print("BWD " + json.dumps(row), flush=True)
            rows.append(row)
            del sets
    return rows


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seqs", type=str, default="4096,8192")
    ap.add_argument("--iters", type=int, default=10)
    args = ap.parse_args()
    checks = check(torch.bfloat16) + check(torch.float16)
    if not all(r["ok"] for r in checks):
        print("CHECK FAILED: timing skipped", flush=True)
        sys.exit(1)
    rows = timing([int(x) for x in args.seqs.split(",") if x], args.iters)
    payload = {"bench": "attention_bwd_native", "device": device_info(), "commit": commit(),
               "method": f"interleaved CUDA events, 3 warm-up, median of {args.iters}, 2 input sets",
               "checks": checks, "rows": rows}
    print(write_result("attention_bwd_native", payload))


if __name__ == "__main__":
    main()
