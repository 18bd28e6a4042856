"""MoE dispatch + first GEMM and combine at W ranks on one GPU under MPS (each rank gets 100/W %
of the SMs), side by side in one run per shape:

* ``mkernel``: ``moe_dispatch_gemm`` (device routing, the dispatch kernel on the group's peer
  memory, then the engine's grouped GEMM) and ``moe_combine`` (the combine kernel);
* ``unfused``: what a user builds from the substrate's collectives: ``mkernel.all_gather`` of x
  and of topk_idx, a stable sort of the gathered choices by local expert, ``index_select`` of
  the rows, ``torch._grouped_mm``; combine as ``mkernel.all_gather`` of the expert outputs,
  ``index_select`` by route and the fp32 weighted sum;
* ``compute``: ``torch._grouped_mm`` alone on this rank's received rows already in place, at
  the same MPS share (the ceiling: no routing, no communication);
* ``engine_gemm``: mkernel's grouped GEMM alone on the dispatch's output layout (the static
  row bound, rows past the counts skipped): ``mkernel_dispatch_gemm - engine_gemm`` is what
  the routing and the dispatch kernel cost.

* ``*_solo``: the same GEMMs with the ranks taking turns (one rank runs while the others wait on
  the host): under MPS the ranks' persistent kernels can land on the same SMs and serialize
  (fused_diag timelines, session 8 run 1), so ``engine_gemm_solo`` / ``compute_solo`` are the
  GEMMs' own speed on a 1/W share, ``engine_gemm_solo_256`` / ``_256m`` / ``_128`` the packed
  GEMM pinned to coop_128x256_c1x2 / coop_256x128_c1x2 / ping_128x128_c1x2;
  ``engine_gemm_256`` / ``_256m`` / ``_128`` the pinned ones
  with every rank at once (s8run2: concurrent ~2x solo for every plan and torch alike).

With ``--nodes N`` the ranks form N emulated nodes (the several-node path, csrc/moe_nodes.h;
``--emulate 50GB/s,3us`` shapes the loopback link like a NIC, MKERNEL_NET_EMULATE): the
issue's inter-node bandwidth yardstick is the dispatch's GB/s by wall clock (the op minus the
engine GEMM alone: ``dispatch_gbs_per_rank_wall``; kernel times of overlapping streams would
count twice) and ``combine_gbs_per_rank`` against the emulated rate. Those rows also time the
inter-node paths alone on the op's bytes (``link_paths``): the substrate's all_gather of x and
reduce_scatter of fp32 partials [W*T, H], and, with every rank alone on its node, the MoE's own
exchange on the same tensors (``mkernel._moe_exchange``, csrc/moe_net.h; the ops' default there,
MKERNEL_MOE_NODES_PATH=substrate opts out), with a bitwise check of its gather against the all_gather.

Timing: CUDA events, a GPU-side barrier (tiny all_reduce) before each sample; the headline is
the median over samples of the slowest rank's time in that sample (every rank has to finish;
under MPS the ranks' kernels share SMs unevenly, so one rank's own median can be 2x another's:
session 7 run 2), with each rank's own median beside it. A profile of a few calls splits each
op's GPU time by kernel (routing kernels, other ATen kernels, the dispatch/combine kernel or
the several-node path's all_gather, the grouped GEMM), each profiled call after a host
barrier of every rank (the first call no longer waits for a peer's profiler start).
TFLOP/s count the routed rows' GEMM of the slowest rank. GB/s per rank (DeepEP's yardstick) =
bytes of token rows this rank sends to other ranks (each token once per destination rank) /
time: for the dispatch the profiled GPU time of everything but the GEMM (worst rank), for the
combine the op's time; on one GPU every "link" is the GPU's own HBM. JSON under
benchmarks/results/ (and $OUT).

    python benchmarks/bench_moe_ranks.py [--world 2] [--iters 20] [--shapes a,b] [--graph]
                                         [--nodes 2 --emulate 50GB/s,3us] [--table]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
sys.path.insert(0, str(ROOT))

# Tokens over the whole group (per rank: tokens_total / W); experts over the whole group. The
# seed's shapes ran 8192 and 131072 tokens over 8 GPUs: 1024 and 16384 tokens per rank, which at
# W = 2 are the 2k and 32k rows below (the "scaled per rank": seed_e256_top8_32k is the
# issue's 131072-token row, its >= 0.85x compute-alone target).
SHAPES = [  # cheapest first: a run cut short still reports the first ones
    dict(name="seed_e256_top8_2k", experts=256, k=8, tokens_total=2048, h=7168, f=2048),
    dict(name="seed_e256_top8_8k", experts=256, k=8, tokens_total=8192, h=7168, f=2048),
    dict(name="mixtral_e8_top2_8k", experts=8, k=2, tokens_total=8192, h=4096, f=14336),
    dict(name="seed_e256_top8_32k", experts=256, k=8, tokens_total=32768, h=7168, f=2048),
]


def live(rank: int, msg: str) -> None:
    """Rank 0's progress and rows, appended to BENCH_LIVE as they happen (the launcher prints
    them at once: a run cut short by its timeout still shows how far it got and every row it had)."""
    path = os.environ.get("BENCH_LIVE")
    if rank != 0 or not path:
        return
    with open(path, "a") as fh:
        fh.write(f"+{time.monotonic() - T0:.1f}s {msg}\n")


T0 = time.monotonic()


def rank_main() -> None:
    import torch
    import torch.distributed as dist

    import mkernel

    dist.init_process_group("gloo")
    # A GPU per rank where the host has enough (no MPS then: main()), else every rank on GPU 0.
    gpus = torch.cuda.device_count()
    torch.cuda.set_device(int(os.environ["RANK"]) % gpus if gpus >= int(os.environ["WORLD_SIZE"]) else 0)
    if os.environ.get("BENCH_CALLER_STREAM") == "side":
        # moe15: every call on a stream of the rank's own instead of the legacy default stream
        # (another hardware queue for the caller's work beside the exchange's pool streams).
        torch.cuda.set_stream(torch.cuda.Stream())
    ctx = mkernel.init()
    world, rank = ctx.world_size, ctx.rank
    live(rank, f"ranks up (torch, CUDA, mkernel.init; CUDA_MODULE_LOADING="
               f"{os.environ.get('CUDA_MODULE_LOADING', '')!r}, MKERNEL_NET_GDR={os.environ.get('MKERNEL_NET_GDR', '')!r}, "
               f"copier {os.environ.get('MKERNEL_NET_GDR_COPIER', '')!r})")
    iters = int(os.environ["BENCH_ITERS"])
    dt = torch.bfloat16
    gate = torch.zeros(world * 8, device="cuda", dtype=dt)
    wanted = os.environ.get("BENCH_SHAPES", "")
    for s in SHAPES:
        if wanted and s["name"] not in wanted.split(","):
            continue
        e, k, h, f = s["experts"], s["k"], s["h"], s["f"]
        t, el = s["tokens_total"] // world, s["experts"] // world
        gen = torch.Generator(device="cuda").manual_seed(1000 + rank)
        x = torch.randn(t, h, device="cuda", dtype=dt, generator=gen)
        w1 = torch.randn(el, f, h, device="cuda", dtype=dt, generator=gen) / h ** 0.5
        w1_t = w1.transpose(1, 2)
        idx = torch.rand(t, e, device="cuda", generator=gen).topk(k, dim=1).indices
        mkernel.moe.reserve_tokens(t, group=ctx)  # fixed shapes, no per-call host exchange
        w = torch.rand(t, k, device="cuda", generator=gen)
        res = mkernel.moe_dispatch_gemm(x, idx, w1, num_experts=e, group=ctx)
        rows_out = res.out.shape[0]
        rows = int(res.counts.sum())
        recv_full = mkernel.moe_dispatch_gemm(x, idx, w1, num_experts=e, return_recv=True,
                                              group=ctx).recv_x
        recv = recv_full[:rows].contiguous()
        offs = res.offs
        plan = torch.ops.mkernel.gemm_grouped_plan(recv_full, w1, offs)
        cfg256, cfg128 = mkernel.ops.GEMM_CONFIGS["coop_128x256_c1x2"], mkernel.ops.GEMM_CONFIGS["ping_128x128_c1x2"]
        cfg256m = mkernel.ops.GEMM_CONFIGS["coop_256x128_c1x2"]
        y = torch.randn(rows_out, h, device="cuda", dtype=dt, generator=gen)
        route = res.handle.route

        def unfused_dispatch():
            xa = mkernel.all_gather(x, group=ctx)
            ia = mkernel.all_gather(idx.to(torch.float32), group=ctx).long()
            flat = ia.reshape(-1)
            key = torch.where(flat // el == rank, flat - rank * el, el)
            order = torch.argsort(key, stable=True)[:rows_out]
            a = xa.index_select(0, order // k)
            cnt = torch.zeros(el + 1, device="cuda", dtype=torch.int32)  # no host sync
            cnt.scatter_add_(0, key, torch.ones_like(key, dtype=torch.int32))
            cnt = cnt[:el]
            return torch._grouped_mm(a, w1_t, offs=torch.cumsum(cnt, 0, dtype=torch.int32))

        def unfused_combine():
            ya = mkernel.all_gather(y, group=ctx)
            kept = route >= 0
            gi = torch.where(kept, (route >> 32) * rows_out + (route & 0xffffffff), 0)
            g = ya.index_select(0, gi.reshape(-1)).view(t, k, h).float()
            return (g * (w * kept).unsqueeze(-1)).sum(1).to(dt)

        # The unfused path's values against mkernel's (same rows, same GEMM up to rounding).
        ref = unfused_dispatch()[:rows].float()
        err_d = ((res.out[:rows].float() - ref).norm() / ref.norm()).item()
        c_mk = mkernel.moe_combine(y, res.handle, w, group=ctx).float()
        c_ref = unfused_combine().float()
        err_c = ((c_mk - c_ref).norm() / c_ref.norm()).item()
        cands = {
            "mkernel_dispatch_gemm": lambda: mkernel.moe_dispatch_gemm(x, idx, w1, num_experts=e,
                                                                       group=ctx),
            "unfused_dispatch_gemm": unfused_dispatch,
            "compute_grouped_mm": lambda: torch._grouped_mm(recv, w1_t, offs=offs),
            "engine_gemm": lambda: mkernel.gemm_grouped(recv_full, w1, offs=offs),
            # Pinned plans, both ranks at once: 128x256 (A multicast) vs 128x128 tiles.
            "engine_gemm_256": lambda: torch.ops.mkernel.gemm_grouped_packed(recv_full, w1, offs,
                                                                             cfg256, 8, 2),
            "engine_gemm_128": lambda: torch.ops.mkernel.gemm_grouped_packed(recv_full, w1, offs,
                                                                             cfg128, 8, 2),
            "engine_gemm_256m": lambda: torch.ops.mkernel.gemm_grouped_packed(recv_full, w1, offs,
                                                                              cfg256m, 8, 2),
            # The ranks take turns (see SOLO): the GEMMs' own speed on one MPS share.
            "engine_gemm_solo": lambda: mkernel.gemm_grouped(recv_full, w1, offs=offs),
            "engine_gemm_solo_256": lambda: torch.ops.mkernel.gemm_grouped_packed(recv_full, w1, offs,
                                                                                  cfg256, 8, 2),
            "engine_gemm_solo_128": lambda: torch.ops.mkernel.gemm_grouped_packed(recv_full, w1, offs,
                                                                                  cfg128, 8, 2),
            "engine_gemm_solo_256m": lambda: torch.ops.mkernel.gemm_grouped_packed(recv_full, w1, offs,
                                                                                   cfg256m, 8, 2),
            "compute_solo": lambda: torch._grouped_mm(recv, w1_t, offs=offs),
            "mkernel_combine": lambda: mkernel.moe_combine(y, res.handle, w, group=ctx),
            "unfused_combine": unfused_combine,
        }
        nodes = int(os.environ.get("BENCH_NODES", "1"))
        ex_equal = None
        if nodes > 1:
            # The dispatch as it was before moe10 (MKERNEL_MOE_DISPATCH_PIPELINE=0: the routing
            # all_gathered before the rows move, the rows joined whole, index_select over the
            # static row bound), same run, same rotation: the paired figure for the default.
            cands["mkernel_dispatch_gemm_prev"] = with_env(
                {"MKERNEL_MOE_DISPATCH_PIPELINE": "0"}, cands["mkernel_dispatch_gemm"])
            # The pipelined dispatch in 8 pieces instead of 15 (fewer launches per call, if the
            # host's issue bounds it; MKERNEL_MOE_NET_PIECES, every rank alike).
            cands["mkernel_dispatch_gemm_p8"] = with_env(
                {"MKERNEL_MOE_NET_PIECES": "8"}, cands["mkernel_dispatch_gemm"])
            # The inter-node paths alone on the op's bytes (same run): the substrate's
            # all_gather of x (the dispatch's) and reduce_scatter of fp32 partials [W*T, H] (the
            # combine's), and, with every rank alone on its node, the MoE's own exchange
            # (csrc/moe_net.h: copy engines + FIFO pieces) on the same tensors.
            part = torch.randn(world * t, h, device="cuda", dtype=torch.float32, generator=gen)
            cands["link_substrate_all_gather"] = lambda: mkernel.all_gather(x, group=ctx)
            # The host-staged path's PCIe legs on x's bytes (copy engines, every rank at once:
            # the one GPU's link is shared): its ceiling is min(d2h, host copy, h2d).
            x_host = torch.empty(x.shape, dtype=x.dtype, pin_memory=True)
            x_back = torch.empty_like(x)
            cands["link_pcie_d2h"] = lambda: x_host.copy_(x, non_blocking=True)
            cands["link_pcie_h2d"] = lambda: x_back.copy_(x_host, non_blocking=True)
            part16 = part.to(dt)  # MKERNEL_MOE_NODES_COMBINE=reduce16's partials
            cands["link_substrate_reduce_scatter"] = lambda: mkernel.reduce_scatter(part, group=ctx)
            cands["link_substrate_reduce_scatter16"] = lambda: mkernel.reduce_scatter(part16, group=ctx)
            if nodes == world:
                cands["link_exchange_gather"] = lambda: torch.ops.mkernel._moe_exchange(
                    x, False, ctx.handle, world)
                cands["link_exchange_a2a"] = lambda: torch.ops.mkernel._moe_exchange(
                    part, True, ctx.handle, world)
                cands["link_exchange_a2a16"] = lambda: torch.ops.mkernel._moe_exchange(
                    part16, True, ctx.handle, world)
                # The same bits as the substrate's (checked once, before timing; reported).
                ex_equal = bool(torch.equal(cands["link_exchange_gather"](),
                                            cands["link_substrate_all_gather"]()))
        lean = os.environ.get("BENCH_MOE_LEAN") == "1" and nodes > 1
        if nodes > 1:
            # moe13: the dispatch alone (MKERNEL_MOE_DISPATCH_ONLY=1 returns before the GEMM; DeepEP's
            # yardstick), and the sequence's counted-rows gather (MKERNEL_MOE_DISPATCH_GATHER=counted).
            only = {"MKERNEL_MOE_DISPATCH_ONLY": "1"}
            counted = {"MKERNEL_MOE_DISPATCH_GATHER": "counted"}
            cands["mkernel_dispatch_only"] = with_env(only, cands["mkernel_dispatch_gemm"])
            cands["mkernel_dispatch_only_counted"] = with_env(dict(only, **counted), cands["mkernel_dispatch_gemm"])
            cands["mkernel_dispatch_gemm_counted"] = with_env(counted, cands["mkernel_dispatch_gemm"])
            # Session 22: topk_weights carried by the dispatch (MoEMLP's way): the dispatch alone with
            # them (a head 2x longer), and the combine using the routes it carried (no all_gather).
            cands["mkernel_dispatch_only_weighted"] = with_env(only, lambda: mkernel.moe_dispatch_gemm(
                x, idx, w1, num_experts=e, topk_weights=w, group=ctx))
            cres = mkernel.moe_dispatch_gemm(x, idx, w1, num_experts=e, topk_weights=w, group=ctx)
            cands["mkernel_combine_carried"] = lambda: mkernel.moe_combine(y, cres.handle, w, group=ctx)
            carried_equal = {"rows": cres.handle.peer_routes.shape[0],
                             "combine": bool(torch.equal(cands["mkernel_combine_carried"]().float(), c_mk))}
            # Session 21: mkernel.moe.MoEBuffer (eager calls replaying graphs captured once, x and
            # topk_idx copied into its static inputs; one buffer per knob set, as graphs keep them).
            # The direct graph (the same x, idx and w1 each call: no copy) and, for the
            # decomposition, the static one (x and idx copied into the buffer's inputs first).
            buf_only, buf, buf_static = (mkernel.moe.MoEBuffer(e, t, group=ctx) for _ in range(3))
            buf_static._direct_graphs = False
            cands["mkernel_dispatch_only_buffer"] = with_env(only, lambda: buf_only.dispatch_gemm(x, idx, w1))
            cands["mkernel_dispatch_only_buffer_static"] = with_env(
                only, lambda: buf_static.dispatch_gemm(x, idx, w1))
            cands["mkernel_dispatch_gemm_buffer"] = lambda: buf.dispatch_gemm(x, idx, w1)
            bres = buf.dispatch_gemm(x, idx, w1)  # the miss: eager, then the capture
            cands["mkernel_combine_buffer"] = lambda: buf.combine(y, bres.handle, w)
            # Session 22: a buffer whose dispatch carries the weights (its combine skips the routes' exchange).
            buf_w = mkernel.moe.MoEBuffer(e, t, group=ctx)
            bres_w = buf_w.dispatch_gemm(x, idx, w1, w)
            cands["mkernel_dispatch_gemm_buffer_weighted"] = lambda: buf_w.dispatch_gemm(x, idx, w1, w)
            cands["mkernel_combine_buffer_carried"] = lambda: buf_w.combine(y, bres_w.handle, w)
            buffer_equal = {
                "dispatch": bool(torch.equal(buf.dispatch_gemm(x, idx, w1).out[:rows], res.out[:rows])),
                "combine": [bool(torch.equal(buf.combine(y, bres.handle, w).float(), c_mk)) for _ in range(3)],
                "captures": buf.captures}
            for _ in range(3):  # past every buffer's captures before the timed rounds
                for n in ("mkernel_dispatch_only_buffer", "mkernel_dispatch_only_buffer_static",
                          "mkernel_dispatch_gemm_buffer", "mkernel_combine_buffer",
                          "mkernel_dispatch_gemm_buffer_weighted", "mkernel_combine_buffer_carried"):
                    cands[n]()
            buffer_equal["combine_carried"] = bool(torch.equal(cands["mkernel_combine_buffer_carried"]().float(), c_mk))
            # The counted gather's rows are the default's, bit for bit (rows past the counts: unspecified).
            counted_out = cands["mkernel_dispatch_gemm_counted"]().out
            counted_equal = bool(torch.equal(counted_out[:rows], res.out[:rows]))
            only_equal = bool(torch.equal(cands["mkernel_dispatch_only_counted"]().out[:rows], recv))
            del counted_out
        else:
            counted_equal = only_equal = buffer_equal = carried_equal = None
        moe14_equal = {}
        if nodes > 1 and os.environ.get("BENCH_MOE14") == "1":
            # moe14: the layout by kernels (MKERNEL_MOE_LAYOUT=kernel), the headed dispatch without
            # per-piece hooks (MKERNEL_MOE_DISPATCH_PIPELINE=3), the pipelined one (1) with all SMs or
            # 16 SMs' worth of CTAs for its per-piece gathers (MKERNEL_MOE_GATHER_SMS), 4 pieces, and the
            # narrow combine (reduce16, read per call since moe14) -- each checked against the default's
            # rows (dispatch: the counted rows; combine16: reported, not equal by design).
            fp32_pair = {}
            for name, env14 in moe14_variants().items():
                base = cands["mkernel_combine"] if name.startswith("mkernel_combine") else cands["mkernel_dispatch_gemm"]
                cands[name] = with_env(env14, base)
                got = cands[name]()
                if name.startswith("mkernel_dispatch_only"):
                    moe14_equal[name] = bool(torch.equal(got.out[:rows], recv))
                elif name.startswith("mkernel_dispatch_gemm"):
                    moe14_equal[name] = bool(torch.equal(got.out[:rows], res.out[:rows]) and
                                             torch.equal(got.counts, res.counts) and
                                             torch.equal(got.handle.route, res.handle.route) and
                                             torch.equal(got.handle.recv_counts, res.handle.recv_counts))
                elif name in ("mkernel_combine_early", "mkernel_combine_callerstream", "mkernel_combine16",
                              "mkernel_combine_seq16", "mkernel_combine_pc8",
                              "mkernel_combine_pc4"):  # the default's bits
                    moe14_equal[name] = bool(torch.equal(got.float(), c_mk))
                else:
                    moe14_equal[name + "_max_abs_diff"] = float((got.float() - c_mk).abs().max())
                    if name in ("mkernel_combine_fp32", "mkernel_combine_seq32"):  # moe17: same bits?
                        fp32_pair[name] = got
                del got
            if len(fp32_pair) == 2:
                moe14_equal["mkernel_combine_fp32_equals_seq32"] = bool(torch.equal(*fp32_pair.values()))
            fp32_pair.clear()
        if lean:  # BENCH_MOE_LEAN=1 (--lean): only what moe13's link ratios need (a short device job)
            keep = ("mkernel_dispatch_gemm", "mkernel_dispatch_gemm_counted", "mkernel_dispatch_only",
                    "mkernel_dispatch_only_counted", "engine_gemm", "mkernel_combine",
                    "mkernel_dispatch_only_buffer", "mkernel_dispatch_only_buffer_static",
                    "mkernel_dispatch_gemm_buffer", "mkernel_combine_buffer",
                    "mkernel_dispatch_only_weighted", "mkernel_combine_carried",
                    "mkernel_dispatch_gemm_buffer_weighted", "mkernel_combine_buffer_carried",
                    "link_exchange_gather", "link_exchange_a2a", "link_substrate_all_gather")
            keep = keep + tuple(moe14_variants()) if os.environ.get("BENCH_MOE14") == "1" else keep
            cands = {n: c for n, c in cands.items() if n in keep}
        live(rank, f"{s['name']}: inputs and layout ready; first calls of {len(cands)} candidates")
        for c in cands.values():
            c()
        torch.cuda.synchronize()
        if nodes > 1:
            info = json.loads(torch.ops.mkernel._net_path_info(ctx.handle, world) or "{}")
            live(rank, f"{s['name']}: first calls done; inter-node path: transport {info.get('transport')}, "
                       f"gpu_direct {info.get('gpu_direct')}, copier {info.get('copier')!r}, "
                       f"send {info.get('send_bytes')} bytes")
        else:
            live(rank, f"{s['name']}: first calls done")
        if os.environ.get("BENCH_GRAPH") == "1":
            cands.update(captured(cands, ("mkernel_dispatch_gemm", "unfused_dispatch_gemm",
                                          "mkernel_combine", "unfused_combine")))
        elif lean and os.environ.get("BENCH_MOE14") == "1":
            # moe14: the dispatch alone and the combine replayed from CUDA graphs as well (the GPU's
            # time without the host's issue: s17's host issued the dispatch for ~1.5 ms of its
            # 2.4 ms), each mode captured with its knobs as set at capture time.
            cands.update(captured(cands, tuple(n for n in (
                "mkernel_dispatch_only", "mkernel_dispatch_only_counted", "mkernel_dispatch_only_p1_kl",
                "mkernel_combine", "mkernel_combine_carried",
                "mkernel_combine_early") if n in cands)))
        times = {n: [] for n in cands}
        names = list(cands)
        for it in range(iters):
            for name in names[it % len(names):] + names[:it % len(names)]:
                if name.endswith(SOLO) or SOLO + "_" in name:
                    # One rank at a time, the others waiting on the host (no GPU work).
                    for r in range(world):
                        dist.barrier()
                        if r == rank:
                            times[name].append(timed(cands[name]))
                    continue
                dist.barrier()
                mkernel.all_reduce(gate, group=ctx)
                times[name].append(timed(cands[name]))
        med = {n: statistics.median(v) for n, v in times.items()}
        # Rank 0's own medians at once (the row, with every rank's worst, follows the profile):
        # the inter-node paths' GB/s received from the other nodes per rank, against the link.
        quick = [f"{n} {med[n]:.3f} ms" for n in ("mkernel_dispatch_gemm", "engine_gemm", "mkernel_combine")]
        if nodes > 1:
            remote = world - world // nodes
            rate = link_gbs(os.environ.get("MKERNEL_NET_EMULATE", ""))
            for n, per_rank in (("link_exchange_gather", t * h * 2), ("link_substrate_all_gather", t * h * 2),
                                ("link_exchange_a2a", t * h * 4), ("link_exchange_a2a16", t * h * 2)):
                if n in med:
                    gbs = remote * per_rank / (med[n] * 1e-3) / 1e9
                    quick.append(f"{n} {med[n]:.3f} ms = {gbs:.1f} GB/s" +
                                 (f" = {gbs / rate:.2f}x the link" if rate else ""))
        live(rank, f"{s['name']}: timed {iters} rounds (rank 0 medians: " + "; ".join(quick) + "); profiling")
        phases = {}
        if nodes > 1:
            # Where the dispatch's time goes (MKERNEL_MOE_PHASES: timing events at its phase
            # boundaries, ms from its start on the GPU), the default and the previous sequence.
            modes = [("prev", "0")] if lean else [("pipelined", "1"), ("prev", "0")]
            modes = [(m, {"MKERNEL_MOE_DISPATCH_PIPELINE": v}) for m, v in modes]
            if os.environ.get("BENCH_MOE14") == "1":
                modes += [(m, e14) for m, e14 in MOE14_PHASES.items() if not moe14_dropped(m)]
            for mode, env_m in modes:
                base = cands["mkernel_combine"] if mode.startswith("combine") else cands["mkernel_dispatch_gemm"]
                phases[mode] = phase_profile(with_env(env_m, base),
                                             lambda: (dist.barrier(), mkernel.all_reduce(gate, group=ctx)))
            live(rank, f"{s['name']}: phases (rank 0, ms from the op's start): " + json.dumps(phases))
        dests = torch.zeros(t, world, dtype=torch.bool, device="cuda")
        dests.scatter_(1, idx // el, True)
        dests[:, rank] = False
        sent = int(dests.sum()) * h * 2
        mine = dict(med=med, rows=rows, sent=sent, err_d=err_d, err_c=err_c, plan=plan, ex_equal=ex_equal,
                    samples=times, profile={} if lean else kernel_profile(cands, dist.barrier), phases=phases,
                    counted_equal=counted_equal, only_equal=only_equal, moe14_equal=moe14_equal,
                    buffer_equal=buffer_equal, carried_equal=carried_equal)
        every = [None] * world
        dist.all_gather_object(every, mine)
        if rank == 0:
            # Per sample (aligned: every rank runs the same candidate after the same barrier),
            # the slowest rank; then the median over samples.
            worst = {n: statistics.median(max(m["samples"][n][i] for m in every)
                                          for i in range(iters)) for n in cands}
            flops = 2.0 * max(m["rows"] for m in every) * h * f
            row = dict(s, world=world, nodes=int(os.environ.get("BENCH_NODES", "1")),
                       emulate=os.environ.get("MKERNEL_NET_EMULATE", ""),
                       tokens_per_rank=t, rows_out_bound=rows_out,
                       sent_bytes_per_rank=[m["sent"] for m in every],
                       rows_per_rank=[m["rows"] for m in every],
                       engine_plan=[m["plan"] for m in every],
                       rel_err_vs_unfused_dispatch=max(m["err_d"] for m in every),
                       rel_err_vs_unfused_combine=max(m["err_c"] for m in every))
            for n in cands:
                row[n] = {"median_ms": worst[n], "per_rank_ms": [m["med"][n] for m in every]}
                if "dispatch" in n or "compute" in n or "gemm" in n or "solo" in n:
                    row[n]["tflops_per_rank"] = flops / worst[n] / 1e9
            row["kernel_ms_per_call"] = [m["profile"] for m in every]
            if nodes > 1:  # moe13: DeepEP-style dispatch-only / combine-only figures
                remote = world - world // nodes
                partial = 2 if os.environ.get("MKERNEL_MOE_NODES_COMBINE") == "reduce16" else 4
                wire = {"dispatch": remote * t * h * 2,
                        "combine": (remote * t * h * partial
                                    if os.environ.get("MKERNEL_MOE_NODES_COMBINE") != "allgather" else None)}
                row.update(deepep_style(worst, [m["med"] for m in every], [m["sent"] for m in every], wire,
                                        link_gbs(row["emulate"])))
                row["counted_rows_equal_default"] = [m["counted_equal"] for m in every]
                row["dispatch_only_rows_equal_recv"] = [m["only_equal"] for m in every]
                row["buffer_equal_ops"] = [m["buffer_equal"] for m in every]
                row["carried_equal"] = [m.get("carried_equal") for m in every]
                row["copier_submit_env"] = os.environ.get("MKERNEL_NET_GDR_COPIER_SUBMIT", "")
            if lean:
                rate = link_gbs(row["emulate"])
                row.update(wall_clock(worst, max(m["sent"] for m in every), rate))
                if "mkernel_dispatch_gemm_counted" in worst and "engine_gemm" in worst:
                    over = worst["mkernel_dispatch_gemm_counted"] - worst["engine_gemm"]
                    row["dispatch_overhead_ms_aligned_counted"] = over
                    row["dispatch_link_ratio_wall_counted"] = (
                        max(m["sent"] for m in every) / (over * 1e-3) / 1e9 / rate if (over > 0 and rate) else None)
                    row["dispatch_speedup_counted"] = (worst["mkernel_dispatch_gemm"] /
                                                       worst["mkernel_dispatch_gemm_counted"])
                link = {}
                for n, per_rank in (("link_substrate_all_gather", t * h * 2), ("link_exchange_gather", t * h * 2),
                                    ("link_exchange_a2a", t * h * 4)):
                    if n in worst:
                        link[n] = {"ms": worst[n], "gbs_per_rank": remote * per_rank / (worst[n] * 1e-3) / 1e9}
                row["link_paths"] = link
                row["dispatch_phases"] = {mode: [m["phases"].get(mode, {}) for m in every]
                                          for mode in ["prev"] + list(MOE14_PHASES)
                                          if any(mode in m["phases"] for m in every)}
                if os.environ.get("BENCH_MOE14") == "1":
                    row["moe14_equal"] = [m["moe14_equal"] for m in every]
                    row.update(moe14_summary(worst))
                row["lean"] = True
                print("RESULT " + json.dumps(row), flush=True)
                live(rank, "RESULT " + json.dumps(row))
                if os.environ.get("OUT"):
                    with open(os.path.join(os.environ["OUT"], "moe_ranks_rows.jsonl"), "a") as fh:
                        fh.write(json.dumps(dict(row, commit=os.environ.get("MKERNEL_COMMIT"))) + "\n")
                del res, recv, y
                torch.cuda.empty_cache()
                continue
            row["dispatch_ratio_vs_unfused"] = worst["unfused_dispatch_gemm"] / worst["mkernel_dispatch_gemm"]
            row["dispatch_ratio_vs_compute"] = worst["compute_grouped_mm"] / worst["mkernel_dispatch_gemm"]
            # Per rank, then the worst: the routing + dispatch kernel's share of the fused op.
            row["dispatch_overhead_ms"] = max(m["med"]["mkernel_dispatch_gemm"] - m["med"]["engine_gemm"]
                                              for m in every)
            prof = [m["profile"].get("mkernel_dispatch_gemm", {}) for m in every]
            row["dispatch_kernel_ms"] = max(p.get("dispatch kernel", 0.0) for p in prof)
            row["routing_ms"] = max(p.get("routing", 0.0) for p in prof)
            row["other_aten_ms"] = max(p.get("other (ATen)", 0.0) for p in prof)
            row["allgather_ms"] = max(p.get("all_gather kernel", 0.0) for p in prof)
            # GPU time of the dispatch's moves (everything but its GEMM), worst rank.
            moves = max(sum(v for kk, v in p.items() if kk not in ("grouped GEMM", "host issue", "error"))
                        for p in prof)
            row["dispatch_moves_ms"] = moves
            row["dispatch_gbs_per_rank"] = (max(m["sent"] for m in every) / (moves * 1e-3) / 1e9
                                            if moves > 0 else None)
            for solo in ("engine_gemm_solo", "engine_gemm_solo_256", "engine_gemm_solo_256m",
                         "engine_gemm_solo_128"):
                row[solo + "_vs_compute_solo"] = worst["compute_solo"] / worst[solo]
            row["gemm_kernel_ms"] = max(p.get("grouped GEMM", 0.0) for p in prof)
            row["host_issue_ms"] = max(p.get("host issue", 0.0) for p in prof)
            row["combine_ratio_vs_unfused"] = worst["unfused_combine"] / worst["mkernel_combine"]
            if "mkernel_dispatch_gemm_graph" in worst:  # no host issue on either side
                row["graph_dispatch_ratio_vs_unfused"] = (worst["unfused_dispatch_gemm_graph"] /
                                                          worst["mkernel_dispatch_gemm_graph"])
                row["graph_combine_ratio_vs_unfused"] = (worst["unfused_combine_graph"] /
                                                         worst["mkernel_combine_graph"])
            row["combine_gbs_per_rank"] = max(m["sent"] for m in every) / (worst["mkernel_combine"] * 1e-3) / 1e9
            if row["nodes"] > 1:
                # Wall-clock: the fused op minus the engine GEMM alone on the same rank (the
                # profile's sum of kernel times double-counts overlapping streams).
                row["dispatch_gbs_per_rank_wall"] = (max(m["sent"] for m in every) /
                                                     (row["dispatch_overhead_ms"] * 1e-3) / 1e9
                                                     if row["dispatch_overhead_ms"] > 0 else None)
                # Bytes each rank receives from ranks of other nodes per path call.
                remote = world - world // row["nodes"]
                link = {}
                for n, per_rank in (("link_pcie_d2h", t * h * 2 / remote),
                                    ("link_pcie_h2d", t * h * 2 / remote),
                                    ("link_substrate_all_gather", t * h * 2),
                                    ("link_exchange_gather", t * h * 2),
                                    ("link_substrate_reduce_scatter", t * h * 4),
                                    ("link_exchange_a2a", t * h * 4),
                                    ("link_substrate_reduce_scatter16", t * h * 2),
                                    ("link_exchange_a2a16", t * h * 2)):
                    if n in worst:
                        link[n] = {"ms": worst[n], "gbs_per_rank": remote * per_rank / (worst[n] * 1e-3) / 1e9}
                row["link_paths"] = link
                row["exchange_equals_all_gather"] = [m["ex_equal"] for m in every]
                # moe10: the same wall-clock yardstick from the slowest rank's medians on both
                # sides (dispatch_overhead_ms subtracts each rank's own engine_gemm median, and
                # under MPS the ranks' concurrent GEMM medians differ up to 2x: s12run2 2.98 vs
                # 5.44 ms, so it charged the dispatch with the other rank's GEMM turn).
                rate = link_gbs(row["emulate"])
                row.update(wall_clock(worst, max(m["sent"] for m in every), rate))
                row["dispatch_phases"] = {mode: [m["phases"].get(mode, {}) for m in every]
                                          for mode in ("pipelined", "prev")
                                          if any(mode in m["phases"] for m in every)}
            print("RESULT " + json.dumps(row), flush=True)
            live(rank, "RESULT " + json.dumps(row))
            if os.environ.get("OUT"):  # kept even if a later shape fails or the job is cut short
                with open(os.path.join(os.environ["OUT"], "moe_ranks_rows.jsonl"), "a") as fh:
                    fh.write(json.dumps(dict(row, commit=os.environ.get("MKERNEL_COMMIT"))) + "\n")
        del res, recv, y
        torch.cuda.empty_cache()
    torch.cuda.synchronize()
    ctx.barrier()
    mkernel.shutdown()
    dist.destroy_process_group()


SOLO = "_solo"  # candidates timed one rank at a time (names ending in it or containing "_solo_")


def timed(fn) -> float:
    """One call's GPU time in ms (CUDA events around it, then a sync)."""
    import torch

    start = torch.cuda.Event(enable_timing=True)
    end = torch.cuda.Event(enable_timing=True)
    start.record()
    fn()
    end.record()
    end.synchronize()
    return start.elapsed_time(end)


