"""Host cost of one attention call: mkernel.attention's (forward, and a backward on cuDNN's or the
engine's own kernel, through the op's autograd) vs SDPA's own cuDNN attention (C++ autograd).

Session 31's bench_attention --backward read the two backwards at GPU-time parity (0.998-0.999x)
but 0.95-0.97x in wall time from an idle GPU: the gap is host time before the first kernel. This
times the host side alone: with the GPU held busy by a long spin (torch.cuda._sleep), the
perf_counter time of a call is its enqueue cost (the kernels queue behind the spin), median over
--iters rounds, every part timed once a round, the parts in a seeded random order each round. Parts:
  fwd_*       the forward call (mkernel.attention / SDPA on the cuDNN backend);
  bwd_*       torch.autograd.grad of the forward's output (the whole backward as training sees it);
  body        mkernel's backward body called directly (ops._attention_backward_auto: the choice
              and the kernel call, no autograd);
  kernel_op   the kernel op alone with its arguments prepared (aten's cuDNN backward on the
              transposed views, or mkernel::attention_backward);
  grad_empty  torch.autograd.grad of a one-op graph (the engine's own fixed cost);
  *_registered the forward / backward through the op's torch.library autograd registration (a
              direct torch.ops call, as traced code runs it) beside mkernel.attention's eager
              autograd.Function (ops._AttentionFunction; session 43: ~60 µs less per forward on the
              GPU machine's host, the backward the same).
Then, with --profile, a torch.profiler table of one backward of each. Diagnostic only: no JSON.

    python benchmarks/attention_bwd_host.py [--s 4096] [--b 4] [--iters 50] [--causal 1] [--profile] [--pieces]
"""

from __future__ import annotations

import argparse
import random
import statistics
import time
from collections.abc import Callable

import torch
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.nn.functional import scaled_dot_product_attention as sdpa

import mkernel
from mkernel import ops


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--s", type=int, default=4096)
    ap.add_argument("--b", type=int, default=4)
    ap.add_argument("--h", type=int, default=32)
    ap.add_argument("--iters", type=int, default=50)
    ap.add_argument("--causal", type=int, default=1, choices=(0, 1))
    ap.add_argument("--profile", action="store_true")
    ap.add_argument("--pieces", action="store_true", help="also time the backward body's steps")
    args = ap.parse_args()
    causal = bool(args.causal)
    q, k, v = (torch.randn(args.b, args.s, args.h, 128, device="cuda", dtype=torch.bfloat16,
                           requires_grad=True) for _ in range(3))
    dout = torch.randn(args.b, args.s, args.h, 128, device="cuda", dtype=torch.bfloat16)
    scale = 128 ** -0.5

    def fwd_mkernel() -> torch.Tensor:
        return mkernel.attention(q, k, v, causal=causal)[0]

    def fwd_sdpa() -> torch.Tensor:
        with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
            return sdpa(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                        is_causal=causal).transpose(1, 2)

    def fwd_registered() -> torch.Tensor:
        return torch.ops.mkernel.attention.default(q, k, v, causal, None, 0, 0)[0]

    outs = {"mkernel": fwd_mkernel(), "sdpa": fwd_sdpa(), "registered": fwd_registered()}
    out_d, lse_d = (t.detach() for t in mkernel.attention(q, k, v, causal=causal))
    qd, kd, vd = (t.detach() for t in (q, k, v))
    choice = ops._attention_backward_choice(qd, kd, vd, causal)
    if choice == "cudnn":
        seed = ops._philox_placeholder(qd)
        args_t = (dout.transpose(1, 2), qd.transpose(1, 2), kd.transpose(1, 2), vd.transpose(1, 2),
                  out_d.transpose(1, 2), lse_d.unsqueeze(-1), seed, seed, None, None, None,
                  args.s, args.s, 0.0, causal)

        def kernel_op() -> object:
            return torch.ops.aten._scaled_dot_product_cudnn_attention_backward.default(*args_t, scale=scale)
    else:
        def kernel_op() -> object:
            return torch.ops.mkernel.attention_backward.default(dout, qd, kd, vd, out_d, lse_d, causal, scale)
    x = torch.ones(8, device="cuda", requires_grad=True)
    y = x * 2.0
    parts: dict[str, Callable[[], object]] = {
        "fwd_mkernel": fwd_mkernel,
        "fwd_sdpa": fwd_sdpa,
        "fwd_registered": fwd_registered,
        "bwd_mkernel": lambda: torch.autograd.grad(outs["mkernel"], (q, k, v), dout, retain_graph=True),
        "bwd_sdpa": lambda: torch.autograd.grad(outs["sdpa"], (q, k, v), dout, retain_graph=True),
        "bwd_registered": lambda: torch.autograd.grad(outs["registered"], (q, k, v), dout, retain_graph=True),
        "body": lambda: ops._attention_backward_auto(dout, qd, kd, vd, out_d, lse_d, causal, scale),
        "kernel_op": kernel_op,
        "grad_empty": lambda: torch.autograd.grad(y, (x,), torch.ones_like(y), retain_graph=True),
    }
    if args.pieces:  # the body's steps one by one
        parts.update({
            "choice": lambda: ops._attention_backward_choice(qd, kd, vd, causal),
            "philox": lambda: ops._philox_placeholder(qd),
            "capturing": torch.cuda.is_current_stream_capturing,
            "transposes": lambda: [t.transpose(1, 2) for t in (dout, qd, kd, vd, out_d)],
            "cudnn_fn": lambda: ops._attention_backward_cudnn(dout, qd, kd, vd, out_d, lse_d, causal, scale),
            "native_fn": lambda: ops._attention_backward_native(dout, qd, kd, vd, out_d, lse_d, causal, scale),
            "nothing": lambda: None,
        })
    for fn in parts.values():
        for _ in range(3):
            fn()
    torch.cuda.synchronize()
    host: dict[str, list[float]] = {n: [] for n in parts}
    # Each round in its own seeded order: session 42 read the backward body ~110 µs above the
    # bare kernel op even where the two do the same work (the native path), with every round in
    # one fixed order — a part may pay for what the one before it left (allocator, engine thread).
    order = list(parts)
    rng = random.Random(0)
    for _ in range(args.iters):
        rng.shuffle(order)
        for name in order:
            fn = parts[name]
            torch.cuda._sleep(20_000_000)  # ~10 ms of GPU spin: the call queues behind it
            t = time.perf_counter()
            fn()
            host[name].append((time.perf_counter() - t) * 1e6)
            torch.cuda.synchronize()
    print(f"S = {args.s}, b = {args.b}, h = {args.h}, d = 128, causal = {causal}; mkernel's backward "
          f"kernel: {choice}")
    for name, ts in host.items():
        print(f"{name:>12}: host enqueue median {statistics.median(ts):7.1f} us, min {min(ts):7.1f} us")
    if not args.profile:
        return
    from torch.profiler import ProfilerActivity, profile
    for name in ("bwd_mkernel", "bwd_sdpa"):
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            parts[name]()
            torch.cuda.synchronize()
        print(f"----- {name}: top host ops by self CPU time")
        print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=14, max_name_column_width=60))


if __name__ == "__main__":
    main()
