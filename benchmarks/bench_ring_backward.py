"""mkernel.ring_attention forward + backward on the GPU, W rank processes sharing one GPU under MPS
(each gets CUDA_MPS_ACTIVE_THREAD_PERCENTAGE = 100/W), the backward's kernel choices side by side
in one run. The ring backward gathers K/V, runs the attention backward per key block with the
forward's LSE, sums dQ locally and reduce-scatters dK/dV in fp32 (python/mkernel/_ring_backward.py).
Columns (each the forward + backward of the same shards, loss = (out * dout).sum()):

  auto     the default (MKERNEL_ATTN_BWD unset): the native ring mode after the all-gather on its
           rows (_ring_backward.native_ring_wins: d = 128 from 1024-query shards, d = 64 causal
           from 4096; sessions 40-41), with dK/dV travelling on one node,
           else the torch column's calls;
  torch    the grouped calls (MKERNEL_ATTN_BWD=torch): per group of blocks the kernel
           mkernel.ops._attention_backward_choice picks — cuDNN's SDPA backward where it applies
           (every block of the zigzag split is square-causal or non-causal), else
           FlashAttention-2's; auto before session 40;
  blocks   torch with one call per (query, key) block (MKERNEL_RING_BWD_GROUPS=0): the ring
           backward before session 32 (the grouped calls take the blocks sharing query rows and
           mask in at most three calls over concatenated keys);
  fa2      every block through FA2's backward kernel (MKERNEL_ATTN_BWD=flash): the per-block path
           before session 31, the ring-flash-attention recipe's backward;
  native   the fused ring backward (MKERNEL_ATTN_BWD=native, MKERNEL_RING_BWD_ARRIVAL=1,
           opt-in): the engine's native backward in its ring mode, every source's blocks in one
           launch consuming the K/V shards as the ring's send kernel delivers them, dK/dV
           travelling back to their owners inside it (session 41);
  native_scatter  the same launch on arrival with the fp32 dK/dV partials reduce-scattered after
           it (MKERNEL_RING_BWD_TRAVEL=0; session 40's arrival column);
  native_gather  the launch after an all-gather of the shards, then the reduce-scatter
           (MKERNEL_RING_BWD_ARRIVAL=0, MKERNEL_RING_BWD_TRAVEL=0: auto's path on its rows in
           session 40);
  native_gt  the launch after an all-gather with dK/dV travelling (MKERNEL_RING_BWD_ARRIVAL=0,
           MKERNEL_RING_BWD_TRAVEL=1; session 41);
  fwd      the forward alone (the fused ring), for the backward's share.

Timing: CUDA events, the candidates interleaved iteration by iteration (the order rotates alike on
every rank; the ops' collectives keep the ranks in step), median over --iters; the figure per case
is the slowest rank's median. Writes JSON under results/ (commit from MKERNEL_COMMIT).

    python benchmarks/bench_ring_backward.py [--world 2] [--iters 10] [--shapes a,b] [--columns a,b]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
sys.path.insert(0, str(ROOT))

# (name, b, local s, h, h_kv, d): bench_ring_attention's seed-scaled MHA shape and its GQA one.
SHAPES = [
    ("mha_b4_h16", 4, 4096, 16, 16, 128),
    ("gqa_b1_h32_kv8", 1, 8192, 32, 8, 128),
    # off auto's native ring rows (session 40): d = 64, and shorter shards
    ("mha_b4_h16_d64", 4, 4096, 16, 16, 64),
    ("gqa_b1_h32_kv8_d64", 1, 8192, 32, 8, 64),
    ("mha_b4_h16_s2048", 4, 2048, 16, 16, 128),
    ("mha_b4_h16_s1024", 4, 1024, 16, 16, 128),
]
# column: (MKERNEL_ATTN_BWD, MKERNEL_RING_BWD_GROUPS, MKERNEL_RING_BWD_ARRIVAL,
# MKERNEL_RING_BWD_TRAVEL)
CANDIDATES = {"auto": ("", "1", "", ""), "torch": ("torch", "1", "", ""),
              "blocks": ("torch", "0", "", ""), "fa2": ("flash", "1", "", ""),
              "native": ("native", "1", "1", "1"), "native_scatter": ("native", "1", "1", "0"),
              "native_gather": ("native", "1", "0", "0"), "native_gt": ("native", "1", "0", "1")}
KNOBS = ("MKERNEL_ATTN_BWD", "MKERNEL_RING_BWD_GROUPS", "MKERNEL_RING_BWD_ARRIVAL",
         "MKERNEL_RING_BWD_TRAVEL")
# Ratios (numerator column / denominator column: > 1 means the denominator's path is faster).
RATIOS = {"groups_vs_blocks": ("blocks", "torch"), "torch_vs_fa2": ("fa2", "torch"),
          "native_vs_torch": ("torch", "native"), "auto_vs_torch": ("torch", "auto"),
          "gather_travel_vs_torch": ("torch", "native_gt"),
          "arrival_vs_gather": ("native_gather", "native_scatter"),
          "travel_vs_scatter": ("native_scatter", "native"),
          "gather_travel_vs_scatter": ("native_gather", "native_gt"),
          "fused_vs_gather": ("native_gather", "native"),
          "fused_vs_gather_travel": ("native_gt", "native")}


def rank_main() -> None:
    import torch
    import torch.distributed as dist

    import mkernel
    from common import init_rank, interleaved_ms

    ctx = init_rank()
    world, rank = ctx.world_size, ctx.rank
    iters = int(os.environ["BENCH_ITERS"])
    pick = os.environ.get("BENCH_SHAPES")
    columns = [c for c in os.environ.get("BENCH_COLUMNS", "").split(",") if c] or list(CANDIDATES)
    for name, b, s, h, h_kv, d in SHAPES:
        if pick and name not in pick.split(","):
            continue
        for causal in (False, True):
            sets = []
            for _ in range(2):
                q, k, v = (torch.randn(b, s, hh, d, device="cuda", dtype=torch.bfloat16,
                                       requires_grad=True) for hh in (h, h_kv, h_kv))
                sets.append((q, k, v, torch.randn(b, s, h, d, device="cuda", dtype=torch.bfloat16)))

            def fwd_bwd(mode: tuple[str, ...]):
                def run(i: int):
                    q, k, v, dout = sets[i % 2]
                    os.environ.update(zip(KNOBS, mode))  # read at each backward call
                    try:
                        out, _ = mkernel.ring_attention(q, k, v, causal=causal, group=ctx)
                        return torch.autograd.grad(out, (q, k, v), dout)
                    finally:
                        for knob in KNOBS:
                            os.environ.pop(knob, None)
                return run

            def fwd(i: int):
                q, k, v, _ = sets[i % 2]
                with torch.no_grad():
                    return mkernel.ring_attention(q, k, v, causal=causal, group=ctx)

            # interleaved_ms calls each candidate's fns in turn with no argument: one per input set.
            cands = {col: [lambda i=i, f=fwd_bwd(CANDIDATES[col]): f(i) for i in range(2)]
                     for col in columns}
            cands["fwd"] = [lambda i=i: fwd(i) for i in range(2)]
            times = interleaved_ms(cands, warmup=3, iters=iters)
            row = {"shape": name, "b": b, "s_local": s, "h": h, "h_kv": h_kv, "d": d, "causal": causal,
                   "world": world, "rank": rank}
            row.update({f"{col}_ms": t["median_ms"] for col, t in times.items()})
            gathered = [None] * world
            dist.all_gather_object(gathered, row)
            if rank == 0:
                slow = {col: max(r[f"{col}_ms"] for r in gathered) for col in cands}
                res = {k: row[k] for k in ("shape", "b", "s_local", "h", "h_kv", "d", "causal", "world")}
                res.update({f"{col}_ms": ms for col, ms in slow.items()})
                res["per_rank_ms"] = {col: [r[f"{col}_ms"] for r in gathered] for col in cands}
                res.update({ratio: slow[a] / slow[b] for ratio, (a, b) in RATIOS.items()
                            if a in slow and b in slow})
                print("RESULT " + json.dumps(res), flush=True)
    dist.barrier()


RANK_CODE = f"""
import sys
sys.path.insert(0, {str(ROOT / 'benchmarks')!r})
from bench_ring_backward import rank_main
rank_main()
"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--world", type=int, default=2)
    ap.add_argument("--iters", type=int, default=10)
    ap.add_argument("--shapes", default="", help="comma-separated shape names (default: all)")
    ap.add_argument("--columns", default="", help="comma-separated columns (default: all)")
    ap.add_argument("--timeout", type=float, default=300.0)
    args = ap.parse_args()

    from common import commit, device_info, start_mps, write_result  # noqa: E402
    from tests.launch import run_ranks  # noqa: E402

    import torch

    per_gpu = torch.cuda.device_count() >= args.world
    env, stop = ({}, lambda: None) if per_gpu else start_mps("bench_ring_backward")
    share = {} if per_gpu else {"CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": str(100 // args.world)}
    rows, failed = [], []
    try:
        res = run_ranks(RANK_CODE, args.world, timeout=args.timeout, env=dict(
            env, **share, NCCL_NVLS_ENABLE="0", MKERNEL_OP_TIMEOUT="20",
            BENCH_ITERS=str(args.iters), BENCH_SHAPES=args.shapes, BENCH_COLUMNS=args.columns))
        failed = [f"rank {r.rank} failed (rc {r.returncode}):\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}"
                  for r in res if r.returncode != 0]
        for r in res:
            rows += [json.loads(line[7:]) for line in r.stdout.splitlines() if line.startswith("RESULT ")]
    finally:
        stop()
    for f in failed:
        print(f, file=sys.stderr)
    cols = [c for c in list(CANDIDATES) + ["fwd"] if rows and f"{c}_ms" in rows[0]]
    ratios = [r for r in RATIOS if rows and r in rows[0]]
    print(f"{'shape':<20} {'causal':>6} " + " ".join(f"{c[:9]:>9}" for c in cols) + " " +
          " ".join(f"{r[:17]:>17}" for r in ratios) + "   (ms, fwd+bwd, slowest rank)")
    for r in rows:
        print(f"{r['shape']:<20} {str(r['causal']):>6} " +
              " ".join(f"{r[f'{c}_ms']:>9.3f}" for c in cols) + " " +
              " ".join(f"{r[x]:>17.3f}" for x in ratios))
    payload = {"benchmark": "ring_attention_backward", "commit": commit(), "device": device_info(),
               "mps": not per_gpu, "world": args.world, "iters": args.iters,
               "method": "interleaved CUDA events, 3 warm-up, median of iters, 2 rotated input sets, "
                         "slowest rank", "columns": {k: " ".join(f"{n}={x or '(unset)'}" for n, x in zip(KNOBS, mode))
                                                     for k, mode in CANDIDATES.items()
                                                     if not rows or f"{k}_ms" in rows[0]},
               "rows": rows}
    print(write_result("ring_backward", payload))
    if failed or not rows:
        sys.exit(1)


if __name__ == "__main__":
    main()