def with_env(env: dict, fn):
    """fn called with os.environ updated by env (restored after): the ops read their knobs at
    every call. Every rank must call it alike (the knobs choose the protocol)."""

    def call():
        old = {k: os.environ.get(k) for k in env}
        os.environ.update(env)
        try:
            return fn()
        finally:
            for k, v in old.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v

    return call


def moe14_variants() -> dict:
    """moe14's candidates (BENCH_MOE14=1): name -> the environment it runs under (every rank alike)."""
    only, kl = {"MKERNEL_MOE_DISPATCH_ONLY": "1"}, {"MKERNEL_MOE_LAYOUT": "kernel"}
    p1, p3 = {"MKERNEL_MOE_DISPATCH_PIPELINE": "1"}, {"MKERNEL_MOE_DISPATCH_PIPELINE": "3"}
    return {n: e for n, e in {
        "mkernel_dispatch_only_counted_kl": dict(only, MKERNEL_MOE_DISPATCH_GATHER="counted", **kl),
        "mkernel_dispatch_only_p1": dict(only, **p1),
        "mkernel_dispatch_only_p1_kl": dict(only, **p1, **kl),
        "mkernel_dispatch_only_p1_kl_s16": dict(only, **p1, **kl, MKERNEL_MOE_GATHER_SMS="16"),
        "mkernel_dispatch_only_p1_kl_pc6": dict(only, **p1, **kl, MKERNEL_MOE_NET_PIECES="6"),
        "mkernel_dispatch_only_p3_kl": dict(only, **p3, **kl),
        "mkernel_dispatch_only_p3_kl_pc4": dict(only, **p3, **kl, MKERNEL_MOE_NET_PIECES="4"),
        # session 19: mkernel's op stream is the default; these run on the caller's stream
        "mkernel_dispatch_only_p3_kl_callerstream": dict(only, **p3, **kl, MKERNEL_MOE_OP_STREAM="0"),
        "mkernel_dispatch_gemm_p1_kl": dict(p1, **kl),
        "mkernel_dispatch_gemm_p3_kl": dict(p3, **kl),
        "mkernel_combine16": {"MKERNEL_MOE_NODES_COMBINE": "reduce16"},
        "mkernel_combine_early": {"MKERNEL_MOE_COMBINE_EARLY": "1"},
        "mkernel_combine_callerstream": {"MKERNEL_MOE_OP_STREAM": "0"},
        # moe17 (session 19): the pipelined combine (the default) against the sequence it replaced,
        # with the default's narrow partials (the same bits) and with fp32 partials
        "mkernel_combine_seq16": {"MKERNEL_MOE_COMBINE_PIPELINE": "0", "MKERNEL_MOE_NODES_COMBINE": "reduce16"},
        "mkernel_combine_fp32": {"MKERNEL_MOE_NODES_COMBINE": "reduce"},
        "mkernel_combine_seq32": {"MKERNEL_MOE_COMBINE_PIPELINE": "0", "MKERNEL_MOE_NODES_COMBINE": "reduce"},
        "mkernel_combine_pc8": {"MKERNEL_MOE_COMBINE_PIECES": "8"},
        "mkernel_combine_pc4": {"MKERNEL_MOE_COMBINE_PIECES": "4"},
        # session 21: the eager default of sessions 18-20 (mode 3, the finish ending the send
        # stream, row hooks on a pool stream) beside today's (mode 1, finish at the join, hooks on
        # the caller's stream)
        "mkernel_dispatch_only_s20": dict(only, **p3, MKERNEL_MOE_FINISH_AT_JOIN="0", MKERNEL_MOE_HOOKS_ON_CALLER="0"),
        "mkernel_dispatch_gemm_s20": dict(p3, MKERNEL_MOE_FINISH_AT_JOIN="0", MKERNEL_MOE_HOOKS_ON_CALLER="0"),
    }.items() if not moe14_dropped(n)}


