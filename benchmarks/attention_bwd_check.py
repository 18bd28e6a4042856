"""The native attention backward on its own: a ladder of small cases (one key block, ragged,
causal, GQA, s != s_kv) with the relative error of dq/dk/dv against the fp64 math backward
(to localize a bug: which gradient, which feature), then backward-only timing of the native
kernels vs torch's cuDNN and FA2 backward kernels fed with the same out/lse (issue 13's target:
backward >= 1.0x the best SDPA backend).

    python benchmarks/attention_bwd_check.py [--seqs 4096,8192] [--iters 10]
        [--kernels wgmma,wgmma_bulk_dq,wgmma_ws,wgmma_ws_dqwarp,mma_sync] [--ring 2,4]

--kernels: the native backward's main kernels (MKERNEL_ATTN_BWD_KERNEL), each checked on the
ladder and timed as a column native_<kernel>; a kernel that fails its ladder is left out of the
timing. One line per case: ``CHECK {...}`` (with, for a failing gradient, where its error sits:
the worst query row / key, and the share of dK/dV's error on each warpgroup's 64 keys of a
128-key block), one per timing row: ``BWD {...}``, one per ring size (--ring: the ring
backward's compute for one rank, per-block calls vs the native ring mode): ``RING {...}``;
JSON under benchmarks/results/attention_bwd_native_*.json.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

import torch

sys.path.insert(0, __file__.rsplit("/", 1)[0])
from common import add_timing, commit, device_info, interleaved_ms, write_result  # noqa: E402

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


def where_wrong(name: str, g: torch.Tensor, r: torch.Tensor) -> dict:
    """Where a gradient's error sits: the worst row (query for dq, key for dk/dv) and, for dk/dv,
    the share of the error on keys 64-127 of each 128-key block (the wgmma kernels' second
    warpgroup)."""
    err = (g.double() - r).pow(2).sum(dim=(0, 2, 3))  # per sequence row
    out = {f"worst_row_{name}": int(err.argmax().item())}
    if name in ("dk", "dv"):
        rows = torch.arange(err.numel(), device=err.device)
        out[f"share_wg1_{name}"] = (err[(rows % 128) >= 64].sum() / err.sum().clamp_min(1e-300)).item()
    return out


def set_kernel(kernel: str) -> None:
    """The native backward's main kernel for the calls that follow (MKERNEL_ATTN_BWD_KERNEL, read
    at each call)."""
    os.environ["MKERNEL_ATTN_BWD_KERNEL"] = kernel


def check(dtype: torch.dtype, kernel: str) -> list[dict]:
    set_kernel(kernel)
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
        row = {"kernel": kernel, "b": b, "s": s, "s_kv": s_kv, "h": h, "h_kv": h_kv, "d": d,
               "causal": causal, "dtype": str(dtype).split(".")[-1]}
        for name, g, r in zip(("dq", "dk", "dv"), got, ref):
            row[f"rel_{name}"] = ((g.double() - r).norm() / r.norm().clamp_min(1e-30)).item()
            row[f"nan_{name}"] = int((~torch.isfinite(g)).sum().item())
            if row[f"rel_{name}"] >= 2e-2 or row[f"nan_{name}"]:
                row.update(where_wrong(name, g.nan_to_num(1e30), r))
        row["ok"] = all(row[f"rel_{n}"] < 2e-2 and row[f"nan_{n}"] == 0 for n in ("dq", "dk", "dv"))
        print("CHECK " + json.dumps(row), flush=True)
        rows.append(row)
    return rows


def timing(seqs: list[int], iters: int, kernels: list[str]) -> list[dict]:
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
            def native(a, kernel):
                def run():
                    set_kernel(kernel)
                    return torch.ops.mkernel.attention_backward.default(*a, causal, scale)
                return run
            cands = {f"native_{kernel}": [native(a, kernel) for a in sets] for kernel in kernels}
            cands["cudnn"] = [lambda a=a: _attention_backward_cudnn(*a, causal, scale) for a in sets]
            cands["flash"] = [lambda a=a: _attention_backward_flash(*a, causal, scale) for a in sets]
            times = interleaved_ms(cands, warmup=3, iters=iters)
            f = 2.5 * 4.0 * b * h * s * s * d / (2 if causal else 1)  # backward = 2.5x forward
            row = {"b": b, "s": s, "h": h, "d": d, "causal": causal, "what": "backward only"}
            add_timing(row, times, f)
            best = min(row["cudnn_ms"], row["flash_ms"])
            for kernel in kernels:
                row[f"native_{kernel}_vs_best_sdpa"] = best / row[f"native_{kernel}_ms"]
            print("BWD " + json.dumps(row), flush=True)
            rows.append(row)
            del sets
    return rows


def ring_timing(worlds: list[int], s: int, iters: int, kernels: list[str]) -> list[dict]:
    """The ring backward's compute for one rank of an emulated ring (one process, the K/V of
    every rank already gathered, as mkernel._ring_backward has them before its reduce-scatter):
    the per-block calls (ring_steps, each block sliced; the default backward kernels: cuDNN's,
    FA2's for the causal blocks with s != s_kv) against one launch of the native backward's ring
    mode (attention_backward_ring) per kernel. Causal zigzag, b = 1, h = 32, h_kv = 8, d = 128."""
    from mkernel._ring_backward import ring_steps
    from mkernel.ops import _attention_backward

    rows = []
    b, h, h_kv, d, rank = 1, 32, 8, 128, 1
    scale = d ** -0.5
    for world in worlds:
        q, dout = (torch.randn(b, s, h, d, device="cuda", dtype=torch.bfloat16) for _ in range(2))
        k_all, v_all = (torch.randn(world * b, s, h_kv, d, device="cuda", dtype=torch.bfloat16)
                        for _ in range(2))
        out, lse = mkernel.attention(q, k_all[:b], v_all[:b], causal=True)  # stand-ins: timing only

        def per_block():
            dq = torch.zeros(q.shape, dtype=torch.float32, device=q.device)
            dk_all = torch.zeros(k_all.shape, dtype=torch.float32, device=q.device)
            dv_all = torch.zeros_like(dk_all)
            for src, qr, kr, causal in ring_steps(rank, world, True, s):
                blk = slice(src * b, (src + 1) * b)
                dq_p, dk_p, dv_p = _attention_backward(
                    dout[:, qr].contiguous(), q[:, qr].contiguous(), k_all[blk, kr].contiguous(),
                    v_all[blk, kr].contiguous(), out[:, qr].contiguous(),
                    lse[:, :, qr].contiguous(), causal, scale)
                dq[:, qr] += dq_p.float()
                dk_all[blk, kr] += dk_p.float()
                dv_all[blk, kr] += dv_p.float()
            return dq, dk_all, dv_all

        def ring_mode(kernel):
            def run():
                set_kernel(kernel)
                return torch.ops.mkernel.attention_backward_ring.default(
                    dout, q, k_all, v_all, out, lse, True, scale, world, rank)
            return run
        cands = {"per_block": [per_block]}
        cands.update({f"ring_{kernel}": [ring_mode(kernel)] for kernel in kernels
                      if kernel != "mma_sync"})
        times = interleaved_ms(cands, warmup=3, iters=iters)
        f = 2.5 * 4.0 * b * h * s * (world * s) * d / 2  # the causal zigzag's half of W shards
        row = {"world": world, "b": b, "s_shard": s, "h": h, "h_kv": h_kv, "d": d, "causal": True,
               "what": "ring backward compute, one rank, K/V gathered"}
        add_timing(row, times, f)
        print("RING " + json.dumps(row), flush=True)
        rows.append(row)
    return rows


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seqs", type=str, default="4096,8192")
    ap.add_argument("--iters", type=int, default=10)
    ap.add_argument("--kernels", type=str,
                    default="wgmma,wgmma_bulk_dq,wgmma_ws,wgmma_ws_dqwarp,mma_sync",
                    help="MKERNEL_ATTN_BWD_KERNEL values, checked then timed")
    ap.add_argument("--ring", type=str, default="2,4",
                    help="ring sizes for the ring backward's timing (one rank, 4096 rows a shard); "
                         "empty: none")
    args = ap.parse_args()
    kernels = [k for k in args.kernels.split(",") if k]
    checks = [row for kernel in kernels for dtype in (torch.bfloat16, torch.float16)
              for row in check(dtype, kernel)]
    passed = [k for k in kernels if all(r["ok"] for r in checks if r["kernel"] == k)]
    if passed != kernels:
        print(f"CHECK FAILED for {sorted(set(kernels) - set(passed))}: not timed", flush=True)
    rows = timing([int(x) for x in args.seqs.split(",") if x], args.iters, passed) if passed else []
    worlds = [int(x) for x in args.ring.split(",") if x]
    ring_rows = ring_timing(worlds, 4096, args.iters, passed) if passed and worlds else []
    payload = {"bench": "attention_bwd_native", "device": device_info(), "commit": commit(),
               "method": f"interleaved CUDA events, 3 warm-up, median of {args.iters}, 2 input sets",
               "checks": checks, "rows": rows, "ring_rows": ring_rows}
    print(write_result("attention_bwd_native", payload))
    if passed != kernels:
        sys.exit(1)


if __name__ == "__main__":
    main()
