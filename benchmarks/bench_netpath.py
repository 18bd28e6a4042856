"""GPU-driven inter-node path (FIFO -> Go proxy -> transport) between two emulated nodes on one
GPU, side by side with the same transport driven from the host, in one run.

Run as two ranks in two emulated nodes under MPS (the launcher sets the environment):

    python -m mkernel launch --world 2 --nodes 2 --mps benchmarks/bench_netpath.py [--out DIR]

Measured (torch.ops.mkernel._net_pingpong, kernels/comm/net_pingpong.cu):
  - latency: GPU enqueue -> remote flag, one way: the responder's %globaltimer when ping i's
    flag arrived minus the initiator's %globaltimer before it pushed ping i (both ranks share
    the GPU, so one clock), and half the round trip; p50 / p10 / p90 / p99 (target: p50 <= 3 us);
  - integrity: `rounds` rounds of `data` bytes both ways, every 16-byte word verified;
  - throughput: the initiator streams `bulk` rounds of `data` bytes (1 MiB commands) from GPU
    kernels through the proxy.
Baseline, same run, same transport: the data path driven by host producers (core.DatapathPush
of 1 MiB write commands, the Go proxy, the transport: host-to-host throughput) and a host
ping-pong through the same proxy (core.DatapathPush / DatapathWaitFlag; includes Python call
overhead). JSON into benchmarks/results/ (and --out).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

import torch
import torch.distributed as dist

sys.path.insert(0, __file__.rsplit("/", 1)[0])
from common import commit, device_info, write_result  # noqa: E402

import mkernel  # noqa: E402
from mkernel._native import core  # noqa: E402

MIB = 1 << 20


def pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * (len(xs) - 1) + 0.5))]


def summary(xs_ns: list[float]) -> dict:
    return {"p50_us": pct(xs_ns, 0.5) / 1e3, "p10_us": pct(xs_ns, 0.1) / 1e3, "p90_us": pct(xs_ns, 0.9) / 1e3,
            "p99_us": pct(xs_ns, 0.99) / 1e3, "mean_us": statistics.fmean(xs_ns) / 1e3, "n": len(xs_ns)}


def gpu_path(ctx, args) -> dict:
    """The GPU-driven path; returns rank 0's summary ({} on other ranks)."""
    out = torch.ops.mkernel._net_pingpong(ctx.handle, args.iters, args.data, args.rounds, args.bulk, args.net)
    rows = [None] * ctx.world_size
    dist.all_gather_object(rows, out.tolist())
    if ctx.rank != 0:
        return {}
    a, b = rows[0], rows[1]  # rank 0 initiates
    iters = args.iters
    t_push = [a[6 + 2 * i] for i in range(iters)]
    t_pong = [a[7 + 2 * i] for i in range(iters)]
    t_arrive = [b[6 + 2 * i] for i in range(iters)]
    skip = min(iters // 10, 100)  # warm-up: first pushes fault in the mappings
    one_way = [t_arrive[i] - t_push[i] for i in range(skip, iters)]
    half_rtt = [(t_pong[i] - t_push[i]) / 2 for i in range(skip, iters)]
    bulk_s = (a[5] - a[4]) / 1e9
    data_s = (a[2] - a[1]) / 1e9
    return {
        "one_way": summary(one_way),
        "half_round_trip": summary(half_rtt),
        "integrity": {"rounds": args.rounds, "bytes_per_round": args.data,
                      "bad_words_rank0": a[0], "bad_words_rank1": b[0], "ok": a[0] == 0 and b[0] == 0,
                      "seconds": data_s},
        "bulk": {"rounds": args.bulk, "bytes": args.bulk * args.data, "seconds": bulk_s,
                 "GBps": args.bulk * args.data / bulk_s / 1e9 if bulk_s > 0 else None},
        "gpu_memory": bool(a[3]),
    }


def host_path(ctx, args) -> dict:
    """The same transport driven by host producers (Python -> gopy -> Go FIFO push)."""
    rank, peer = ctx.rank, ctx.rank ^ 1
    cfg = {"buffers": {"1": args.data, "2": args.data}, "node": [0, 1], "net": args.net, "timeout_ms": 60000}
    h = core.DatapathCreate(ctx.handle, json.dumps(cfg))
    try:
        def push(kind, **kw):
            core.DatapathPush(h, json.dumps(dict(kind=kind, peer=peer, **kw)), 60000)

        # Throughput: rank 0 streams bulk x data bytes in 1 MiB writes, rank 1 acknowledges.
        ctx.barrier()
        chunk = min(MIB, args.data)
        t0 = time.perf_counter()
        if rank == 0:
            for r in range(1, args.bulk + 1):
                for off in range(0, args.data, chunk):
                    last = off + chunk >= args.data
                    push("write_signal" if last else "write", local_buf=2, local_off=off, remote_buf=1,
                         remote_off=off, bytes=min(chunk, args.data - off), arrival_slot=rank, arrival_seq=r)
            core.DatapathWaitFlag(h, peer, args.bulk, 60000)
        else:
            core.DatapathWaitFlag(h, peer, args.bulk, 60000)
            push("write_signal", arrival_slot=rank, arrival_seq=args.bulk)
        bulk_s = time.perf_counter() - t0
        # Host ping-pong through the same proxy (pure signals).
        n = args.host_iters
        seq0 = args.bulk
        rtt = []
        ctx.barrier()
        for i in range(1, n + 1):
            t = time.perf_counter_ns()
            if rank == 0:
                push("write_signal", arrival_slot=64 + rank, arrival_seq=seq0 + i)
                core.DatapathWaitFlag(h, 64 + peer, seq0 + i, 60000)
                rtt.append((time.perf_counter_ns() - t) / 2)
            else:
                core.DatapathWaitFlag(h, 64 + peer, seq0 + i, 60000)
                push("write_signal", arrival_slot=64 + rank, arrival_seq=seq0 + i)
        ctx.barrier()  # every command finished before the path closes
        stats = json.loads(core.DatapathStatsJSON(h))
    finally:
        core.DatapathDestroy(h)
    if rank != 0:
        return {}
    return {"bulk": {"rounds": args.bulk, "bytes": args.bulk * args.data, "seconds": bulk_s,
                     "GBps": args.bulk * args.data / bulk_s / 1e9},
            "half_round_trip_python": summary(rtt[min(n // 10, 50):]),
            "transport": stats.get("transport"), "fifo_format": stats.get("fifo_format")}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--iters", type=int, default=2000, help="latency ping-pongs")
    ap.add_argument("--data", type=int, default=4 * MIB, help="bytes per round (integrity, bulk)")
    ap.add_argument("--rounds", type=int, default=8, help="integrity rounds (both ways)")
    ap.add_argument("--bulk", type=int, default=32, help="throughput rounds")
    ap.add_argument("--host-iters", type=int, default=500)
    ap.add_argument("--net", default="loopback")
    ap.add_argument("--out", default=os.environ.get("OUT"), help="also write the JSON here")
    args = ap.parse_args()

    if "RANK" not in os.environ:
        raise SystemExit("bench_netpath: run it as 2 ranks in 2 emulated nodes through the launcher: "
                         "python -m mkernel launch --world 2 --nodes 2 --mps benchmarks/bench_netpath.py")
    rank = int(os.environ["RANK"])
    torch.cuda.set_device(rank % torch.cuda.device_count())
    dist.init_process_group("gloo")
    ctx = mkernel.init()
    if ctx.world_size != 2:
        raise SystemExit("bench_netpath: run it as 2 ranks in 2 emulated nodes "
                         "(python -m mkernel launch --world 2 --nodes 2 --mps ...)")
    gpu = gpu_path(ctx, args)
    host = host_path(ctx, args)
    if rank == 0:
        payload = {
            "bench": "netpath", "commit": commit(), "device": device_info(),
            "mps": os.environ.get("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"),
            "net": args.net, "config": vars(args),
            "emulate": os.environ.get("MKERNEL_NET_EMULATE", ""),
            "fifo_ll": os.environ.get("MKERNEL_FIFO_LL", ""),
            "gpu_driven": gpu, "host_driven_baseline": host,
            "ratio_bulk_gpu_over_host": (gpu["bulk"]["GBps"] / host["bulk"]["GBps"]
                                         if gpu["bulk"]["GBps"] and host["bulk"]["GBps"] else None),
            "target_one_way_p50_us": 3.0,
        }
        path = write_result("netpath", payload)
        if args.out:
            os.makedirs(args.out, exist_ok=True)
            with open(os.path.join(args.out, path.name), "w") as f:
                json.dump(payload, f, indent=2)
        ow, hr = gpu["one_way"], gpu["half_round_trip"]
        emu = payload["emulate"] or "off"
        print(f"netpath ({args.net}, link emulation {emu}, GPU buffers: "
              f"{'GPU memory' if gpu['gpu_memory'] else 'host staging'}, FIFO slots "
              f"{host.get('fifo_format') or '?'}: MKERNEL_FIFO_LL={payload['fifo_ll'] or 'unset'})")
        print(f"  GPU enqueue -> remote flag, one way: p50 {ow['p50_us']:.2f} us  p90 {ow['p90_us']:.2f}  "
              f"p99 {ow['p99_us']:.2f}   (half RTT p50 {hr['p50_us']:.2f} us; target p50 <= 3 us)")
        print(f"  integrity: {args.rounds} x {args.data / MIB:.1f} MiB both ways: "
              f"{'ok' if gpu['integrity']['ok'] else 'CORRUPT'}")
        print(f"  throughput GPU-driven {gpu['bulk']['GBps']:.2f} GB/s vs host-driven {host['bulk']['GBps']:.2f} GB/s "
              f"({payload['ratio_bulk_gpu_over_host']:.2f}x); host ping-pong (Python) half RTT p50 "
              f"{host['half_round_trip_python']['p50_us']:.1f} us")
        print(f"  wrote {path}")
    mkernel.shutdown()
    dist.destroy_process_group()
    return 0 if rank != 0 or gpu["integrity"]["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