def moe14_dropped(name: str) -> bool:
    """BENCH_MOE14_DROP=tag,...: moe14 candidates / phase modes whose name holds `_tag` are left out
    (the device job drops a mode whose test failed in the same run)."""
    tags = [t for t in os.environ.get("BENCH_MOE14_DROP", "").split(",") if t]
    return any(f"_{t}" in f"_{name}" for t in tags)


# moe14's phase profiles (lean rows too): where the kernel layout's dispatch spends its time.
MOE14_PHASES = {
    "p3_kl": {"MKERNEL_MOE_DISPATCH_PIPELINE": "3", "MKERNEL_MOE_LAYOUT": "kernel"},
    "p1_kl": {"MKERNEL_MOE_DISPATCH_PIPELINE": "1", "MKERNEL_MOE_LAYOUT": "kernel"},
    "counted_kl": {"MKERNEL_MOE_DISPATCH_GATHER": "counted", "MKERNEL_MOE_LAYOUT": "kernel"},
    "combine": {"MKERNEL_MOE_COMBINE_EARLY": "0"},          # the pre-moe14 combine's phases
    "combine_early": {"MKERNEL_MOE_COMBINE_EARLY": "1"},
    "s20": {"MKERNEL_MOE_DISPATCH_PIPELINE": "3", "MKERNEL_MOE_FINISH_AT_JOIN": "0",
            "MKERNEL_MOE_HOOKS_ON_CALLER": "0"},  # session 21: the eager default of sessions 18-20
}


