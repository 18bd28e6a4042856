"""The ceilings of the emulated inter-node path on this box, one process, no MPS (~5 s).

The staged path (host staging, the default on loopback) moves each inter-node byte three times:
GPU memory -> pinned host (the sender's kernel), host -> host (the loopback transport's memcpy),
pinned host -> GPU memory (the receiver's kernel). The GPU-direct emulation (MKERNEL_NET_GDR=1)
moves it once, GPU memory -> GPU memory. This prints the rate of each leg on its own, measured
with the copy engine (torch copies; the kernels' SM stores over PCIe were measured by
bench_netpath: GPU-driven bulk 36.9 GB/s in s8run1) and the host's memcpy:

    d2h, h2d      pinned host <-> GPU, one direction, copy engine
    d2h+h2d       both directions at once (two streams): PCIe is full duplex
    d2d           GPU memory -> GPU memory (the GPU-direct emulation's one leg)
    memcpy Nt     host -> host with N torch CPU threads (the loopback copy: 1 proxy thread +
                  up to 4 copy workers per rank, shared by every rank of the box)

    python benchmarks/net_ceiling.py [--mib 64] [--iters 10]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import torch


def _cuda_gbs(fn, nbytes: int, iters: int) -> float:
    fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(iters):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b) * 1e-3)
    return nbytes / statistics.median(times) / 1e9


def _host_gbs(dst: torch.Tensor, src: torch.Tensor, threads: int, iters: int) -> float:
    prev = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        dst.copy_(src)
        times = []
        for _ in range(iters):
            t0 = time.perf_counter()
            dst.copy_(src)
            times.append(time.perf_counter() - t0)
    finally:
        torch.set_num_threads(prev)
    return src.numel() * src.element_size() / statistics.median(times) / 1e9


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mib", type=int, default=64)
    ap.add_argument("--iters", type=int, default=10)
    args = ap.parse_args()
    n = args.mib << 20
    dev = torch.empty(n, dtype=torch.uint8, device="cuda")
    dev2 = torch.empty_like(dev)
    host = torch.empty(n, dtype=torch.uint8, pin_memory=True)
    host2 = torch.empty(n, dtype=torch.uint8, pin_memory=True)
    s1, s2 = torch.cuda.Stream(), torch.cuda.Stream()

    def both() -> None:
        cur = torch.cuda.current_stream()
        s1.wait_stream(cur)
        s2.wait_stream(cur)
        with torch.cuda.stream(s1):
            host.copy_(dev, non_blocking=True)
        with torch.cuda.stream(s2):
            dev2.copy_(host2, non_blocking=True)
        cur.wait_stream(s1)
        cur.wait_stream(s2)

    res = {
        "mib": args.mib,
        "d2h_gbs": _cuda_gbs(lambda: host.copy_(dev, non_blocking=True), n, args.iters),
        "h2d_gbs": _cuda_gbs(lambda: dev.copy_(host, non_blocking=True), n, args.iters),
        "d2h_plus_h2d_gbs_each": _cuda_gbs(both, n, args.iters),
        "d2d_gbs": _cuda_gbs(lambda: dev2.copy_(dev), n, args.iters),
    }
    plain = torch.empty(n, dtype=torch.uint8)
    plain.fill_(1)
    for t in (1, 2, 4, 8):
        res[f"memcpy_{t}t_gbs"] = _host_gbs(plain, host, t, args.iters)
    for k, v in res.items():
        print(f"{k:>24}: {v:.1f}" if isinstance(v, float) else f"{k:>24}: {v}")
    print("CEILING " + json.dumps(res), flush=True)


if __name__ == "__main__":
    main()
