"""Bus bandwidth of mkernel.all_gather / reduce_scatter / all_reduce, W rank processes on one
GPU under MPS, side by side with a copy-engine baseline measured in the same run.

Each rank gets CUDA_MPS_ACTIVE_THREAD_PERCENTAGE = 100/W. For every W, size and op, the ranks
time (CUDA events, median of --iters samples, each sample --reps calls back to back divided by
reps, inputs rotating over 3 sets, ranks aligned by dist.barrier and then on the GPU by a tiny
all_reduce just before the timed region) the collective and, interleaved
with it, the baseline: every rank at once copies, with one device-to-device torch copy (the
copy engine), as many bytes as the collective moves into that rank from its peers:

    all_gather      (W-1)/W * out bytes        busbw = (W-1)/W * out_bytes / t
    reduce_scatter  (W-1)/W * in bytes         busbw = (W-1)/W * in_bytes / t
    all_reduce      2 (W-1)/W * bytes          busbw = 2 (W-1)/W * bytes / t

(nccl-tests' definitions). The figure per (W, size, op) is the slowest rank's median. On one GPU
all ranks share its HBM: these are the substrate's costs (protocol, flags, copies) at a given
MPS share, not NVLink figures. With --nodes N the ranks are split into N emulated nodes: the
other nodes' blocks go through the GPU inter-node path (host staging, FIFO -> Go proxy ->
transport; MKERNEL_NET picks the transport, tcp by default without NICs), and the copy-engine
figure is the same-GPU ceiling, not the transport's. Emulated nodes on one host use the loopback
transport (shared memory) unless MKERNEL_NET says otherwise; --emulate RATE,LATENCY shapes it like
a NIC (MKERNEL_NET_EMULATE, e.g. 50GB/s,3us).

With --nodes > 1 each row also carries the transport's raw throughput, measured in the same run
between the same ranks: every rank at once pushes, from the host through a data path of the same
transport and shaping (Go FIFO -> proxy -> transport, 4 MiB writes), one per-rank block
(numel * 2 / W bytes) to every rank of another node and waits for theirs. transport_gbs is the
bytes a rank receives from other nodes per second there; net_gbs is the same quantity for the
collective (its inter-node bytes per rank over its time; all_reduce moves them twice). On one
GPU the staged path also crosses that GPU's one PCIe link twice (the kernel stores a block into
host staging, the peer's kernel loads it from there), for every rank at once: d2h / h2d are the
same bytes copied by the copy engine out to pinned host memory / back in, every rank at once,
and pcie the rate of out-then-in (no overlap); net/pcie is the collective against that floor.
cmd p50/p90 is the slowest rank's proxy over the default's timed calls: per command (a piece),
pick-up to completion, i.e. the transport's copy (histogram bucket bounds, powers of two).
--overlap-ab also times every op under OVERLAP_VARIANTS (the overlap mode, MKERNEL_NET_OVERLAP=1:
stagers and readers split, see csrc/kernels/collectives/collectives.cu item_range; the stagers'
eighths of the grid, 0 = the deferred transport waits alone; switched per call through
torch.ops.mkernel._set_net_overlap), interleaved with the default in one process, after checking
each variant's outputs bit for bit against the default's.
--gdr runs the ranks with MKERNEL_NET_GDR=1: the loopback transport's GPU-direct emulation (GPU
send/receive buffers used as over RDMA; the transport books each op on the emulated link and, once
it is due at the peer, moves its bytes with the extension's copy engine into the peer's receive
buffer (CUDA IPC), then places the signal: gocore/transport/loopback/gpudirect.go, csrc/comm/
net_path.cpp NetCopier); rows carry gpu_direct, and with --emulate net/link = net GB/s over the
emulated link's rate. MKERNEL_NET_MIRROR=1 in the environment (the ranks inherit it; unset: on
under GPU-direct, "0" off): one poller per inter-node arrival flag and call, the other CTAs wait on
a device-memory mirror (rows carry flag_mirror).

    python benchmarks/bench_collectives.py [--worlds 2,4,8] [--nodes 1] [--sizes-mib 1,16,64] [--quick]
                                           [--emulate 50GB/s,3us] [--overlap-ab]
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

OPS = ("all_gather", "reduce_scatter", "all_reduce")


def _factor(op: str, world: int) -> float:
    return (2.0 if op == "all_reduce" else 1.0) * (world - 1) / world


def _inter_node_factor(op: str) -> float:
    """Times the collective moves each rank's block across nodes (all_reduce: reduce, then gather)."""
    return 2.0 if op == "all_reduce" else 1.0