def moe14_summary(worst: dict) -> dict:
    """moe14's verdict inputs from the slowest rank's medians: each dispatch-only variant / the
    default's dispatch-only (below 1: faster), the best variant, and each op variant / the default op."""
    out = {}
    base = worst.get("mkernel_dispatch_only")
    only = {n: v for n, v in worst.items() if n.startswith("mkernel_dispatch_only") and v}
    if base:
        out["moe14_only_vs_default"] = {n: v / base for n, v in only.items()}
    eager = {n: v for n, v in only.items() if not n.endswith("_graph")}
    graph = {n: v for n, v in only.items() if n.endswith("_graph")}
    if eager:
        out["moe14_best_only"] = min(eager, key=eager.get)
    if graph:
        out["moe14_best_only_graph"] = min(graph, key=graph.get)
    op = worst.get("mkernel_dispatch_gemm")
    if op:
        out["moe14_op_vs_default"] = {n: worst[n] / op for n in worst
                                      if n.startswith("mkernel_dispatch_gemm") and worst.get(n)}
    for n in ("mkernel_combine16", "mkernel_combine_early", "mkernel_combine_callerstream", "mkernel_combine_seq16",
              "mkernel_combine_fp32", "mkernel_combine_seq32", "mkernel_combine_pc8", "mkernel_combine_pc4"):
        if worst.get("mkernel_combine") and worst.get(n):
            out[f"moe14_{n[8:]}_vs_default"] = worst[n] / worst["mkernel_combine"]
    return out


