"""MoE dispatch + first GEMM and combine at world size 1 (one GPU, every expert local), side by
side in one run:

* ``mkernel``: ``moe_dispatch_gemm`` (device-side routing: a stable sort by expert, then the
  engine's packed grouped GEMM) and ``moe_combine`` (gather + fp32 weighted sum);
* ``torch``: the unfused path a user writes: ``argsort`` by expert, ``index_select`` of the
  rows, ``torch._grouped_mm`` on them; combine as ``index_select`` + weighted sum;
* ``compute``: ``torch._grouped_mm`` alone on rows already sorted (the ceiling: no routing).

Shapes: ANCHORS.md's grouped case (32 experts, top-8, 4096 tokens -> 32768 rows, H=7168,
F=2048) and a Mixtral-like one (8 experts, top-2, 16384 tokens, H=4096, F=14336). TFLOP/s count
the routed rows' GEMM only. Multi-rank (MPS) figures need the W > 1 CUDA kernel (not landed).
JSON goes to benchmarks/results/ (and $OUT when set).
"""

from __future__ import annotations

import statistics
import sys

import torch

sys.path.insert(0, __file__.rsplit("/", 1)[0])
from common import commit, device_info, interleaved_ms, write_result  # noqa: E402

import mkernel  # noqa: E402
from mkernel import ops  # noqa: E402

SHAPES = [
    dict(name="anchor_e32_top8", experts=32, k=8, tokens=4096, h=7168, f=2048),
    dict(name="mixtral_e8_top2", experts=8, k=2, tokens=16384, h=4096, f=14336),
]


class _World1:
    handle, world_size = 0, 1


def torch_dispatch(x, idx, w1_t, e):
    flat = idx.reshape(-1)
    order = torch.argsort(flat, stable=True)
    rows = x.index_select(0, order // idx.shape[1])
    counts = torch.bincount(flat, minlength=e)
    offs = torch.cumsum(counts, 0, dtype=torch.int32)
    return torch._grouped_mm(rows, w1_t, offs=offs), order


def torch_combine(y, order, w):
    t, k = w.shape
    inv = torch.empty_like(order)
    inv[order] = torch.arange(order.numel(), device=order.device)
    g = y.index_select(0, inv).view(t, k, -1).float()
    return (g * w.unsqueeze(-1)).sum(1).to(y.dtype)


def main() -> int:
    dt = torch.bfloat16
    g = _World1()
    rows_out = []
    for s in SHAPES:
        e, k, t, h, f = s["experts"], s["k"], s["tokens"], s["h"], s["f"]
        gen = torch.Generator(device="cuda").manual_seed(0)
        x = torch.randn(t, h, device="cuda", dtype=dt, generator=gen)
        w1 = torch.randn(e, f, h, device="cuda", dtype=dt, generator=gen) / h ** 0.5
        w1_t = w1.transpose(1, 2)
        idx = torch.rand(t, e, device="cuda", generator=gen).topk(k, dim=1).indices
        w = torch.rand(t, k, device="cuda", generator=gen)
        res = ops.moe_dispatch_gemm(x, idx, w1, num_experts=e, group=g)  # tunes the packed plan
        ref, order = torch_dispatch(x, idx, w1_t, e)
        err = ((res.out.float() - ref.float()).norm() / ref.float().norm()).item()
        y = res.out
        comb = ops.moe_combine(y, res.handle, w, group=g)
        comb_ref = torch_combine(ref, order, w)
        err_c = ((comb.float() - comb_ref.float()).norm() / comb_ref.float().norm()).item()
        sorted_rows = x.index_select(0, order // k)
        offs = res.offs
        flops = 2.0 * t * k * h * f
        cands = {
            "mkernel_dispatch_gemm": [lambda: ops.moe_dispatch_gemm(x, idx, w1, num_experts=e, group=g)],
            "torch_dispatch_gemm": [lambda: torch_dispatch(x, idx, w1_t, e)],
            "compute_grouped_mm": [lambda: torch._grouped_mm(sorted_rows, w1_t, offs=offs)],
            "mkernel_combine": [lambda: ops.moe_combine(y, res.handle, w, group=g)],
            "torch_combine": [lambda: torch_combine(ref, order, w)],
        }
        rounds = [interleaved_ms(cands, iters=10) for _ in range(2)]
        row = dict(s, rel_err_dispatch=err, rel_err_combine=err_c)
        for c in cands:
            med = statistics.median(r[c]["median_ms"] for r in rounds)
            row[c] = {"median_ms": med, "round_medians_ms": [r[c]["median_ms"] for r in rounds]}
            if "dispatch" in c or "compute" in c:
                row[c]["tflops"] = flops / med / 1e9
        row["ratio_vs_torch"] = row["torch_dispatch_gemm"]["median_ms"] / row["mkernel_dispatch_gemm"]["median_ms"]
        row["ratio_vs_compute"] = row["compute_grouped_mm"]["median_ms"] / row["mkernel_dispatch_gemm"]["median_ms"]
        row["combine_ratio_vs_torch"] = row["torch_combine"]["median_ms"] / row["mkernel_combine"]["median_ms"]
        print(f"{s['name']}: dispatch+gemm {row['mkernel_dispatch_gemm']['tflops']:.0f} TF/s "
              f"({row['ratio_vs_torch']:.3f}x torch, {row['ratio_vs_compute']:.3f}x compute alone "
              f"{row['compute_grouped_mm']['tflops']:.0f}); combine {row['mkernel_combine']['median_ms']:.3f} ms "
              f"({row['combine_ratio_vs_torch']:.3f}x torch); err {err:.2e}/{err_c:.2e}", flush=True)
        rows_out.append(row)
    payload = {"bench": "moe_world1", "commit": commit(), "device": device_info(), "rows": rows_out}
    path = write_result("moe", payload)
    print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
