"""One attention call inside a profiler range, for Nsight Compute (ncu) on the GPU machine.

Warms the call up (plans, autotune, lazy module loading), then runs it once between
cudaProfilerStart / cudaProfilerStop, so that `ncu --profile-from-start off` profiles exactly
the kernels of that call. What:
  native_bwd  the engine's forward once, then the backward alone with the native kernel
              (MKERNEL_ATTN_BWD=native, MKERNEL_ATTN_BWD_KERNEL=--kernel: wgmma_ws by default)
  cudnn_bwd   SDPA's cuDNN forward once, then its backward alone
  engine_fwd  mkernel.attention's forward
  cudnn_fwd   SDPA's cuDNN forward

    ncu --profile-from-start off --clock-control none --section SpeedOfLight ... \\
        -o /tmp/prof python benchmarks/profile_attention.py --what native_bwd --seq 8192

Not under MPS (ncu profiles no MPS client): stop the daemon first (.ci/gpu-dev's mps_stop).
bf16, d = 128 (--head-dim 64 too), 32 heads, b * S = 16384 tokens (bench_attention.py's shapes).
"""

from __future__ import annotations

import argparse
import os

import torch
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.nn.functional import scaled_dot_product_attention as sdpa

import mkernel

TOKENS = 16384


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--what", required=True,
                    choices=["native_bwd", "cudnn_bwd", "engine_fwd", "cudnn_fwd"])
    ap.add_argument("--seq", type=int, default=8192)
    ap.add_argument("--causal", action="store_true")
    ap.add_argument("--heads", type=int, default=32)
    ap.add_argument("--head-dim", type=int, default=128, choices=(64, 128))
    ap.add_argument("--kernel", default="wgmma_ws", help="native_bwd: MKERNEL_ATTN_BWD_KERNEL")
    args = ap.parse_args()
    if args.what == "native_bwd":  # read at each backward call
        os.environ["MKERNEL_ATTN_BWD"] = "native"
        os.environ["MKERNEL_ATTN_BWD_KERNEL"] = args.kernel
    b, s, h, d = max(1, TOKENS // args.seq), args.seq, args.heads, args.head_dim
    gen = torch.Generator(device="cuda").manual_seed(0)
    q, k, v, dout = (torch.randn(b, s, h, d, device="cuda", dtype=torch.bfloat16, generator=gen)
                     for _ in range(4))
    for t in (q, k, v):
        t.requires_grad_()

    def cudnn_forward():
        with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
            return sdpa(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                        is_causal=args.causal).transpose(1, 2)

    if args.what.endswith("_bwd"):
        out = (mkernel.attention(q, k, v, causal=args.causal)[0] if args.what == "native_bwd"
               else cudnn_forward())

        def call():
            return torch.autograd.grad(out, (q, k, v), dout, retain_graph=True)
    elif args.what == "engine_fwd":
        def call():
            with torch.no_grad():
                return mkernel.attention(q, k, v, causal=args.causal)
    else:
        def call():
            with torch.no_grad():
                return cudnn_forward()
    for _ in range(3):
        call()
    torch.cuda.synchronize()
    torch.cuda.cudart().cudaProfilerStart()
    call()
    torch.cuda.synchronize()
    torch.cuda.cudart().cudaProfilerStop()
    print(f"profiled {args.what}: b {b} s {s} h {h} d {d} causal {args.causal}", flush=True)


if __name__ == "__main__":
    main()