def phase_profile(fn, align, calls: int = 5) -> dict:
    """Median over `calls` aligned calls of the dispatch's phase times (mkernel._moe_phases under
    MKERNEL_MOE_PHASES=1: ms from the op's start on the GPU, host_ms its issue time); {} where the
    build has no such op. Every rank makes the same calls."""
    import torch

    import time

    runs = []
    for _ in range(calls):
        align()
        torch.cuda.synchronize()
        # moe14: the whole call as timed() sees it (GPU events around it) and the host's time in
        # it, beside the op's own marks (from its start mark, inside the C++ op): call_ms minus
        # the last mark = what the call spends outside the op's marks (Python, the dispatcher,
        # validation, after the GEMM).
        ev0, ev1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        h0 = time.perf_counter()
        ev0.record()
        with_env({"MKERNEL_MOE_PHASES": "1"}, fn)()
        ev1.record()
        h1 = time.perf_counter()
        torch.cuda.synchronize()
        try:
            ph = json.loads(torch.ops.mkernel._moe_phases())
            if ph:
                ph["call_ms"] = ev0.elapsed_time(ev1)
                ph["host_call_ms"] = (h1 - h0) * 1e3
            runs.append(ph)
        except (AttributeError, RuntimeError):
            pass
    keys = sorted({k for r in runs for k in r})
    return {k: statistics.median(r[k] for r in runs if k in r) for k in keys}


def wall_clock(worst: dict, sent_bytes: int, rate: float | None) -> dict:
    """The dispatch's wall-clock yardstick from the slowest rank's medians (``worst``: name ->
    ms): op minus the engine GEMM alone (every rank at once, as inside the op), the bytes this
    rank sends to other ranks over that time, and its ratio to the link; the same for the
    previous sequence (``mkernel_dispatch_gemm_prev``) where timed, and the paired speed-up."""
    out = {}
    gemm = worst.get("engine_gemm")
    for tag, name in (("", "mkernel_dispatch_gemm"), ("_prev", "mkernel_dispatch_gemm_prev"),
                      ("_p8", "mkernel_dispatch_gemm_p8")):
        if name not in worst or gemm is None:
            continue
        over = worst[name] - gemm
        gbs = sent_bytes / (over * 1e-3) / 1e9 if over > 0 else None
        out["dispatch_overhead_ms_aligned" + tag] = over
        out["dispatch_gbs_per_rank_wall_aligned" + tag] = gbs
        out["dispatch_link_ratio_wall" + tag] = gbs / rate if (gbs is not None and rate) else None
    if "mkernel_dispatch_gemm_prev" in worst:
        out["dispatch_speedup_vs_prev"] = worst["mkernel_dispatch_gemm_prev"] / worst["mkernel_dispatch_gemm"]
    return out


