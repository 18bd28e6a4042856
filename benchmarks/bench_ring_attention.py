"""mkernel.ring_attention on the GPU, W rank processes sharing one GPU under MPS (each gets
CUDA_MPS_ACTIVE_THREAD_PERCENTAGE = 100/W), side by side in one run. The table's columns:

  fused     mkernel.ring_attention, its default (at these shapes the whole-sequence mode: one
            hooked engine launch consuming the K/V chunks as they arrive, tiles claimed);
  unfused   the unfused ring of the ring-flash-attention recipe without its overlap: the K/V
            shards gathered over the substrate's peer memory (mkernel.all_gather), then one
            SDPA call per source block (the flash backend, natural-log LSE; GQA by expanding
            k/v to h heads) and the fp32 merge of the partials in torch;
  ceiling   THE compute-alone ceiling (ring12; one definition): every rank computes its own
            ring work — its (zigzag, when causal) query shard against the whole sequence's K/V,
            exactly the blocks the ring computes — from K/V it already holds locally (gathered
            once before timing, in the ring's order), with NO communication, on every rank at
            the same time, each on its MPS share, timed exactly as the fused op.
            The kernel is the fused op's own engine launch (torch.ops.mkernel.
            ring_attention_compute_alone, csrc/ring_attention.cpp): the same hook policy,
            mainloop, tile, zigzag mode and claimed tiles, the grid of the rank's whole SM
            share, every KV flag released before the launch; no send kernel, no forwarding, no
            own-shard copy, no entry/exit barrier. Its output is the fused op's bit for bit
            (checked here: `ceiling_bitwise_fused`). So fused vs ceiling is exactly what the
            ring's communication and overlap cost;
  x_ceil    ceiling_ms / fused_ms: the fused op's rate as a fraction of the ceiling's (issue
            13's target >= 0.95 at long sequences);
  x_unf     unfused_ms / fused_ms: its speedup over the unfused ring (target >= 1.0 everywhere).

Sessions 6-10's `ceiling` (one plain-engine call over the whole W*s sequence on the rank's SMs,
divided by W) and `compute` (the per-step ring's plain engine calls) are gone from the table: the
first computes 2x the rank's work and, static tile lists under MPS, ran one rank's call after the
other's (per-sample T / 2T, its median meaningless); the second is the plain engine's static
per-step calls with slicing copies and merges (bimodal under MPS: 31 / 47 ms at s12k), not the
ring's work as the ring does it — it survives as the diagnostic variant `plain` (NOT a ceiling:
it tells how the plain engine's static per-step calls compare with the hooked whole-sequence
kernel).

Pinned variants (VARIANTS; --variants picks, default: DEFAULT), each a column after x_unf, each
of the fused op unless marked "ceiling":
  kernel    the send kernel (2 CTAs) instead of the forwarding inside the engine
            (MKERNEL_RING_SEND=kernel), tiles claimed;
  send4     the send kernel with 4 CTAs (MKERNEL_RING_SEND_CTAS=4), tiles claimed;
  static    the default send path with the static tile order (MKERNEL_RING_TILES=static);
  k-static  the send kernel and static tiles: session 8 run 1's default;
  engine    the forwarding inside the engine pinned (MKERNEL_RING_SEND=engine);
  grid48    the default with a 48-CTA engine grid (MKERNEL_RING_GRID=48);
  grid63    the default with a 63-CTA grid (s9run2: 1-7% slower than 66 at every shape);
  step      the per-step ring pinned (MKERNEL_RING_MODE=step);
  send1     the send kernel with 1 CTA; s-first: the engine started once the send CTAs run
            (MKERNEL_RING_SEND_FIRST=1);
  split     the causal engine kernels' masked / visible block split (MKERNEL_RING_SPLIT_MASK=1;
            s10run1: 2-7% SLOWER at every causal shape); k-split: the same beside the send kernel;
  skip      ring12: the load lane acquires each KV flag once per tile instead of once per key
            block (MKERNEL_RING_FLAG_SKIP=1); c-skip: the ceiling with the same knob (the
            kernel-side share of the knob, no communication); base / c-base: the fused op /
            the ceiling pinned with the knob at its default (=0), their pinned-alike baselines;
  plain     diagnostic, no ceiling: the plain engine's per-step calls on local data (the
            per-step ring's compute: W mkernel.attention calls with the ring's causal split,
            static tiles, + fp32 merges), sessions 6-10's `compute`; plainw: diagnostic,
            non-causal rows only, the plain engine (static tiles) on the ceiling's local K/V
            (the ring's blocks in one plain launch; the zigzag mode is hooked-only).

Causal shards are zigzag (rank r holds chunks r and 2W-1-r of 2W). Timing: CUDA events, the
candidates interleaved iteration by iteration (order alternating), ranks aligned by
dist.barrier and a tiny all_reduce right before each sample, median over --iters samples; the
figure per case is the slowest rank's median (every sample of every rank is in the JSON).
TFLOP/s per rank count the causal work once (half the non-causal FLOPs of the whole sequence,
per rank). On one GPU all ranks share its HBM and the "peer" copies are local: these are the
op's costs at an MPS share, not NVLink figures. Writes JSON under results/ (commit from
MKERNEL_COMMIT).

    python benchmarks/bench_ring_attention.py [--world 2] [--iters 15] [--shapes a,b] [--variants ..]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
sys.path.insert(0, str(ROOT))

# (name, b, local s, h, h_kv, d): the issue's seed shape scaled to the run (B=4, H=16, d=128)
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
    # ring11 (opt-in; s10run1: 2-7% slower at every causal shape): the causal engine kernels'
    # masked (diagonal) and wholly visible KV blocks in two loops; non-causal calls unchanged.
    "split": ("split", "split", {"MKERNEL_RING_SPLIT_MASK": "1"}),
    "k-split": ("kernel_split", "k-split", {"MKERNEL_RING_SEND": "kernel",
                                            "MKERNEL_RING_SPLIT_MASK": "1"}),
    # ring12 (opt-in, unmeasured): one acquire per KV flag per tile in the load lane; on the
    # fused op and on the ceiling (no communication: the kernel-side share).
    # `base` / `c-base`: the default and the ceiling pinned with the knob's default value, so
    # that each knob column has a baseline pinned alike (a pinned column carried a 1-4%
    # handicap against the unpinned default in s10run1: `split` on NON-causal rows, which the
    # knob does not reach).
    "base": ("pinned_base", "base", {"MKERNEL_RING_FLAG_SKIP": "0"}),
    "skip": ("flag_skip", "skip", {"MKERNEL_RING_FLAG_SKIP": "1"}),
    "c-base": ("ceiling_base", "c-base", {"MKERNEL_RING_FLAG_SKIP": "0"}, "ceiling"),
    "c-skip": ("ceiling_skip", "c-skip", {"MKERNEL_RING_FLAG_SKIP": "1"}, "ceiling"),
    # Diagnostic, not a ceiling: the plain engine's static per-step calls (sessions 6-10's
    # `compute` column).
    "plain": ("plain_steps", "plain", {}, "plain"),
    # Diagnostic, non-causal rows only: the plain engine (static tiles) on the ceiling's K/V,
    # i.e. the ring's blocks in one plain launch (the causal zigzag mode is hooked-only).
    "plainw": ("plain_whole", "plainw", {}, "plainw"),
    # ring13 (with --nodes 2): the fused ring across nodes pinned (one engine launch consuming
    # each chunk on arrival, the other nodes' shards pushed through the inter-node FIFO by the
    # send kernel; 4 send CTAs, xn8: 8; the default since s11run2, so `xnodes` = the `fused`
    # column pinned) and the all-gather path it replaced (ag-path: K/V all-gathered on a side
    # stream, then per-step launches; MKERNEL_RING_FUSED_NODES=0).
    "xnodes": ("fused_nodes", "xnodes", {"MKERNEL_RING_FUSED_NODES": "1"}),
    "agpath": ("allgather_path", "ag-path", {"MKERNEL_RING_FUSED_NODES": "0"}),
    # session 32: the across-nodes send order pinned to session 31's (the last batch's chunks
    # first; the default sends batch 0 first, the engine's first tiles' batch).
    "xlast": ("fused_nodes_last", "xlast", {"MKERNEL_RING_NODES_ORDER": "last"}),
    # session 33: the whole mode's own-shard-first split (every tile's own-shard keys as a
    # first item, claimed for all tiles before any peer key; the default across nodes, and
    # inside a node for shards of at most 8192 keys since session 34) pinned off (xown0) and
    # on (own1).
    # session 34 (branch ring-own-direct): the own shard copied into the virtual K/V before the
    # engine (session 33's way; the engine now reads it in place from the op's k / v).
    "owncopy": ("own_copy", "owncopy", {"MKERNEL_RING_OWN_COPY": "1"}),
    "xown0": ("own_first_off", "xown0", {"MKERNEL_RING_OWN_FIRST": "0"}),
    "own1": ("own_first_on", "own1", {"MKERNEL_RING_OWN_FIRST": "1"}),
    # across nodes with 2 send CTAs: at W = 4 under MPS the 4 send CTAs + 2 copier SMs are 6 of a
    # rank's 33 SMs (the engine on 27, the ceiling on 33).
    "xn2": ("fused_nodes_send2", "xn2", {"MKERNEL_RING_SEND_CTAS": "2"}),
    # session 34: 1 and 3 send CTAs (with the refill, the engine takes the send CTAs' SMs once
    # the send kernel ends).
    "xn1": ("fused_nodes_send1", "xn1", {"MKERNEL_RING_SEND_CTAS": "1"}),
    "xn3": ("fused_nodes_send3", "xn3", {"MKERNEL_RING_SEND_CTAS": "3"}),
    # session 33 (branch ring-refill): the refill pinned off (no engine CTAs on the send kernel's
    # SMs once it ended; the default across nodes on the branch).
    "xrefill0": ("refill_off", "xrefill0", {"MKERNEL_RING_REFILL": "0"}),
    "xn8": ("fused_nodes_send8", "xn8", {"MKERNEL_RING_FUSED_NODES": "1",
                                         "MKERNEL_RING_SEND_CTAS": "8"}),
    # session 51: the hooked kernels' tile order at the plain non-causal default's 4 MiB L2 sections
    # (MKERNEL_ATTN_L2_SECTION_MB; the non-causal default since session 52), fused and ceiling.
    "l2s4": ("l2_sections_4", "l2s4", {"MKERNEL_ATTN_L2_SECTION_MB": "4"}),
    "c-l2s4": ("ceiling_l2s4", "c-l2s4", {"MKERNEL_ATTN_L2_SECTION_MB": "4"}, "ceiling"),
    # Diagnostic: the communication alone, the substrate's all_gather of this rank's k and v (the
    # unfused ring's and the default across-nodes path's transfer; no attention).
    "gather": ("gather_kv", "gather", {}, "gather"),
}
NODES_VARIANTS = "agpath,xnodes,gather"  # the default variants with --nodes > 1
DEFAULT = "base,skip,c-base,c-skip,plain,plainw"
PHASE_CALLS = 5  # calls per candidate of the phase pass (ring_phases)
CEILING = ("the compute-alone ceiling: each rank's own ring work (its zigzag/causal or whole "
           "query shard against the whole sequence's K/V: the blocks the ring computes) from K/V "
           "held locally in the ring's order, no communication, all ranks at once on their MPS "
           "shares, timed as the fused op (slowest rank's median): the fused op's own engine "
           "launch (torch.ops.mkernel.ring_attention_compute_alone: same kernel, tile, zigzag "
           "mode, claimed tiles, grid = the whole SM share, KV flags released before the "
           "launch; no send, no forwarding, no own-shard copy, no barriers)")

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
            # The ceiling's K/V: every rank's shard gathered once (untimed), in the ring's order
            # (position p: rank (rank + 1 + p) mod W's shard, the own one last).
            rings = [tuple(ring_order(mkernel.all_gather(x, group=ctx), rank, world)
                           for x in st[1:]) for st in sets]

            def fused(i):
                q, k, v = sets[i % 2]
                return mkernel.ring_attention(q, k, v, causal=causal, group=ctx)

            def ceiling(i):
                return torch.ops.mkernel.ring_attention_compute_alone(
                    sets[i % 2][0], *rings[i % 2], rank, world, causal)

            def plain(i):
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

            def pinned(env, target):  # a candidate under knobs (every rank alike)
                def call(i):
                    os.environ.update(env)
                    try:
                        return target(i)
                    finally:
                        for var in env:
                            del os.environ[var]
                return call

            def plainw(i):
                return mkernel.attention(sets[i % 2][0], *rings[i % 2], causal=False)

            def gather(i):
                _, k, v = sets[i % 2]
                return mkernel.all_gather(k, group=ctx), mkernel.all_gather(v, group=ctx)

            targets = {"fused": fused, "ceiling": ceiling, "plain": plain, "plainw": plainw,
                       "gather": gather}
            cands = {"mkernel": fused, "unfused": unfused, "ceiling": ceiling}
            for key, _, env, *tgt in variants:
                if causal and tgt and tgt[0] == "plainw":
                    continue  # non-causal only
                cands[key] = pinned(env, targets[tgt[0] if tgt else "fused"])
            for i in range(3):  # warm-up (and symmetric-memory growth)
                for cname, c in cands.items():
                    c(i)
                    if i == 0:  # which candidate a failure happened in (the log survives)
                        torch.cuda.synchronize()
                        print(f"WARM {rank} {name} causal={causal} {cname} ok", flush=True)
            torch.cuda.synchronize()
            # The fused op agrees with the unfused ring (both attend the whole sequence), and so
            # does every other candidate but `plain` (it attends the local shard W times).
            got_out, got_lse = fused(0)
            unf_out, _ = unfused(0)
            ceil_out, ceil_lse = ceiling(0)

            def rel(x):
                return ((x.float() - unf_out.float()).norm() / unf_out.float().norm()).item()

            agree = rel(got_out)
            agree_by = {key: rel(cands[key](0)[0]) for key, _, _, *tgt in variants
                        if key in cands and (tgt[0] if tgt else "fused") not in ("plain", "gather")}
            agree_by["ceiling"] = rel(ceil_out)
            # The ceiling runs the fused op's own kernel on the same values: the same bits.
            same_bits = bool(torch.equal(ceil_out, got_out) and torch.equal(ceil_lse, got_lse))
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
            phases = ring_phases(name, causal, rank, fused, ceiling,
                                 lambda: (dist.barrier(), mkernel.all_reduce(gate, group=ctx)))
            every = [None] * world
            dist.all_gather_object(every, med)
            # Every sample (ms) of every rank, in iteration order: a rank whose CTAs MPS placed
            # late in some samples shows a two-valued spread that its median hides (session 9).
            samples = [None] * world
            dist.all_gather_object(samples, {n: [round(x, 4) for x in t] for n, t in times.items()})
            bits = [None] * world
            dist.all_gather_object(bits, same_bits)
            phases_by_rank = [None] * world
            dist.all_gather_object(phases_by_rank, phases)
            if rank == 0:
                worst = {n: max(m[n] for m in every) for n in cands}
                total = s * world
                flops = 4.0 * b * h * d * total * total / world * (0.5 if causal else 1.0)
                whole = (s // 2) % 128 == 0 if causal else s % 128 == 0
                row = {"shape": name, "world": world, "nodes": int(os.environ.get("BENCH_NODES", "1")),
                       "b": b, "s_local": s, "s_total": total,
                       "mode": "whole-sequence (one engine launch)" if whole else "per-step",
                       "h": h, "h_kv": h_kv, "d": d, "causal": causal, "dtype": "bf16",
                       "median_ms": worst["mkernel"], "unfused_ms": worst["unfused"],
                       "ceiling_ms": worst["ceiling"],
                       **{f"{key}_ms": worst.get(key) for key, _, _, *_t in variants},
                       # fused's rate over the ceiling's (target >= 0.95) and over the unfused
                       # ring's (target >= 1.0)
                       "vs_ceiling": worst["ceiling"] / worst["mkernel"],
                       "vs_unfused": worst["unfused"] / worst["mkernel"],
                       "min_ms": max(min(sm["mkernel"]) for sm in samples),
                       "ceiling_min_ms": max(min(sm["ceiling"]) for sm in samples),
                       "tflops_per_rank": flops / (worst["mkernel"] * 1e-3) / 1e12,
                       "ceiling_tflops_per_rank": flops / (worst["ceiling"] * 1e-3) / 1e12,
                       "rel_vs_unfused": agree,
                       "rel_vs_unfused_by_candidate": agree_by,
                       "ceiling_bitwise_fused": all(bits),
                       "per_rank_ms": [m["mkernel"] for m in every],
                       "per_rank_ceiling_ms": [m["ceiling"] for m in every],
                       "per_rank": every,
                       "per_rank_samples": samples,
                       # MKERNEL_RING_PHASES medians per rank (ms): fused = entry barrier / own
                       # copy + flags / engine launch / exit barrier; alone = the ceiling's launch
                       "phases_by_rank": phases_by_rank}
                print("RESULT " + json.dumps(row), flush=True)
            del sets, rings
            torch.cuda.empty_cache()
    torch.cuda.synchronize()
    ctx.barrier()
    mkernel.shutdown()
    dist.destroy_process_group()


def ring_phases(name: str, causal: bool, rank: int, fused, ceiling, align) -> dict:
    """The fused op's phases and the ceiling's engine launch, timed by the op's own CUDA events
    (MKERNEL_RING_PHASES, csrc/ring_attention.cpp RingPhases; a synchronizing measurement mode,
    after the timed samples): medians (ms) over PHASE_CALLS calls each, ranks aligned before
    each call. {} when BENCH_PHASES_PATH is unset."""
    import torch

    base = os.environ.get("BENCH_PHASES_PATH")
    if not base:
        return {}
    path = f"{base}.{name}.{int(causal)}"
    os.environ["MKERNEL_RING_PHASES"] = path
    try:
        for i in range(PHASE_CALLS):
            for call in (fused, ceiling):
                align()
                call(i)
        torch.cuda.synchronize()
    finally:
        del os.environ["MKERNEL_RING_PHASES"]
    cols = {"fused": ("entry", "copy", "engine", "exit"), "alone": ("engine",)}
    got: dict[str, list[list[float]]] = {}
    try:
        with open(f"{path}.rank{rank}") as f:
            for line in f:
                what, _, nums = line.partition(" | ")
                got.setdefault(what.split()[0], []).append([float(x) for x in nums.split()])
    except OSError:  # no line written (the per-step mode times no phases)
        return {}
    idx = {"entry": 0, "copy": 1, "engine": 2, "exit": 3}
    return {what: {c: round(statistics.median(r[idx[c]] for r in rows), 4) for c in cols[what]}
            for what, rows in got.items() if what in cols}


def ring_order(gathered, rank: int, world: int):
    """[W*b, s, ..] (rank r's shard in rows [r*b, (r+1)*b), mkernel.all_gather's order) ->
    [b, W*s, ..]: the shards along the sequence in the ring's order, position p holding rank
    (rank + 1 + p) mod W's (ring_attention_compute_alone's k_ring / v_ring)."""
    import torch

    b = gathered.shape[0] // world
    return torch.cat([gathered[src * b:(src + 1) * b] for src in
                      ((rank + 1 + p) % world for p in range(world))], dim=1).contiguous()


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
    ap.add_argument("--no-phases", action="store_true",
                    help="skip the phase pass (MKERNEL_RING_PHASES, after the timed samples)")
    ap.add_argument("--timeout", type=float, default=600.0,
                    help="seconds for the rank processes (the rows finished by then are kept)")
    ap.add_argument("--nodes", type=int, default=1,
                    help="emulated nodes (W a multiple); with > 1 the variants default to "
                         f"{NODES_VARIANTS} and the phase pass is skipped")
    ap.add_argument("--emulate", default="50GB/s,3us",
                    help="with --nodes > 1: the emulated link between nodes (MKERNEL_NET_EMULATE)")
    args = ap.parse_args()
    if args.nodes > 1 and args.variants == DEFAULT:
        args.variants = NODES_VARIANTS
    if args.nodes > 1:
        args.no_phases = True

    from common import commit, device_info, start_mps, write_result  # noqa: E402
    from tests.launch import run_ranks  # noqa: E402

    import torch

    # A GPU per rank where there are enough (nvidia-h200-x2): no MPS, whole GPUs; else the ranks share GPU 0's SMs.
    per_gpu = torch.cuda.device_count() >= args.world
    env, stop = ({}, lambda: None) if per_gpu else start_mps("bench_ring_attention")
    share = {} if per_gpu else {"CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": str(100 // args.world)}
    phase_dir = tempfile.mkdtemp(prefix="ring_phases_")
    rows = []
    try:
        link = {"MKERNEL_NET_EMULATE": args.emulate} if args.nodes > 1 else {}
        res = run_ranks(RANK_CODE, args.world, timeout=args.timeout, nodes=args.nodes, env=dict(
            env, **share, NCCL_NVLS_ENABLE="0",
            MKERNEL_OP_TIMEOUT="10", BENCH_ITERS=str(args.iters), BENCH_NODES=str(args.nodes),
            **link,
            BENCH_SHAPES=args.shapes, BENCH_VARIANTS=args.variants,
            BENCH_PHASES_PATH="" if args.no_phases else os.path.join(phase_dir, "ph")))
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
    print(f"{'shape':<16} {'causal':>6} {'fused':>8} {'unfused':>8} {'ceiling':>8} {'x_ceil':>6} "
          f"{'x_unf':>6} {'TF/s/rk':>7}" + "".join(f" {col:>8}" for _, col, *_r in variants)
          + "  bits  per-rank fused / ceiling ms")
    for r in rows:
        print(f"{r['shape']:<16} {str(r['causal']):>6} {r['median_ms']:>8.3f} {r['unfused_ms']:>8.3f} "
              f"{r['ceiling_ms']:>8.3f} {r['vs_ceiling']:>6.3f} {r['vs_unfused']:>6.3f} "
              f"{r['tflops_per_rank']:>7.1f}"
              + "".join(f" {r[key + '_ms']:>8.3f}" if r.get(key + "_ms") is not None
                        else f" {'-':>8}" for key, _, *_r in variants)
              + f"  {'same' if r['ceiling_bitwise_fused'] else 'DIFF':>4}  "
              + "/".join(f"{m:.2f}" for m in r["per_rank_ms"]) + " | "
              + "/".join(f"{m:.2f}" for m in r["per_rank_ceiling_ms"]))
    for r in rows:
        for rk, ph in enumerate(r.get("phases_by_rank") or []):
            if ph:
                f, a = ph.get("fused", {}), ph.get("alone", {})
                print(f"phases {r['shape']:<16} causal={r['causal']!s:<5} rank {rk}: entry "
                      f"{f.get('entry', 0):.3f} copy {f.get('copy', 0):.3f} engine "
                      f"{f.get('engine', 0):.3f} exit {f.get('exit', 0):.3f} | ceiling engine "
                      f"{a.get('engine', 0):.3f} ms")
    for r in rows:  # ring13: the fused ring across nodes against the same run's columns
        for key, col in (("fused_nodes", "xnodes"), ("fused_nodes_send8", "xn8")):
            x = r.get(key + "_ms")
            if x:
                g = r.get("gather_kv_ms")
                ag = r.get("allgather_path_ms")
                print(f"{col} {r['shape']:<16} causal={r['causal']!s:<5} nodes={r.get('nodes', 1)}: "
                      f"{x:.3f} ms, x_ceil {r['ceiling_ms'] / x:.3f}, x_unf {r['unfused_ms'] / x:.3f}, "
                      f"x_default {r['median_ms'] / x:.3f}"
                      + (f", x_agpath {ag / x:.3f}" if ag else "")
                      + (f", gather {g:.3f} ms, x_ideal {max(g, r['ceiling_ms']) / x:.3f}" if g else "")
                      + f", rel vs unfused {r['rel_vs_unfused_by_candidate'].get(key, float('nan')):.2e}")
    print("x_ceil = ceiling / fused (fused's rate as a fraction of the compute-alone ceiling's, "
          "target >= 0.95); x_unf = unfused / fused (target >= 1.0); bits: ceiling == fused bit "
          "for bit")
    write_result("ring_attention", {
        "benchmark": "ring_attention", "commit": commit(), "device": device_info(), "mps": not per_gpu, "world": args.world,
        "nodes": args.nodes, "emulate": args.emulate if args.nodes > 1 else "",
        "ceiling_definition": CEILING,
        "candidates": {
            "mkernel": "mkernel.ring_attention, its default (whole-sequence mode at these shapes: "
                       "one hooked engine launch consuming K/V chunks on arrival, tiles claimed "
                       "from a counter; bf16 d=128: the K/V forwarded inside the engine)",
            "unfused": "mkernel.all_gather of k and v, then SDPA flash per source block (GQA "
                       "expanded) and a torch fp32 merge, no overlap",
            "ceiling": CEILING,
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
            "flag_skip": "mkernel.ring_attention with the load lane acquiring each KV flag once "
                         "per tile, not once per key block (MKERNEL_RING_FLAG_SKIP=1)",
            "ceiling_skip": "the ceiling with MKERNEL_RING_FLAG_SKIP=1",
            "pinned_base": "mkernel.ring_attention's default pinned (MKERNEL_RING_FLAG_SKIP=0): "
                           "flag_skip's baseline pinned alike",
            "ceiling_base": "the ceiling pinned (MKERNEL_RING_FLAG_SKIP=0): ceiling_skip's "
                            "baseline pinned alike",
            "plain_whole": "DIAGNOSTIC, non-causal rows: the plain engine (mkernel.attention, "
                           "static tiles) on the ceiling's local K/V: the ring's blocks in one "
                           "plain launch",
            "fused_nodes": "ring13, with --nodes > 1: mkernel.ring_attention with "
                           "MKERNEL_RING_FUSED_NODES=1 pinned (the default since s11run2; the whole-sequence mode across nodes: one "
                           "hooked engine launch, the other nodes' K/V pushed through the "
                           "inter-node FIFO by a 4-CTA send kernel, node-mates over peer memory)",
            "fused_nodes_send8": "fused_nodes with 8 send CTAs (MKERNEL_RING_SEND_CTAS=8)",
            "fused_nodes_send2": "across nodes with 2 send CTAs (MKERNEL_RING_SEND_CTAS=2; the "
                                 "default 4): the engine on 2 more SMs",
            "refill_off": "across nodes, the refill pinned off (MKERNEL_RING_REFILL=0): the "
                          "send kernel's SMs idle once it ended",
            "fused_nodes_last": "across nodes, the send order of session 31 pinned (the last "
                                "batch's chunks first; MKERNEL_RING_NODES_ORDER=last)",
            "own_copy": "the own shard copied into position W - 1 of the virtual K/V before "
                        "the engine (MKERNEL_RING_OWN_COPY=1; the default reads it in place)",
            "own_first_off": "the own-shard-first split pinned off (MKERNEL_RING_OWN_FIRST=0; "
                             "the default across nodes since session 33, inside a node for "
                             "shards of at most 8192 keys since session 34): one item per tile",
            "own_first_on": "the own-shard-first split pinned on (MKERNEL_RING_OWN_FIRST=1; "
                            "inside a node off by default above 8192 keys a shard): every "
                            "tile's own-shard keys first, "
                            "claimed for all tiles before any peer key, the peers' keys resumed "
                            "from the saved softmax state (the same bits)",
            "allgather_path": "with --nodes > 1: the all-gather path across nodes pinned "
                              "(MKERNEL_RING_FUSED_NODES=0; the default before s11run2): K/V "
                              "all-gathered on a side stream, then per-step launches + merges",
            "gather_kv": "DIAGNOSTIC: the communication alone, mkernel.all_gather of k and of v",
            "plain_steps": "DIAGNOSTIC, not a ceiling: the plain engine's static per-step calls on "
                           "local data (W mkernel.attention calls with the ring's causal split, "
                           "slicing copies, fp32 merges; sessions 6-10's `compute`)"},
        "iters": args.iters, "rows": rows, "failed": failed[:1]})
    if failed:
        raise SystemExit(f"bench_ring_attention: {len(failed)} rank(s) failed (rows above: the ones "
                         "that finished)")


if __name__ == "__main__":
    main()