class TransportBaseline:
    """The raw transport between the emulated nodes, driven from the host (one per rank)."""

    CHUNK = 4 << 20

    def __init__(self, ctx, node: list[int], max_block: int, net: str) -> None:
        from mkernel._native import core

        self.core, self.ctx, self.node = core, ctx, node
        self.remote = [r for r in range(ctx.world_size) if node[r] != node[ctx.rank]]
        cfg = {"buffers": {"1": ctx.world_size * max_block, "2": max_block}, "node": node, "timeout_ms": 60000}
        if net:
            cfg["net"] = net
        self.h = core.DatapathCreate(ctx.handle, json.dumps(cfg))
        self.seq = 0
        self.transport = json.loads(core.DatapathStatsJSON(self.h)).get("transport")
        self.measured: dict[tuple[int, int], float] = {}

    def send_all(self, block: int) -> None:
        """One round: `block` bytes to every rank of another node; returns when theirs arrived."""
        self.seq += 1
        rank = self.ctx.rank
        for peer in self.remote:
            for off in range(0, block, self.CHUNK):
                n = min(self.CHUNK, block - off)
                last = off + n >= block
                self.core.DatapathPush(self.h, json.dumps(dict(
                    kind="write_signal" if last else "write", peer=peer, local_buf=2, local_off=off,
                    remote_buf=1, remote_off=rank * block + off, bytes=n, arrival_slot=rank,
                    arrival_seq=self.seq)), 60000)
        for src in self.remote:
            self.core.DatapathWaitFlag(self.h, src, self.seq, 60000)

    def time_ms(self, block: int, iters: int) -> float:
        """Median over `iters` rounds (ranks aligned by a barrier before each); once per block."""
        import time

        import torch.distributed as dist

        if (block, iters) in self.measured:
            return self.measured[(block, iters)]
        self.send_all(block)  # warm-up (first touch of the pages)
        samples = []
        for _ in range(iters):
            dist.barrier()
            t = time.perf_counter()
            self.send_all(block)
            samples.append((time.perf_counter() - t) * 1e3)
        self.measured[(block, iters)] = statistics.median(samples)
        return self.measured[(block, iters)]

    def close(self) -> None:
        self.ctx.barrier()  # every rank saw every signal: no command of ours is still needed
        self.core.DatapathDestroy(self.h)


def _with_overlap(setting: tuple[int, int], fn, *args, **kwargs):
    """fn(*args, **kwargs) with the collectives' overlap mode set to (mode, stager eighths)
    (torch.ops.mkernel._set_net_overlap: what MKERNEL_NET_OVERLAP / MKERNEL_NET_STAGERS set),
    then back to the environment's."""
    import torch

    torch.ops.mkernel._set_net_overlap(*setting)
    try:
        return fn(*args, **kwargs)
    finally:
        torch.ops.mkernel._set_net_overlap(-1, -1)


# --overlap-ab: the op again under each of these (mode, stager eighths): the split at half, a
# quarter and three quarters of the grid staging, and the deferred transport waits alone.
OVERLAP_VARIANTS = {
    "overlap": (1, 4),
    "overlap_s2": (1, 2),
    "overlap_s6": (1, 6),
    "defer_only": (1, 0),
}


def _proxy_snapshot(ctx, world: int) -> tuple[list[int], list[int]]:
    """(counts, upper_ns) of this rank's inter-node proxy latency histogram (per command, pick-up
    to completion for a GPU-fed path: the transport's copy of a piece); empty without a path."""
    import torch

    lat = json.loads(torch.ops.mkernel._net_path_info(ctx.handle, world)).get("stats", {}).get("latency", {})
    return list(lat.get("counts") or []), list(lat.get("upper_ns") or [])