def deepep_style(worst: dict, own: list[dict], sent: list[int], wire: dict, rate: float | None) -> dict:
    """moe13: the dispatch's and the combine's bandwidth as DeepEP measures it (its tests: bytes
    over the link / the op's own time, no GEMM inside and none subtracted). ``worst``: name -> the
    slowest rank's median (aligned samples); ``own``: per rank, name -> that rank's own median;
    ``sent``: per rank, the bytes of token rows it sends to other ranks (each token once per
    destination: DeepEP's "logical" bytes, the same for the dispatch and the combine); ``wire``:
    name -> the bytes per rank the op's inter-node path actually moves (the dispatch's exchange
    sends every padded row, the combine's reduce sends fp32 partials: 2x the logical bytes).
    Candidates ``mkernel_dispatch_only*`` (MKERNEL_MOE_DISPATCH_ONLY=1: the dispatch returns before
    the GEMM) and ``mkernel_combine``. Keys: ``<name>_gbs`` (max sent / worst median), ``_link_ratio``,
    ``_gbs_per_rank_own`` (each rank's bytes / its own median: DeepEP's per-rank print),
    ``_link_ratio_own_min``, and ``_wire_link_ratio`` (wire bytes / worst median / link)."""
    out = {}
    for name in sorted(n for n in worst if n.startswith("mkernel_dispatch_only") or n.startswith("mkernel_combine")):
        ms = worst[name]
        if not ms or ms <= 0:
            continue
        gbs = max(sent) / (ms * 1e-3) / 1e9
        own_gbs = [s / (m[name] * 1e-3) / 1e9 if m.get(name) else None for s, m in zip(sent, own)]
        out[name + "_gbs"] = gbs
        out[name + "_link_ratio"] = gbs / rate if rate else None
        out[name + "_gbs_per_rank_own"] = own_gbs
        known = [g for g in own_gbs if g is not None]
        out[name + "_link_ratio_own_min"] = min(known) / rate if (rate and known) else None
        key = "combine" if name.startswith("mkernel_combine") else "dispatch"
        wire_bytes = wire.get(key)
        if name == "mkernel_combine16" and wire_bytes:  # moe14: reduce16's partials, 2 bytes a value
            wire_bytes = wire_bytes // 2 if os.environ.get("MKERNEL_MOE_NODES_COMBINE") != "reduce16" else wire_bytes
        if wire_bytes:
            w = wire_bytes / (ms * 1e-3) / 1e9
            out[name + "_wire_gbs"] = w
            out[name + "_wire_link_ratio"] = w / rate if rate else None
    return out


def print_deepep(row: dict) -> None:
    """The row's moe13 line(s): DeepEP-style dispatch-only / combine-only link ratios."""
    def fmt(v, nd=2):
        return "n/a" if v is None else f"{v:.{nd}f}"

    names = [n for n in ("mkernel_dispatch_only", "mkernel_dispatch_only_counted", "mkernel_dispatch_only_buffer",
                         "mkernel_dispatch_only_buffer_static", "mkernel_dispatch_only_weighted",
                         "mkernel_combine", "mkernel_combine_carried", "mkernel_combine_carried_graph",
                         "mkernel_combine_buffer", "mkernel_combine_buffer_carried")
             if n + "_gbs" in row]
    if not names:
        return
    parts = []
    for n in names:
        parts.append(f"{n[8:]} {fmt(row[n]['median_ms'], 3)} ms = {fmt(row[n + '_gbs'], 1)} GB/s/rank = "
                     f"{fmt(row.get(n + '_link_ratio'))}x the link (own-rank min "
                     f"{fmt(row.get(n + '_link_ratio_own_min'))}x; wire {fmt(row.get(n + '_wire_link_ratio'))}x)")
    print("  DeepEP-style (bytes sent / op time, no GEMM; moe13): " + "; ".join(parts), flush=True)


def captured(cands: dict, names: tuple) -> dict:
    """``<name>_graph``: each candidate captured in a CUDA graph (after the eager warm-up sized
    every buffer) and replayed: the same GPU work without the host's issue time (run 3: 1.35 ms
    per eager dispatch call). Every rank captures the same candidates in the same order."""
    import torch

    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    graphs = {}
    for name in names:
        with torch.cuda.stream(stream):
            cands[name]()  # warm-up on the capture stream
        torch.cuda.synchronize()
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g, stream=stream):
            cands[name]()
        graphs[name + "_graph"] = g.replay
    torch.cuda.current_stream().wait_stream(stream)
    torch.cuda.synchronize()
    return graphs


def kernel_profile(cands: dict, align, calls: int = 3) -> dict:
    """GPU time per call of mkernel's two ops, by kernel kind, from torch.profiler (this rank),
    and the host time to issue a call: {op: {"routing" | "other (ATen)" | "dispatch kernel" |
    "all_gather kernel" | "grouped GEMM" | "combine kernel" | "host issue": ms}}. ``align()``
    (a host barrier: no GPU work of its own in the profile) runs before every profiled call
    on every rank, so no call waits for a peer's profiler to start."""
    import torch
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile

    out = {}
    for name in ("mkernel_dispatch_gemm", "mkernel_combine"):
        kinds: dict[str, float] = {}
        # Every rank makes exactly `calls` calls whatever the profiler does (the ops are
        # collectives: a rank skipping them would leave the others waiting).
        prof = profile(activities=[ProfilerActivity.CUDA])
        try:
            prof.__enter__()
        except Exception as e:  # noqa: BLE001  (a profiler problem must not lose the timings)
            prof, kinds["error"] = None, str(e)[:200]
        for _ in range(calls):
            align()
            torch.cuda.synchronize()
            cands[name]()
            torch.cuda.synchronize()
        if prof is not None:
            try:
                prof.__exit__(None, None, None)
                for ev in prof.key_averages():
                    # Kernels only (an op's event also carries its kernels' time: twice).
                    if ev.device_type != DeviceType.CUDA or not ev.self_device_time_total:
                        continue
                    k = ev.key.lower()
                    kind = ("dispatch kernel" if "dispatch_kernel" in k else
                            "combine kernel" if "combine_kernel" in k else
                            "all_gather kernel" if "all_gather_kernel" in k else
                            "routing" if "routing_" in k else
                            "grouped GEMM" if ("cutlass" in k or "gemm" in k or "sm90" in k) else
                            "other (ATen)")
                    kinds[kind] = kinds.get(kind, 0.0) + ev.self_device_time_total / 1e3 / calls
            except Exception as e:  # noqa: BLE001
                kinds["error"] = str(e)[:200]
        # Host time to issue one call (launches, no sync): a fixed cost the GPU waits for when
        # the kernels are short.
        t0 = time.perf_counter()
        for _ in range(calls):
            cands[name]()
        kinds["host issue"] = (time.perf_counter() - t0) * 1000.0 / calls
        torch.cuda.synchronize()
        out[name] = kinds
    return out


# --table: the shapes (seed 8k and the 131072-token row scaled per rank, Mixtral-like)
# on one node, and the emulated inter-node link's bandwidth yardstick.
TABLE_SHAPES = ("seed_e256_top8_8k", "mixtral_e8_top2_8k", "seed_e256_top8_32k")
TABLE_NODES_SHAPE = "seed_e256_top8_8k"
TABLE_EMULATE = "50GB/s,3us"


def link_gbs(emulate: str) -> float | None:
    """The rate of an MKERNEL_NET_EMULATE string ("50GB/s,3us" -> 50.0), or None."""
    rate = emulate.split(",")[0].strip().lower()
    return float(rate[:-4]) if rate.endswith("gb/s") else None


def print_targets(rows: list[dict]) -> None:
    """Issue 14's targets against this run: >= 1.0x unfused at every shape, >= 0.85x compute
    alone at the 131072-token row (seed_e256_top8_32k at W=2), >= 0.8x the emulated link."""
    print("issue 14 targets:", flush=True)
    for row in rows:
        if row.get("lean"):  # moe13's DeepEP-style figures against the 0.8x target
            link = link_gbs(row.get("emulate", ""))
            line = f"  {row['name']} nodes={row.get('nodes', 1)} (lean)"
            for n in ("mkernel_dispatch_only", "mkernel_dispatch_only_counted", "mkernel_combine"):
                r = row.get(n + "_link_ratio")
                if r is not None:
                    line += f", {n[8:]} {r:.2f}x the {link:g} GB/s link [{'met' if r >= 0.8 else 'MISSED'}]"
            print(line, flush=True)
            continue
        nodes = row.get("nodes", 1)
        where = f"{row['name']} nodes={nodes}"
        d, c = row["dispatch_ratio_vs_unfused"], row["combine_ratio_vs_unfused"]
        line = (f"  {where}: dispatch+GEMM {d:.2f}x unfused [{'met' if d >= 1.0 else 'MISSED'}], "
                f"combine {c:.2f}x [{'met' if c >= 1.0 else 'MISSED'}]")
        if row["name"] == "seed_e256_top8_32k" and nodes == 1:
            v = row["dispatch_ratio_vs_compute"]
            line += f", {v:.2f}x compute alone [{'met' if v >= 0.85 else 'MISSED'}]"
        link = link_gbs(row.get("emulate", ""))
        paths = row.get("link_paths", {})
        # The host-staged path's PCIe leg in this run (the slower copy-engine direction, every
        # rank at once); its host copy (the loopback transport) is not timed here.
        pcie = min((paths[n]["gbs_per_rank"] for n in ("link_pcie_d2h", "link_pcie_h2d") if n in paths),
                   default=None)
        if nodes > 1 and link:
            for what in ("dispatch", "combine"):
                # Across nodes the dispatch's figure is the wall-clock one (overlapping streams).
                gbs = row.get(f"{what}_gbs_per_rank_wall", row.get(f"{what}_gbs_per_rank"))
                if gbs:
                    line += (f", {what} {gbs:.1f} GB/s/rank = {gbs / link:.2f}x the {link:g} GB/s link "
                             f"[{'met' if gbs >= 0.8 * link else 'MISSED'}]")
                    if pcie:
                        line += f" = {gbs / pcie:.2f}x this run's PCIe leg ({pcie:.1f})"
        print(line, flush=True)


