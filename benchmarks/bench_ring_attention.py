"""mkernel.ring_attention on the GPU, W rank processes sharing one GPU under MPS (each gets
CUDA_MPS_ACTIVE_THREAD_PERCENTAGE = 100/W), side by side in one run with

  unfused   the unfused ring of the ring-flash-attention recipe without its overlap: the K/V
            shards gathered over the substrate's peer memory (mkernel.all_gather), then one
            SDPA call per source block (the flash backend, natural-log LSE; GQA by expanding
            k/v to h heads) and the fp32 merge of the partials in torch;
  pinned variants of mkernel.ring_attention (VARIANTS; --variants picks, default: DEFAULT):
  kernel    the send kernel (2 CTAs) instead of the forwarding inside the engine
            (MKERNEL_RING_SEND=kernel), tiles claimed;
  send4     the send kernel with 4 CTAs (MKERNEL_RING_SEND_CTAS=4), tiles claimed;
  static    the default send path with the static tile order (MKERNEL_RING_TILES=static);
  k-static  the send kernel and static tiles: session 8 run 1's default;
  engine    the forwarding inside the engine pinned (MKERNEL_RING_SEND=engine);
  grid48    the default with a 48-CTA engine grid (MKERNEL_RING_GRID=48): whether the ranks
            share SMs under MPS (session 8 run 2: no, ~66/48 slower at every shape);
  grid63    the default with a 63-CTA grid (s9run2: 1-7% slower than 66 at every shape);
  step      the per-step ring pinned (MKERNEL_RING_MODE=step);
  send1     the send kernel with 1 CTA; s-first: the engine started once the send CTAs run
            (MKERNEL_RING_SEND_FIRST=1);
  split     the default with the causal engine kernels' masked / visible block split
            (MKERNEL_RING_SPLIT_MASK=1); k-split: the same beside the send kernel;
  compute   mkernel.ring_attention's own per-step compute without communication — the same
            per-step engine calls (mkernel.attention on the local shard, with the same causal
            zigzag split) and the same fp32 merges (mkernel.ops.attention_merge_);
  ceiling   the compute-alone ceiling: one engine call over the whole sequence (W*s queries
            and keys, causal or not) on the rank's SMs, divided by W.

Causal shards are zigzag (rank r holds chunks r and 2W-1-r of 2W). Timing: CUDA events, the
candidates interleaved iteration by iteration (order alternating), ranks aligned by
dist.barrier and a tiny all_reduce right before each sample, median over --iters samples; the
figure per case is the slowest rank's median. TFLOP/s per rank count the causal work once
(half the non-causal FLOPs of the whole sequence, per rank). On one GPU all ranks share its
HBM and the "peer" copies are local: these are the op's costs at an MPS share, not NVLink
figures. Writes JSON under results/ (commit from MKERNEL_COMMIT).

    python benchmarks/bench_ring_attention.py [--world 2] [--iters 15] [--shapes a,b]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
sys.path.insert(0, str(ROOT))

# (name, b, local s, h, h_kv, d): the seed shape scaled to the run (B=4, H=16, d=128)
# and a Llama-style GQA shape (32 q heads, 8 kv heads).
# Pinned variants: (row key, column, env). Ranks pin alike.
VARIANTS = {
    "kernel": ("send_kernel", "kernel", {"MKERNEL_RING_SEND": "kernel"}),
    "send4": ("send4", "send4", {"MKERNEL_RING_SEND_CTAS": "4"}),
    "static": ("static", "static", {"MKERNEL_RING_TILES": "static"}),
    "k-static": ("kernel_static", "k-static", {"MKERNEL_RING_SEND": "kernel",
                                               "MKERNEL_RING_TILES": "static"}),
    "engine": ("send_engine", "s-engine", {"MKERNEL_RING_SEND": "engine"}),
    "grid48": ("grid48", "grid48", {"MKERNEL_RING_GRID": "48"}),
    # 63 per rank: at W = 2 under MPS 50 % two clients' one-CTA-per-SM grids reach 126 SMs
    # together (s8run2 probe: 66 + 60), so with 66 the later rank runs on 60 SMs the whole call.
    "grid63": ("grid63", "grid63", {"MKERNEL_RING_GRID": "63"}),
    "step": ("step", "step", {"MKERNEL_RING_MODE": "step"}),
    "send1": ("send1", "send1", {"MKERNEL_RING_SEND_CTAS": "1"}),
    "s-first": ("send_first", "s-first", {"MKERNEL_RING_SEND_FIRST": "1"}),
    # ring11 (opt-in, unmeasured): the causal engine kernels' masked (diagonal) and wholly
    # visible KV blocks in two loops; non-causal calls are unchanged by the knob.
    "split": ("split", "split", {"MKERNEL_RING_SPLIT_MASK": "1"}),
    "k-split": ("kernel_split", "k-split", {"MKERNEL_RING_SEND": "kernel",
                                            "MKERNEL_RING_SPLIT_MASK": "1"}),
}
DEFAULT = "kernel,send4,static,k-static"

SHAPES = [
    ("mha_b4_h16", 4, 4096, 16, 16, 128),
    ("gqa_b1_h32_kv8", 1, 8192, 32, 8, 128),
    ("mha_b4_h16_s12k", 4, 12288, 16, 16, 128),  # the seed's 12288 tokens per rank
]


def rank_main() -> None:
    import torch
    import torch.distributed as dist

    import mkernel
    from mkernel._ring_backward import ring_steps  # the CUDA ring's own work split
    from mkernel.ops import attention_merge_

    dist.init_process_group("gloo")
    local = int(os.environ.get("LOCAL_RANK", "0"))
    torch.cuda.set_device(local % torch.cuda.device_count())
    ctx = mkernel.init()
    world, rank = ctx.world_size, ctx.rank
    iters = int(os.environ["BENCH_ITERS"])
    dtype = torch.bfloat16
    gate = torch.zeros(world * 8, device="cuda", dtype=dtype)
    flash = torch.ops.aten._scaled_dot_product_flash_attention

    pick = os.environ.get("BENCH_SHAPES")  # comma-separated names; empty: all
    variants = [VARIANTS[v] for v in os.environ.get("BENCH_VARIANTS", DEFAULT).split(",") if v]
    for name, b, s, h, h_kv, d in SHAPES:
        if pick and name not in pick.split(","):
            continue
        for causal in (False, True):
            sets = [tuple(torch.randn(b, s, hh, d, device="cuda", dtype=dtype)
                          for hh in (h, h_kv, h_kv)) for _ in range(2)]
            steps = list(ring_steps(rank, world, causal, s))

            def fused(i):
                q, k, v = sets[i % 2]
                return mkernel.ring_attention(q, k, v, causal=causal, group=ctx)

            def compute(i):
                q, k, v = sets[i % 2]
                acc = torch.zeros(b, s, h, d, device="cuda", dtype=torch.float32)
                lse_acc = torch.full((b, h, s), float("-inf"), device="cuda")
                for _, qr, kr, cz in steps:
                    qs = q if qr.stop - qr.start == s else q[:, qr].contiguous()
                    ks = k if kr.stop - kr.start == s else k[:, kr].contiguous()
                    vs = v if kr.stop - kr.start == s else v[:, kr].contiguous()
                    out, lse = mkernel.attention(qs, ks, vs, causal=cz)
                    if qr.start == 0:
                        attention_merge_(acc, lse_acc, out, lse)
                    else:
                        _torch_merge(acc[:, qr], lse_acc[:, :, qr], out, lse)
                return acc.to(dtype), lse_acc

            def unfused(i):
                q, k, v = sets[i % 2]
                ks = mkernel.all_gather(k.transpose(0, 1).contiguous(), group=ctx)  # [W*s, b, ..]
                vs = mkernel.all_gather(v.transpose(0, 1).contiguous(), group=ctx)
                qt = q.transpose(1, 2)  # [b, h, s, d]
                acc = torch.zeros(b, h, s, d, device="cuda", dtype=torch.float32)
                lse_acc = torch.full((b, h, s), float("-inf"), device="cuda")
                for src, qr, kr, cz in steps:
                    kb = ks[src * s:(src + 1) * s][kr].permute(1, 2, 0, 3)  # [b, h_kv, rows, d]
                    vb = vs[src * s:(src + 1) * s][kr].permute(1, 2, 0, 3)
                    if h_kv != h:
                        kb = kb.repeat_interleave(h // h_kv, dim=1)
                        vb = vb.repeat_interleave(h // h_kv, dim=1)
                    res = flash(qt[:, :, qr], kb, vb, 0.0, cz, False)
                    out, lse = res[0], res[1][..., :qr.stop - qr.start]  # (unpadded)
                    la, oa = lse_acc[:, :, qr], acc[:, :, qr]
                    mx = torch.maximum(la, lse)
                    wa, wp = torch.exp(la - mx), torch.exp(lse - mx)
                    tot = wa + wp
                    oa.mul_((wa / tot).unsqueeze(-1)).add_(out.float() * (wp / tot).unsqueeze(-1))
                    la.copy_(mx + torch.log(tot))
                return acc.transpose(1, 2).to(dtype), lse_acc

            def pinned(env):  # the same op under knobs (every rank alike)
                def call(i):
                    os.environ.update(env)
                    try:
                        return fused(i)
                    finally:
                        for var in env:
                            del os.environ[var]
                return call

            cands = {"mkernel": fused, "unfused": unfused, "compute": compute}
            for key, _, env in variants:
                cands[key] = pinned(env)
            # The ceiling: the whole sequence's attention on this rank's SMs, divided by W (the
            # rank's share of the work, without communication or any ring overhead).
            full = [tuple(torch.cat([x] * world, dim=1) for x in st) for st in sets]
            cands["engine_full"] = lambda i: mkernel.attention(*full[i % 2], causal=causal)
            for i in range(3):  # warm-up (and symmetric-memory growth)
                for cname, c in cands.items():
                    c(i)
                    if i == 0:  # which candidate a failure happened in (the log survives)
                        torch.cuda.synchronize()
                        print(f"WARM {rank} {name} causal={causal} {cname} ok", flush=True)
            torch.cuda.synchronize()
            # The fused op agrees with the unfused ring (both attend the whole sequence; the
            # compute path attends the local shard W times by construction, so it cannot).
            got_out, _ = fused(0)
            unf_out, _ = unfused(0)
            agree = ((got_out.float() - unf_out.float()).norm() / unf_out.float().norm()).item()
            # Each pinned variant's output too (a grid or send path the tests do not pin).
            agree_by = {}
            for key, _, _ in variants:
                v_out, _ = cands[key](0)
                agree_by[key] = ((v_out.float() - unf_out.float()).norm()
                                 / unf_out.float().norm()).item()
            times = {n: [] for n in cands}
            for it in range(iters):
                for cname in (list(cands) if it % 2 == 0 else list(cands)[::-1]):
                    dist.barrier()
                    mkernel.all_reduce(gate, group=ctx)
                    start = torch.cuda.Event(enable_timing=True)
                    end = torch.cuda.Event(enable_timing=True)
                    start.record()
                    cands[cname](it)
                    end.record()
                    end.synchronize()
                    times[cname].append(start.elapsed_time(end))
            med = {n: statistics.median(t) for n, t in times.items()}
            every = [None] * world
            dist.all_gather_object(every, med)
            # Every sample (ms) of every rank, in iteration order: a rank whose CTAs MPS placed
            # late in some samples shows a two-valued spread that its median hides (session 9).
            samples = [None] * world
            dist.all_gather_object(samples, {n: [round(x, 4) for x in t] for n, t in times.items()})
            if rank == 0:
                worst = {n: max(m[n] for m in every) for n in cands}
                total = s * world
                flops = 4.0 * b * h * d * total * total / world * (0.5 if causal else 1.0)
                whole = (s // 2) % 128 == 0 if causal else s % 128 == 0
                row = {"shape": name, "world": world, "b": b, "s_local": s, "s_total": total,
                       "mode": "whole-sequence (one engine launch)" if whole else "per-step",
                       "h": h, "h_kv": h_kv, "d": d, "causal": causal, "dtype": "bf16",
                       "median_ms": worst["mkernel"], "unfused_ms": worst["unfused"],
                       "compute_ms": worst["compute"],
                       **{f"{key}_ms": worst[key] for key, _, _ in variants},
                       "ceiling_ms": worst["engine_full"] / world,
                       "vs_ceiling": worst["engine_full"] / world / worst["mkernel"],
                       # The ceiling from each rank's fastest sample (the plain engine's static
                       # tile lists run up to 2x long on a rank whose CTAs MPS placed late; its
                       # fastest sample is the engine's rate on the rank's SMs).
                       "ceiling_min_ms": max(min(sm["engine_full"]) for sm in samples) / world,
                       "vs_ceiling_min": max(min(sm["engine_full"]) for sm in samples) / world
                                         / worst["mkernel"],
                       "min_ms": max(min(sm["mkernel"]) for sm in samples),
                       "tflops_per_rank": flops / (worst["mkernel"] * 1e-3) / 1e12,
                       "vs_compute": worst["compute"] / worst["mkernel"],
                       "vs_unfused": worst["unfused"] / worst["mkernel"],
                       "rel_vs_unfused": agree,
                       "rel_vs_unfused_by_variant": agree_by,
                       "per_rank_ms": [m["mkernel"] for m in every],
                       "per_rank": every,
                       "per_rank_samples": samples}
                print("RESULT " + json.dumps(row), flush=True)
            del sets
            torch.cuda.empty_cache()
    torch.cuda.synchronize()
    ctx.barrier()
    mkernel.shutdown()
    dist.destroy_process_group()


def _torch_merge(acc, lse_acc, part, lse_part) -> None:
    """acc [b, rows, h, d] fp32 view, lse_acc [b, h, rows] view, merged in place (fp32)."""
    import torch

    mx = torch.maximum(lse_acc, lse_part)
    wa, wp = torch.exp(lse_acc - mx), torch.exp(lse_part - mx)
    tot = wa + wp
    acc.mul_((wa / tot).transpose(1, 2).unsqueeze(-1))
    acc.add_(part.float() * (wp / tot).transpose(1, 2).unsqueeze(-1))
    lse_acc.copy_(mx + torch.log(tot))


RANK_CODE = f"""
import sys
sys.path.insert(0, {str(ROOT / 'benchmarks')!r})
from bench_ring_attention import rank_main
rank_main()
"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--world", type=int, default=2)
    ap.add_argument("--iters", type=int, default=15)
    ap.add_argument("--shapes", default="", help="comma-separated shape names (default: all)")
    ap.add_argument("--variants", default=DEFAULT,
                    help=f"comma-separated pinned variants of {sorted(VARIANTS)} (default: %(default)s)")
    ap.add_argument("--timeout", type=float, default=600.0,
                    help="seconds for the rank processes (the rows finished by then are kept)")
    args = ap.parse_args()

    from common import commit, device_info, start_mps, write_result  # noqa: E402
    from tests.launch import run_ranks  # noqa: E402

    env, stop = start_mps("bench_ring_attention")
    rows = []
    try:
        res = run_ranks(RANK_CODE, args.world, timeout=args.timeout, env=dict(
            env, CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=str(100 // args.world), NCCL_NVLS_ENABLE="0",
            MKERNEL_OP_TIMEOUT="10", BENCH_ITERS=str(args.iters),
            BENCH_SHAPES=args.shapes, BENCH_VARIANTS=args.variants))
        # The rows finished before a failure are kept (rank 0 prints each as it completes).
        failed = [f"rank {r.rank} failed (rc {r.returncode}):\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}"
                  for r in res if r.returncode != 0]
        for r in res:
            rows += [json.loads(line[7:]) for line in r.stdout.splitlines() if line.startswith("RESULT ")]
    finally:
        stop()
    for f in failed:
        print(f, file=sys.stderr)
    variants = [VARIANTS[v] for v in args.variants.split(",") if v]
    print(f"{'shape':<16} {'causal':>6} {'ms':>8} {'TF/s/rank':>9} {'unfused':>8} {'compute':>8} "
          + "".join(f" {col:>8}" for _, col, _ in variants)
          + f" {'ceiling':>8} {'xceil':>6} {'ceilmin':>8} {'xcmin':>6} {'xunf':>6}  per-rank ms")
    for r in rows:
        print(f"{r['shape']:<16} {str(r['causal']):>6} {r['median_ms']:>8.3f} {r['tflops_per_rank']:>9.1f} "
              f"{r['unfused_ms']:>8.3f} {r['compute_ms']:>8.3f}"
              + "".join(f" {r[key + '_ms']:>8.3f}" for key, _, _ in variants)
              + f" {r['ceiling_ms']:>8.3f} {r['vs_ceiling']:>6.3f} {r['ceiling_min_ms']:>8.3f}"
              f" {r['vs_ceiling_min']:>6.3f} {r['vs_unfused']:>6.3f}  "
              + "/".join(f"{m:.2f}" for m in r["per_rank_ms"]))
    write_result("ring_attention", {
        "benchmark": "ring_attention", "commit": commit(), "device": device_info(), "mps": True, "world": args.world,
        "candidates": {
            "mkernel": "mkernel.ring_attention, its default (whole-sequence mode at these shapes: "
                       "one hooked engine launch consuming K/V chunks on arrival, tiles claimed "
                       "from a counter; bf16 d=128: the K/V forwarded inside the engine)",
            "unfused": "mkernel.all_gather of k and v, then SDPA flash per source block (GQA "
                       "expanded) and a torch fp32 merge, no overlap",
            "compute": "per-step engine calls and fp32 merges on local data (the per-step ring's "
                       "compute), no communication",
            "send_kernel": "mkernel.ring_attention with the send kernel (2 CTAs, side stream) "
                           "instead of the forwarding inside the engine (MKERNEL_RING_SEND=kernel)",
            "send4": "mkernel.ring_attention with the send kernel of 4 CTAs (whole mode; "
                     "MKERNEL_RING_SEND_CTAS=4), the engine on 4 fewer SMs",
            "static": "mkernel.ring_attention's default send path with the static tile order "
                      "(MKERNEL_RING_TILES=static)",
            "kernel_static": "the send kernel (2 CTAs) and the static tile order: session 8 "
                             "run 1's default",
            "grid48": "mkernel.ring_attention's default with a 48-CTA engine grid "
                      "(MKERNEL_RING_GRID=48)",
            "grid63": "mkernel.ring_attention's default with a 63-CTA engine grid "
                      "(MKERNEL_RING_GRID=63)",
            "send1": "mkernel.ring_attention with 1 send CTA (MKERNEL_RING_SEND_CTAS=1), the "
                     "engine on 1 more SM",
            "send_first": "mkernel.ring_attention with the engine started only once every send "
                          "CTA runs (MKERNEL_RING_SEND_FIRST=1)",
            "split": "mkernel.ring_attention's default with the causal engine kernels' masked "
                     "(diagonal) and wholly visible KV blocks in two consumer loops "
                     "(MKERNEL_RING_SPLIT_MASK=1; non-causal unchanged)",
            "kernel_split": "the send kernel (2 CTAs) with the masked / visible block split "
                            "(MKERNEL_RING_SEND=kernel MKERNEL_RING_SPLIT_MASK=1)",
            "send_engine": "mkernel.ring_attention with the K/V forwarded inside the engine by an "
                           "idle producer warp per CTA, no send kernel (MKERNEL_RING_SEND=engine; "
                           "bf16, the 128x128 tile)",
            "step": "mkernel.ring_attention with the per-step ring pinned (MKERNEL_RING_MODE=step): "
                    "per ring step a hooked engine launch + fp32 merge, the send on a side stream",
            "ceiling": "one engine call over the whole sequence (W*s tokens) on the rank's SMs, "
                       "divided by W (ceiling_ms: the slowest rank's median; ceiling_min_ms: the "
                       "slowest rank's fastest sample)"},
        "iters": args.iters, "rows": rows, "failed": failed[:1]})
    if failed:
        raise SystemExit(f"bench_ring_attention: {len(failed)} rank(s) failed (rows above: the ones "
                         "that finished)")


if __name__ == "__main__":
    main()