def _quantile_us(counts: list[int], upper_ns: list[int], q: float) -> float:
    """Upper bound (us) of the histogram bucket holding quantile q; 0 when empty."""
    total = sum(counts)
    if total == 0:
        return 0.0
    seen = 0
    for c, u in zip(counts, upper_ns):
        seen += c
        if seen >= q * total:
            return u / 1e3
    return upper_ns[-1] / 1e3


def rank_main() -> None:
    """One rank: time every (size, op) and print one RESULT line per case (rank 0)."""
    import torch
    import torch.distributed as dist

    import mkernel

    dist.init_process_group("gloo")
    local = int(os.environ.get("LOCAL_RANK", "0"))
    torch.cuda.set_device(local % torch.cuda.device_count())
    ctx = mkernel.init()
    world, rank = ctx.world_size, ctx.rank
    iters, reps = int(os.environ["BENCH_ITERS"]), int(os.environ["BENCH_REPS"])
    sizes = [int(float(s) * (1 << 20)) for s in os.environ["BENCH_SIZES_MIB"].split(",")]
    dtype = torch.bfloat16
    ctx.reserve(max(sizes))
    gate = torch.zeros(world * 8, device="cuda", dtype=dtype)
    node_of = [0] * world
    dist.all_gather_object(node_of, os.environ.get("MKERNEL_EMULATED_NODE", "0"))
    node = [sorted(set(node_of)).index(v) for v in node_of]
    nodes = len(set(node))
    baseline = None  # opened after the first timed case, on the transport the GPU path chose
    net_info = {}
    for nbytes in sizes:  # bytes of the collective's buffer: AG output, RS input, AR in/out
        numel = nbytes // 2 // (world * 16) * (world * 16)
        for op in OPS:
            shape_numel = numel // world if op == "all_gather" else numel
            xs = [torch.randn(shape_numel, device="cuda", dtype=dtype) for _ in range(3)]
            moved = int(_factor(op, world) * numel * 2)
            src = torch.empty(moved // 2, device="cuda", dtype=dtype)
            dsts = [torch.empty_like(src) for _ in range(3)]
            fn = getattr(mkernel, op)
            cands = {
                "mkernel": lambda i: fn(xs[i % 3], group=ctx),
                "copy_engine": lambda i: dsts[i % 3].copy_(src),
            }
            if nodes > 1:
                # The staged path's PCIe floor on this one GPU: the bytes this rank receives from
                # other nodes (all_reduce: twice) copied out to pinned host memory and in again by
                # the copy engine, every rank at once (all ranks share the GPU's one link; real
                # nodes each have their own).
                remote_n = sum(1 for q in range(world) if node[q] != node[rank])
                pcie_numel = int(_inter_node_factor(op)) * remote_n * (numel // world)
                pcie_host = torch.empty(pcie_numel, dtype=dtype, pin_memory=True)
                pcie_dev = torch.empty(pcie_numel, device="cuda", dtype=dtype)
                cands["pcie_d2h"] = lambda i: pcie_host.copy_(pcie_dev, non_blocking=True)
                cands["pcie_h2d"] = lambda i: pcie_dev.copy_(pcie_host, non_blocking=True)
                if os.environ.get("BENCH_OVERLAP_AB") == "1":
                    for name, setting in OVERLAP_VARIANTS.items():
                        cands[name] = lambda i, setting=setting: _with_overlap(setting, fn, xs[i % 3], group=ctx)
            for i in range(3):  # warm-up (and symmetric-memory growth)
                for c in cands.values():
                    c(i)
            torch.cuda.synchronize()
            for name in (n for n in OVERLAP_VARIANTS if n in cands):  # same inputs, same order: same bits
                for i in range(3):
                    want = cands["mkernel"](i)
                    poison = torch.full_like(want, float("nan"))
                    del poison  # the caching allocator hands this block to the next output
                    got = cands[name](i)
                    if not torch.equal(want, got):
                        raise SystemExit(f"rank {rank}: {op} as {name} {OVERLAP_VARIANTS[name]} differs from the "
                                         f"default (input set {i}, {numel * 2} bytes)")
            times = {n: [] for n in cands}
            proxy_counts, proxy_upper = [], []  # the default candidate's commands, pick-up -> done
            for it in range(iters):
                for name in (list(cands) if it % 2 == 0 else list(cands)[::-1]):
                    dist.barrier()
                    # A GPU-side barrier (a tiny all_reduce) right before the timed region: the
                    # ranks' streams start it together, whatever the host skew after dist.barrier.
                    mkernel.all_reduce(gate, group=ctx)
                    start = torch.cuda.Event(enable_timing=True)
                    end = torch.cuda.Event(enable_timing=True)
                    snap = _proxy_snapshot(ctx, world) if nodes > 1 and name == "mkernel" else None
                    start.record()
                    for r in range(reps):
                        cands[name](it * reps + r)
                    end.record()
                    end.synchronize()
                    times[name].append(start.elapsed_time(end) / reps)
                    if snap is not None:  # the kernels waited for their sends: all finished
                        after, proxy_upper = _proxy_snapshot(ctx, world)
                        delta = [a - b for a, b in zip(after, snap[0])]
                        proxy_counts = [x + y for x, y in zip(proxy_counts, delta)] if proxy_counts else delta
            med = {n: statistics.median(t) for n, t in times.items()}
            block = numel * 2 // world
            if nodes > 1:
                if baseline is None:
                    net_info = json.loads(torch.ops.mkernel._net_path_info(ctx.handle, world))
                    baseline = TransportBaseline(ctx, node, max(sizes) // world + 4096, net_info.get("transport", ""))
                med["transport"] = baseline.time_ms(block, iters)
                if proxy_counts:
                    med["proxy_p50_us"] = _quantile_us(proxy_counts, proxy_upper, 0.5)
                    med["proxy_p90_us"] = _quantile_us(proxy_counts, proxy_upper, 0.9)
                    med["proxy_cmds_per_call"] = sum(proxy_counts) / (iters * reps)
            every = [None] * world
            dist.all_gather_object(every, med)
            if rank == 0:
                worst = {n: max(m[n] for m in every if n in m) for n in med}
                busbw = {n: _factor(op, world) * numel * 2 / (worst[n] * 1e-3) / 1e9 for n in ("mkernel", "copy_engine")}
                row = {
                    "world": world, "nodes": nodes, "op": op, "bytes": numel * 2, "dtype": "bf16",
                    "median_ms": worst["mkernel"], "baseline_ms": worst["copy_engine"],
                    "busbw_gbs": busbw["mkernel"], "baseline_busbw_gbs": busbw["copy_engine"],
                    "ratio": busbw["mkernel"] / busbw["copy_engine"],
                    "per_rank_ms": [m["mkernel"] for m in every]}
                if baseline is not None:
                    inter = len(baseline.remote) * block  # bytes rank 0 receives from other nodes
                    row.update({
                        "net": net_info.get("transport"), "emulate": os.environ.get("MKERNEL_NET_EMULATE", ""),
                        "net_stage": "whole" if os.environ.get("MKERNEL_NET_STAGE") == "whole" else "parallel",
                        "gpu_direct": bool(net_info.get("gpu_direct", False)),
                        # collectives.cu net_flag_mirror: "1" on, unset on under GPU-direct, else off
                        "flag_mirror": os.environ.get("MKERNEL_NET_MIRROR", "") == "1" or (
                            os.environ.get("MKERNEL_NET_MIRROR", "") == "" and bool(net_info.get("gpu_direct", False))),
                        "transport_ms": worst["transport"],
                        "transport_gbs": inter / (worst["transport"] * 1e-3) / 1e9,
                        "net_gbs": _inter_node_factor(op) * inter / (worst["mkernel"] * 1e-3) / 1e9,
                        "pcie_d2h_ms": worst["pcie_d2h"], "pcie_h2d_ms": worst["pcie_h2d"],
                        # the slowest rank's proxy: per command (a piece, or the gate's), pick-up to
                        # completion, bucket upper bounds (powers of two)
                        "proxy_p50_us": worst.get("proxy_p50_us"), "proxy_p90_us": worst.get("proxy_p90_us"),
                        "proxy_cmds_per_call": worst.get("proxy_cmds_per_call"),
                        "pcie_d2h_gbs": _inter_node_factor(op) * inter / (worst["pcie_d2h"] * 1e-3) / 1e9,
                        "pcie_h2d_gbs": _inter_node_factor(op) * inter / (worst["pcie_h2d"] * 1e-3) / 1e9,
                        # out then in, one after the other: the staged path with no overlap
                        "pcie_gbs": _inter_node_factor(op) * inter
                        / ((worst["pcie_d2h"] + worst["pcie_h2d"]) * 1e-3) / 1e9,
                        "baseline_transport": baseline.transport})
                    for name in (n for n in OVERLAP_VARIANTS if n in worst):
                        row.update({
                            f"{name}_ms": worst[name],
                            f"{name}_busbw_gbs": _factor(op, world) * numel * 2 / (worst[name] * 1e-3) / 1e9,
                            f"{name}_speedup": worst["mkernel"] / worst[name],
                            f"{name}_bits_equal": True})  # checked on every rank above
                print("RESULT " + json.dumps(row), flush=True)
    torch.cuda.synchronize()
    if baseline is not None:
        baseline.close()
    ctx.barrier()
    mkernel.shutdown()
    dist.destroy_process_group()


RANK_CODE = f"""
import os, sys
sys.path.insert(0, {str(ROOT / 'benchmarks')!r})
from bench_collectives import rank_main
try:
    rank_main()
except BaseException as e:  # one line the parent prints whatever the rank's logs hold
    print(f"RANKFAIL rank {{os.environ.get('RANK')}}: {{type(e).__name__}}: {{str(e)[:1500]}}", flush=True)
    raise
"""


def _link_gbs(emulate: str) -> float | None:
    """The emulated link's rate in GB/s from a MKERNEL_NET_EMULATE value ("50GB/s,3us"), or None."""
    rate = emulate.split(",")[0].strip()
    if not rate.upper().endswith("GB/S"):
        return None
    try:
        return float(rate[:-4])
    except ValueError:
        return None


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--worlds", default="2,4,8")
    ap.add_argument("--nodes", type=int, default=1, help="emulated nodes (each W a multiple)")
    ap.add_argument("--sizes-mib", default="1,16,64")
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--quick", action="store_true", help="W=2,4 at 1 and 16 MiB, 10 samples")
    ap.add_argument("--overlap-ab", action="store_true",
                    help="with --nodes > 1: also time every op under OVERLAP_VARIANTS (the overlap mode with "
                         "4, 2, 6 and 0 eighths of the grid staging), interleaved, outputs checked bit for bit")
    ap.add_argument("--gdr", action="store_true",
                    help="MKERNEL_NET_GDR=1 for the ranks: loopback's GPU-direct emulation (GPU buffers, no host staging)")
    ap.add_argument("--emulate", default=os.environ.get("MKERNEL_NET_EMULATE", ""),
                    help="shape the loopback link between emulated nodes (MKERNEL_NET_EMULATE), e.g. 50GB/s,3us")
    args = ap.parse_args()
    if args.quick:
        args.worlds, args.sizes_mib, args.iters = "2,4", "1,16", 10

    from common import commit, device_info, start_mps, write_result  # noqa: E402
    from tests.launch import run_ranks  # noqa: E402

    env, stop = start_mps("bench_collectives")
    rows, failed = [], []
    try:
        for world in (int(w) for w in args.worlds.split(",")):
            res = run_ranks(RANK_CODE, world, nodes=args.nodes, timeout=600, env=dict(
                env, CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=str(100 // world), NCCL_NVLS_ENABLE="0",
                BENCH_NODES=str(args.nodes), MKERNEL_NET_EMULATE=args.emulate,
                BENCH_OVERLAP_AB="1" if args.overlap_ab else "0", MKERNEL_NET_GDR="1" if args.gdr else "0",
                BENCH_ITERS=str(args.iters), BENCH_REPS=str(args.reps), BENCH_SIZES_MIB=args.sizes_mib))
            for r in res:  # rank 0 prints the rows; keep those a failing W finished
                rows += [json.loads(line[7:]) for line in r.stdout.splitlines() if line.startswith("RESULT ")]
            bad = [r for r in res if r.returncode != 0]
            if bad:
                # Every failing rank's own reason: under MPS one rank's fault ends the others, whose
                # errors then only say so; the first to fail says why.
                for r in bad:
                    why = [line for line in r.stdout.splitlines() if line.startswith("RANKFAIL")]
                    print(f"W={world} rank {r.rank} failed (rc {r.returncode}): {why[0] if why else '(no RANKFAIL line)'}",
                          file=sys.stderr)
                r = bad[0]
                print(f"W={world} rank {r.rank}, stderr tail:\n{r.stderr[-3000:]}", file=sys.stderr)
                failed.append({"world": world, "ranks": {r.rank: r.returncode for r in bad},
                               "reasons": [line for r in bad for line in r.stdout.splitlines()
                                           if line.startswith("RANKFAIL")]})
                break  # the larger W would meet the same
    finally:
        stop()
    if args.nodes > 1 and rows:
        print(f"inter-node transport: {rows[0].get('net')} (emulate: {args.emulate or 'off'}; "
              f"staging: {rows[0].get('net_stage')}; gpu_direct: {rows[0].get('gpu_direct')}; "
              f"flag mirror: {rows[0].get('flag_mirror')})")
    link = _link_gbs(args.emulate)
    print(f"{'W':>2} {'N':>2} {'op':<15} {'MiB':>6} {'ms':>8} {'busbw GB/s':>11} {'copy-engine':>12} {'ratio':>6}"
          + (f" {'net GB/s':>9} {'transport':>10} {'net/tr':>7} {'d2h':>6} {'h2d':>6} {'pcie':>6} {'net/pcie':>8}"
             f" {'cmd p50/p90 us':>14}" if args.nodes > 1 else ""))
    for row in rows:
        line = (f"{row['world']:>2} {row.get('nodes', 1):>2} {row['op']:<15} {row['bytes'] / 2**20:>6.1f} {row['median_ms']:>8.3f} "
                f"{row['busbw_gbs']:>11.1f} {row['baseline_busbw_gbs']:>12.1f} {row['ratio']:>6.2f}")
        if "transport_gbs" in row:
            line += f" {row['net_gbs']:>9.2f} {row['transport_gbs']:>10.2f} {row['net_gbs'] / row['transport_gbs']:>7.2f}"
            line += (f" {row['pcie_d2h_gbs']:>6.1f} {row['pcie_h2d_gbs']:>6.1f} {row['pcie_gbs']:>6.1f}"
                     f" {row['net_gbs'] / row['pcie_gbs']:>8.2f}")
            if row.get("proxy_p50_us") is not None:
                line += f" {row['proxy_p50_us']:>5.0f}/{row['proxy_p90_us']:<5.0f}"
            if link:
                row["net_over_link"] = row["net_gbs"] / link
                line += f"  net/link {row['net_over_link']:.2f}"
        variants = [n for n in OVERLAP_VARIANTS if f"{n}_ms" in row]
        if variants:
            line += "   " + " ".join(f"{n} x{row[f'{n}_speedup']:.2f}" for n in variants)
        print(line, flush=True)
    write_result("collectives", {"commit": commit(), "device": device_info(), "mps": True,
                                 "nodes": args.nodes, "emulate": args.emulate,
                                 "transport_baseline": "host-driven data path of the same transport and "
                                                       "shaping: every rank pushes one per-rank block to "
                                                       "every rank of another node (4 MiB writes)",
                                 "baseline": "one device-to-device torch copy (copy engine) of the bytes "
                                             "the collective moves into each rank, all ranks at once",
                                 "pcie_baseline": "copy-engine copies of the bytes a rank receives from other "
                                                  "nodes (all_reduce: twice) to pinned host memory (d2h) and "
                                                  "back (h2d), all ranks at once; pcie_gbs = those bytes over "
                                                  "d2h + h2d time (the staged path's PCIe floor, no overlap)",
                                 "iters": args.iters, "reps": args.reps, "rows": rows, "failed": failed})
    if failed:
        raise SystemExit(f"failed: {failed}")


if __name__ == "__main__":
    main()