def print_lean(row: dict) -> None:
    """A --lean row (moe13's device job): the op with and without the counted gather, the GEMM alone,
    the link paths alone, the moe10 wall-clock ratio and the DeepEP-style ones."""
    def fmt(v, nd=2):
        return "n/a" if v is None else f"{v:.{nd}f}"

    def ms(n):
        return fmt(row.get(n, {}).get("median_ms"), 3)

    print(f"{row['name']} W={row['world']} nodes={row['nodes']} link {row.get('emulate')} (lean, copier submit "
          f"{row.get('copier_submit_env') or 'default'}): dispatch+gemm {ms('mkernel_dispatch_gemm')} ms, counted "
          f"{ms('mkernel_dispatch_gemm_counted')} ms (speed-up {fmt(row.get('dispatch_speedup_counted'), 3)}x); "
          f"GEMM alone {ms('engine_gemm')} ms; dispatch only {ms('mkernel_dispatch_only')} ms, counted "
          f"{ms('mkernel_dispatch_only_counted')} ms; combine {ms('mkernel_combine')} ms; sent/rank "
          f"{row.get('sent_bytes_per_rank')}; counted rows == default {row.get('counted_rows_equal_default')}, "
          f"dispatch-only rows == recv {row.get('dispatch_only_rows_equal_recv')}", flush=True)
    print("  link paths alone: " + ", ".join(f"{n[5:]} {v['ms']:.3f} ms = {v['gbs_per_rank']:.1f} GB/s/rank"
                                            for n, v in row.get("link_paths", {}).items()), flush=True)
    print(f"  moe10 yardstick (op - GEMM alone, slowest rank both sides): "
          f"{fmt(row.get('dispatch_link_ratio_wall'))}x the link, counted "
          f"{fmt(row.get('dispatch_link_ratio_wall_counted'))}x", flush=True)
    print_deepep(row)
    print_moe14(row)
    for mode, per_rank in row.get("dispatch_phases", {}).items():
        print(f"  phases {mode} (ms from the op's start, per rank): " +
              " | ".join(", ".join(f"{k} {v:.3f}" for k, v in p.items()) for p in per_rank), flush=True)


def print_moe14(row: dict) -> None:
    """moe14's lines (rows with --moe14): each variant's ms, link ratio and ratio to the default."""
    def fmt(v, nd=2):
        return "n/a" if v is None else f"{v:.{nd}f}"

    if "moe14_equal" not in row:
        return
    rel = row.get("moe14_only_vs_default", {})
    parts = [f"{n[22:] or 'default'} {fmt(row[n]['median_ms'], 3)} ms = {fmt(row.get(n + '_link_ratio'))}x"
             f" ({fmt(rel.get(n), 3)} of default)"
             for n in sorted(rel) if n in row]
    print("  moe14 dispatch only: " + "; ".join(parts) + f"; best {row.get('moe14_best_only')}, in graphs "
          f"{row.get('moe14_best_only_graph')}", flush=True)
    ops = row.get("moe14_op_vs_default", {})
    print("  moe14 op: " + "; ".join(f"{n[22:] or 'default'} {fmt(row[n]['median_ms'], 3)} ms ({fmt(v, 3)})"
                                     for n, v in sorted(ops.items()) if n in row) +
          f"; combine16 {fmt((row.get('mkernel_combine16') or {}).get('median_ms'), 3)} ms = "
          f"{fmt(row.get('mkernel_combine16_link_ratio'))}x ({fmt(row.get('moe14_combine16_vs_default'), 3)} of "
          f"default); combine early {fmt((row.get('mkernel_combine_early') or {}).get('median_ms'), 3)} ms = "
          f"{fmt(row.get('mkernel_combine_early_link_ratio'))}x ({fmt(row.get('moe14_combine_early_vs_default'), 3)}"
          f" of default); rows equal {row.get('moe14_equal')}", flush=True)
    combines = [n for n in ("mkernel_combine", "mkernel_combine_seq16", "mkernel_combine_fp32", "mkernel_combine_seq32",
                            "mkernel_combine_callerstream", "mkernel_combine_pc8", "mkernel_combine_pc4",
                            "mkernel_combine_graph") if n in row]
    if len(combines) > 1:  # moe17: the pipelined combine (default) against the sequence, bf16 and fp32 partials
        print("  moe17 combine: " + "; ".join(
            f"{n[15:] or 'default'} {fmt(row[n]['median_ms'], 3)} ms = {fmt(row.get(n + '_link_ratio'))}x"
            for n in combines), flush=True)


def print_row(row: dict) -> None:
    """The row's two (or three) lines of the report."""
    if row.get("lean"):
        print_lean(row)
        return
    print(f"{row['name']} W={row['world']}"
          f"{' nodes=%d' % row['nodes'] if row.get('nodes', 1) > 1 else ''}"
          f"{' link ' + row['emulate'] if row.get('emulate') else ''}: dispatch+gemm {row['mkernel_dispatch_gemm']['median_ms']:.3f} ms "
          f"({row['mkernel_dispatch_gemm']['tflops_per_rank']:.0f} TF/s/rank; "
          f"{row['dispatch_ratio_vs_unfused']:.2f}x unfused, {row['dispatch_ratio_vs_compute']:.2f}x compute "
          f"alone; engine GEMM alone {row['engine_gemm']['median_ms']:.3f} ms; profiled per call: "
          f"routing {row['routing_ms']:.3f} ms, other {row['other_aten_ms']:.3f} ms, dispatch kernel "
          f"{row['dispatch_kernel_ms']:.3f} ms, all_gather {row['allgather_ms']:.3f} ms, GEMM "
          f"{row['gemm_kernel_ms']:.3f} ms, host issue {row['host_issue_ms']:.3f} ms); combine {row['mkernel_combine']['median_ms']:.3f} ms ({row['combine_ratio_vs_unfused']:.2f}x "
          f"unfused, {row['combine_gbs_per_rank']:.0f} GB/s/rank); err {row['rel_err_vs_unfused_dispatch']:.1e}/"
          f"{row['rel_err_vs_unfused_combine']:.1e}", flush=True)
    gbs = row["dispatch_gbs_per_rank"]
    print(f"  moves: dispatch {row['dispatch_moves_ms']:.3f} ms GPU = "
          f"{gbs if gbs is None else round(gbs)} GB/s/rank, combine "
          f"{row['combine_gbs_per_rank']:.0f} GB/s/rank; solo GEMMs (one rank at a time): engine "
          f"{row['engine_gemm_solo']['median_ms']:.3f} ms (128x256 {row['engine_gemm_solo_256']['median_ms']:.3f}, "
          f"256x128 {row['engine_gemm_solo_256m']['median_ms']:.3f}, "
          f"128x128 {row['engine_gemm_solo_128']['median_ms']:.3f}), torch._grouped_mm "
          f"{row['compute_solo']['median_ms']:.3f} ms; all ranks at once: 128x256 "
          f"{row['engine_gemm_256']['median_ms']:.3f}, 256x128 {row['engine_gemm_256m']['median_ms']:.3f}, "
          f"128x128 {row['engine_gemm_128']['median_ms']:.3f}, "
          f"torch {row['compute_grouped_mm']['median_ms']:.3f} ms; plan {row['engine_plan'][0]}", flush=True)
    if row.get("link_paths"):
        wall = row.get("dispatch_gbs_per_rank_wall")
        print("  link paths alone (GB/s/rank received from other nodes): " + ", ".join(
            f"{n[5:]} {v['ms']:.2f} ms = {v['gbs_per_rank']:.1f}" for n, v in row["link_paths"].items())
              + f"; dispatch by wall clock (op - GEMM alone) {wall if wall is None else round(wall, 1)} GB/s/rank"
          + f"; exchange == all_gather: {row.get('exchange_equals_all_gather')}",
              flush=True)
    print_moe10(row)
    print_deepep(row)
    if "graph_dispatch_ratio_vs_unfused" in row:
        print(f"  graphs: dispatch+gemm {row['mkernel_dispatch_gemm_graph']['median_ms']:.3f} ms "
              f"({row['graph_dispatch_ratio_vs_unfused']:.2f}x unfused), combine "
              f"{row['mkernel_combine_graph']['median_ms']:.3f} ms "
              f"({row['graph_combine_ratio_vs_unfused']:.2f}x unfused)", flush=True)


