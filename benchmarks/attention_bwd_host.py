"""Host cost of one attention backward call: mkernel.attention's (cuDNN's kernel on the engine's LSE,
through the op's Python autograd backward) vs SDPA's own cuDNN backward (C++ autograd).

Session 31's bench_attention --backward read the two backwards at GPU-time parity (0.998-0.999x)
but 0.95-0.97x in wall time from an idle GPU: the gap is host time before the first kernel. This
times the host side alone: with the GPU held busy by a long spin (torch.cuda._sleep), the
perf_counter time of torch.autograd.grad(...) is the enqueue cost (the kernels queue behind the
spin), median over --iters calls; then a torch.profiler table of one call of each (the top host
ops by self CPU time). Diagnostic only: no JSON.

    python benchmarks/attention_bwd_host.py [--s 4096] [--b 4] [--iters 50] [--causal 1]
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.nn.functional import scaled_dot_product_attention as sdpa

import mkernel


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--s", type=int, default=4096)
    ap.add_argument("--b", type=int, default=4)
    ap.add_argument("--h", type=int, default=32)
    ap.add_argument("--iters", type=int, default=50)
    ap.add_argument("--causal", type=int, default=1, choices=(0, 1))
    args = ap.parse_args()
    q, k, v = (torch.randn(args.b, args.s, args.h, 128, device="cuda", dtype=torch.bfloat16,
                           requires_grad=True) for _ in range(3))
    dout = torch.randn(args.b, args.s, args.h, 128, device="cuda", dtype=torch.bfloat16)
    outs = {"mkernel": mkernel.attention(q, k, v, causal=bool(args.causal))[0]}
    with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
        outs["cudnn"] = sdpa(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                             is_causal=bool(args.causal)).transpose(1, 2)
    for name, out in outs.items():
        for _ in range(3):
            torch.autograd.grad(out, (q, k, v), dout, retain_graph=True)
    torch.cuda.synchronize()
    host = {n: [] for n in outs}
    for _ in range(args.iters):
        for name, out in outs.items():
            torch.cuda._sleep(20_000_000)  # ~10 ms of GPU spin: the backward queues behind it
            t = time.perf_counter()
            torch.autograd.grad(out, (q, k, v), dout, retain_graph=True)
            host[name].append((time.perf_counter() - t) * 1e6)
            torch.cuda.synchronize()
    for name, ts in host.items():
        print(f"{name:>8}: host enqueue of one backward: median {statistics.median(ts):7.1f} us, "
              f"min {min(ts):7.1f} us")
    from torch.profiler import ProfilerActivity, profile
    for name, out in outs.items():
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            torch.autograd.grad(out, (q, k, v), dout, retain_graph=True)
            torch.cuda.synchronize()
        print(f"----- {name}: top host ops by self CPU time")
        print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=14, max_name_column_width=60))


if __name__ == "__main__":
    main()