def print_moe10(row: dict) -> None:
    """The across-nodes row's moe10 lines: the wall-clock yardstick (slowest rank both sides), the
    previous sequence beside it, and the dispatch's phases per rank."""
    if "dispatch_overhead_ms_aligned" not in row:
        return

    def fmt(v, nd=2):
        return "n/a" if v is None else f"{v:.{nd}f}"

    print(f"  dispatch by wall clock, slowest rank both sides (moe10): op - GEMM "
          f"{fmt(row['dispatch_overhead_ms_aligned'], 3)} ms = {fmt(row['dispatch_gbs_per_rank_wall_aligned'], 1)} GB/s/rank = "
          f"{fmt(row.get('dispatch_link_ratio_wall'))}x the link; previous sequence "
          f"{fmt(row.get('mkernel_dispatch_gemm_prev', {}).get('median_ms'), 3)} ms, op - GEMM "
          f"{fmt(row.get('dispatch_overhead_ms_aligned_prev'), 3)} ms = "
          f"{fmt(row.get('dispatch_link_ratio_wall_prev'))}x; speed-up {fmt(row.get('dispatch_speedup_vs_prev'), 3)}x; "
          f"8 pieces {fmt(row.get('mkernel_dispatch_gemm_p8', {}).get('median_ms'), 3)} ms = "
          f"{fmt(row.get('dispatch_link_ratio_wall_p8'))}x", flush=True)
    for mode, per_rank in row.get("dispatch_phases", {}).items():
        print(f"  phases {mode} (ms from the op's start, per rank): " +
              " | ".join(", ".join(f"{k} {v:.3f}" for k, v in p.items()) for p in per_rank), flush=True)


RANK_CODE = f"""
import sys
sys.path.insert(0, {str(ROOT / 'benchmarks')!r})
from bench_moe_ranks import rank_main
rank_main()
"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--world", type=int, default=2)
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--shapes", default="", help="comma-separated shape names (default: all)")
    ap.add_argument("--nodes", type=int, default=1,
                    help="emulated nodes (W a multiple): the several-node path (csrc/moe_nodes.h)")
    ap.add_argument("--emulate", default=os.environ.get("MKERNEL_NET_EMULATE", ""),
                    help="shape the loopback link between emulated nodes (MKERNEL_NET_EMULATE), "
                         "e.g. 50GB/s,3us")
    ap.add_argument("--graph", action="store_true",
                    help="also time every op captured in a CUDA graph (no host issue time)")
    ap.add_argument("--moe14", action="store_true",
                    help="with --nodes > 1: moe14's candidates (kernel layout, modes 1/3, gather SMs, "
                         "4 pieces, reduce16 combine) and their phases, rows checked against the default")
    ap.add_argument("--lean", action="store_true",
                    help="with --nodes > 1: time only the op (with and without "
                         "MKERNEL_MOE_DISPATCH_GATHER=counted), the dispatch alone "
                         "(MKERNEL_MOE_DISPATCH_ONLY=1), the combine, the GEMM alone and the link paths; "
                         "no unfused path, solo GEMMs or profile (moe13's short device job)")
    ap.add_argument("--table", action="store_true",
                    help="the issue's whole table in one run: " + ", ".join(TABLE_SHAPES) +
                         " on one node, then " + TABLE_NODES_SHAPE + " over 2 emulated nodes "
                         "linked at --emulate (default " + TABLE_EMULATE + "), and a summary "
                         "against the issue's targets (--shapes replaces the one-node shapes)")
    args = ap.parse_args()

    from common import commit, device_info, start_mps, write_result  # noqa: E402
    from tests.launch import run_ranks  # noqa: E402

    shown: set[str] = set()  # rows printed live (by name and nodes)

    def run(nodes: int, emulate: str, shapes: str, iters: int) -> list[dict]:
        import tempfile
        import threading

        live_path = Path(tempfile.mkstemp(prefix="bench_moe_live_", suffix=".txt")[1])
        done = threading.Event()

        def follow() -> None:  # prints rank 0's progress and rows as they are written
            with open(live_path) as fh:
                while True:
                    line = fh.readline()
                    if not line:
                        if done.is_set():
                            return
                        time.sleep(0.2)
                        continue
                    stamp, _, msg = line.rstrip("\n").partition(" ")
                    if msg.startswith("RESULT "):
                        row = json.loads(msg[7:])
                        print(f"[rank 0 {stamp}] row:", flush=True)
                        try:
                            print_row(row)
                            shown.add(f"{row['name']}/{row['nodes']}")
                        except (KeyError, TypeError, ValueError) as e:  # printed again at the end
                            print(f"  (row not printable yet: {e!r})", flush=True)
                    else:
                        print(f"[rank 0 {stamp}] {msg}", flush=True)

        follower = threading.Thread(target=follow, daemon=True)
        follower.start()
        try:
            res = run_ranks(RANK_CODE, args.world, nodes=nodes, timeout=600, env=dict(
                env, **({"CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": str(100 // args.world)} if env else {}),
                NCCL_NVLS_ENABLE="0",
                BENCH_ITERS=str(iters), BENCH_SHAPES=shapes,
                BENCH_GRAPH="1" if args.graph else "0", BENCH_NODES=str(nodes),
                BENCH_MOE_LEAN="1" if args.lean else "0",
                BENCH_MOE14="1" if args.moe14 else os.environ.get("BENCH_MOE14", "0"),
                BENCH_MOE14_DROP=os.environ.get("BENCH_MOE14_DROP", ""),
                MKERNEL_NET_EMULATE=emulate, BENCH_LIVE=str(live_path)))
        finally:
            done.set()
            follower.join(timeout=5)
            live_path.unlink(missing_ok=True)
        out = []
        for r in res:
            if r.returncode != 0:
                raise SystemExit(f"rank {r.rank} failed (rc {r.returncode}):\n{r.stdout[-2000:]}\n"
                                 f"{r.stderr[-4000:]}")
            out += [json.loads(line[7:]) for line in r.stdout.splitlines() if line.startswith("RESULT ")]
        return out

    import torch

    per_gpu = torch.cuda.device_count() >= args.world
    if per_gpu:  # a GPU per rank: no MPS, every rank its whole GPU
        env, stop = {}, (lambda: None)
    else:
        env, stop = start_mps("bench_moe_ranks")
    failed = None
    try:
        if args.table:
            rows = run(1, "", args.shapes or ",".join(TABLE_SHAPES), args.iters)
            for row in rows:  # reported before the several-node part runs
                if f"{row['name']}/{row['nodes']}" not in shown:
                    print_row(row)
            try:
                more = run(2, args.emulate or TABLE_EMULATE, TABLE_NODES_SHAPE, min(args.iters, 5))
            except SystemExit as e:  # keep the one-node rows: write them, then fail
                failed, more = str(e), []
                print(f"several-node part failed: {failed[:3000]}", flush=True)
            for row in more:
                if f"{row['name']}/{row['nodes']}" not in shown:
                    print_row(row)
            rows += more
        else:
            rows = run(args.nodes, args.emulate, args.shapes, args.iters)
            for row in rows:
                if f"{row['name']}/{row['nodes']}" not in shown:
                    print_row(row)
    finally:
        stop()
    if args.table or args.nodes > 1:
        print_targets(rows)
    path = write_result("moe_ranks", {"bench": "moe_ranks", "commit": commit(), "device": device_info(),
                                      "mps": not per_gpu, "world": args.world, "iters": args.iters,
                                      "nodes": args.nodes, "emulate": args.emulate, "table": args.table,
                                      # several nodes: the combine's path (csrc/moe_nodes.h)
                                      "nodes_combine": ("allgather" if os.environ.get(
                                          "MKERNEL_MOE_NODES_COMBINE") == "allgather" else "reduce"),
                                      # the ops' inter-node bytes: "ce" = csrc/moe_net.h
                                      "nodes_path": os.environ.get("MKERNEL_MOE_NODES_PATH", "auto"),
                                      # net10's GPU-direct emulation of the inter-node path
                                      # ("default": unset, _module_loading.GDR_BY_DEFAULT applies)
                                      "net_gdr": os.environ.get("MKERNEL_NET_GDR", "default"),
                                      # the routing kernels (csrc/kernels/moe/moe_routing.cu)
                                      # unless MKERNEL_MOE_ROUTING=aten (the ATen ops)
                                      "moe_routing": ("aten" if os.environ.get("MKERNEL_MOE_ROUTING") == "aten"
                                                      else "kernel"),
                                      # the one-node grouped GEMM gathers its rows where they
                                      # landed (1) or the dispatch expands them first (0)
                                      "moe_gather_a": os.environ.get("MKERNEL_MOE_GATHER_A", "auto"),
                                      # what auto means in this run (csrc/moe_ep.cpp gather_enabled: on
                                      # where a rank has its GPU to itself), for the one-node rows
                                      "moe_gather_a_one_node": {"1": True, "0": False}.get(
                                          os.environ.get("MKERNEL_MOE_GATHER_A", ""), per_gpu),
                                      # the gathered path in two launches each (csrc/moe_ep.cpp)
                                      "moe_overlap": os.environ.get("MKERNEL_MOE_OVERLAP", "0"),
                                      # the dispatch + grouped GEMM as one kernel (1), measured
                                      # against the default per shape (auto), or not (0)
                                      "moe_fused": os.environ.get("MKERNEL_MOE_FUSED", "0"),
                                      "unfused": "mkernel.all_gather of x/topk_idx (or y) + sort + "
                                                 "index_select + torch._grouped_mm (combine: fp32 "
                                                 "weighted sum)", "rows": rows})
    print(path)
    if failed:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
