"""Attention engine forward vs SDPA's cuDNN and flash (FA2) backends, side by side in one
process (interleaved CUDA-event timing, rotating input sets), bf16.

Shapes: S = S_kv in {1024, 4096, 8192}, 32 heads, d = 128 (and d = 64), causal and not, batch
chosen so every problem has ~16k query rows per head set (b = 16384 / S): the GPU is full.
TFLOP/s counts 4·b·h·S·S_kv·d (halved for causal), as FlashAttention's benchmarks do.
Writes JSON under results/ (device, commit, shapes, medians, TFLOP/s, ratio to cuDNN).

    python benchmarks/bench_attention.py [--quick] [--iters N] [--backward] [--skip-cluster]

--backward times forward + backward instead (loss = (out * dout).sum(), grads of q, k, v):
column mkernel is mkernel.attention's default backward (auto: the engine's own kernel on its
measured rows — non-causal, d = 128, S >= 4096 — else torch's cuDNN backward kernel, FA2's where
cuDNN does not apply, fed with the engine's out/lse; the row's backward_kernel says which; column
mkernel_fa2bwd: FA2's always), the mkernel_native* columns the engine's own backward forced
(MKERNEL_ATTN_BWD=native; mkernel_native: the plain wgmma kernel, the others by NATIVE_KERNELS,
--native-kernels), against SDPA flash and
cuDNN forward + backward; FLOPs 3.5x the forward's (backward = 2.5x, FlashAttention's
convention). Columns bwd_* time the backward alone (through a retained graph). --seqs picks the
lengths there too.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys

import torch
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.nn.functional import scaled_dot_product_attention as sdpa

sys.path.insert(0, __file__.rsplit("/", 1)[0])
from common import add_timing, commit, device_info, env_set, interleaved_ms, write_result  # noqa: E402

import mkernel  # noqa: E402

SEQS = (1024, 4096, 8192)
HEAD_DIMS = (128, 64)
HEADS = 32
TOKENS = 16384  # b * S


def flops(b: int, h: int, s: int, s_kv: int, d: int, causal: bool) -> float:
    f = 4.0 * b * h * s * s_kv * d
    return f / 2 if causal else f


def sdpa_fn(backend, q, k, v, causal):
    qt, kt, vt = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)

    def run():
        with sdpa_kernel(backend):
            return sdpa(qt, kt, vt, is_causal=causal)
    return run


# Columns of the native backward: its main kernel (MKERNEL_ATTN_BWD_KERNEL), ":grid" with the
# causal CTAs in the plain grid order (MKERNEL_ATTN_BWD_TILE_ORDER=grid; wgmma_ws_dqwarp's
# default is longest first).
NATIVE_KERNELS = {"mkernel_native": "wgmma", "mkernel_native_bulk_dq": "wgmma_bulk_dq",
                  "mkernel_native_ws": "wgmma_ws", "mkernel_native_ws_dqwarp": "wgmma_ws_dqwarp",
                  "mkernel_native_ws_dqwarp_grid": "wgmma_ws_dqwarp:grid",
                  "mkernel_native_mma_sync": "mma_sync"}


def native_backward(kernel: str):
    """MKERNEL_ATTN_BWD=native with main kernel `kernel` (name[:tile order]) for the backward
    calls inside."""
    name, _, order = kernel.partition(":")
    env = {"MKERNEL_ATTN_BWD": "native", "MKERNEL_ATTN_BWD_KERNEL": name}
    if order:
        env["MKERNEL_ATTN_BWD_TILE_ORDER"] = order
    return env_set(env)


def forward_out(kind, q, k, v, causal):
    """The attention output of column `kind`: the engine's (mkernel, the native kernels) or
    SDPA's cuDNN / flash backend."""
    if kind == "mkernel" or kind in NATIVE_KERNELS:
        return mkernel.attention(q, k, v, causal=causal)[0]
    backend = SDPBackend.CUDNN_ATTENTION if kind == "cudnn" else SDPBackend.FLASH_ATTENTION
    g = q.shape[2] // k.shape[2]
    if g > 1:  # GQA: SDPA's cuDNN / FA2 backends on k / v expanded to h heads (in the graph)
        k, v = k.repeat_interleave(g, dim=2), v.repeat_interleave(g, dim=2)
    with sdpa_kernel(backend):
        return sdpa(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                    is_causal=causal).transpose(1, 2)


def bwd_only_fn(kind, q, k, v, dout, causal):
    """The backward alone: the forward runs once here, each call replays the gradients of q, k,
    v through the retained graph. kind: mkernel (its default backward, auto), a native kernel's
    column (NATIVE_KERNELS), cudnn, flash."""
    out = forward_out(kind, q, k, v, causal)

    def run():
        if kind in NATIVE_KERNELS:
            with native_backward(NATIVE_KERNELS[kind]):
                return torch.autograd.grad(out, (q, k, v), dout, retain_graph=True)
        return torch.autograd.grad(out, (q, k, v), dout, retain_graph=True)
    return run


def fwd_bwd_fn(kind, q, k, v, dout, causal):
    """One training step of attention: forward, then the gradients of q, k, v."""
    def run():
        if kind == "mkernel_fa2bwd":  # the engine's forward, FA2's backward (the earlier step)
            mkernel.ops.ATTENTION_BACKWARD = "flash"
            try:
                out, _ = mkernel.attention(q, k, v, causal=causal)
                return torch.autograd.grad(out, (q, k, v), dout)
            finally:
                mkernel.ops.ATTENTION_BACKWARD = "auto"
        if kind in NATIVE_KERNELS:  # the engine's forward and its native backward (opt-in)
            with native_backward(NATIVE_KERNELS[kind]):
                out, _ = mkernel.attention(q, k, v, causal=causal)
                return torch.autograd.grad(out, (q, k, v), dout)
        out = forward_out(kind, q, k, v, causal)
        return torch.autograd.grad(out, (q, k, v), dout)
    return run


def main_backward(args) -> None:
    rows = []
    kernels = [k for k in args.native_kernels.split(",") if k]
    natives = [kind for kind, kernel in NATIVE_KERNELS.items() if kernel in kernels]
    if "mkernel_native" not in natives or len(natives) != len(kernels):
        raise SystemExit(f"--native-kernels: wgmma and any of {sorted(NATIVE_KERNELS.values())}, "
                         f"got {args.native_kernels!r}")
    seqs = tuple(int(x) for x in args.seqs.split(",")) if args.seqs else \
        ((8192,) if args.quick else (4096, 8192))
    for s in seqs:
        b = max(1, TOKENS // s)
        d, h_kv = args.head_dim, args.kv_heads or HEADS
        sets = []
        for _ in range(2):
            q = torch.randn(b, s, HEADS, d, device="cuda", dtype=torch.bfloat16, requires_grad=True)
            k, v = (torch.randn(b, s, h_kv, d, device="cuda", dtype=torch.bfloat16, requires_grad=True)
                    for _ in range(2))
            sets.append((q, k, v, torch.randn(b, s, HEADS, d, device="cuda", dtype=torch.bfloat16)))
        for causal in (c for c in (False, True) if ("c" if c else "nc") in args.modes.split(",")):
            cands = {kind: [fwd_bwd_fn(kind, q, k, v, g, causal) for q, k, v, g in sets]
                     for kind in ("mkernel", "mkernel_fa2bwd", *natives, "cudnn", "flash")}
            times = interleaved_ms(cands, warmup=3, iters=args.iters)
            f = 3.5 * flops(b, HEADS, s, s, d, causal)
            row = {"b": b, "s": s, "s_kv": s, "h": HEADS, "h_kv": h_kv, "d": d, "causal": causal,
                   "dtype": "bf16", "what": "forward+backward; bwd_*: the backward alone",
                   "sdpa_gqa": "k / v expanded to h heads (repeat_interleave in the graph)"
                   if h_kv != HEADS else None}
            add_timing(row, times, f)
            row["ratio_vs_cudnn"] = row["cudnn_ms"] / row["mkernel_ms"]
            row["ratio_vs_flash"] = row["flash_ms"] / row["mkernel_ms"]
            best_sdpa_ms = min(row["cudnn_ms"], row["flash_ms"])
            row["native_ratio_vs_best_sdpa"] = best_sdpa_ms / row["mkernel_native_ms"]
            # The backward alone (2.5x the forward's FLOPs), the target: >= 1.0x the best
            # SDPA backend's.
            cands = {f"bwd_{kind}": [bwd_only_fn(kind, q, k, v, g, causal) for q, k, v, g in sets]
                     for kind in ("mkernel", *natives, "cudnn", "flash")}
            times = interleaved_ms(cands, warmup=3, iters=args.iters)
            add_timing(row, times, 2.5 * flops(b, HEADS, s, s, d, causal))
            best_bwd_ms = min(row["bwd_cudnn_ms"], row["bwd_flash_ms"])
            for kind in natives:
                row[f"bwd_{kind}_ratio_vs_best_sdpa"] = best_bwd_ms / row[f"bwd_{kind}_ms"]
            row["bwd_mkernel_ratio_vs_best_sdpa"] = best_bwd_ms / row["bwd_mkernel_ms"]
            # The same backward calls as GPU time alone: a ~2 ms spin queued ahead of each sample
            # lets the host enqueue the backward while the GPU is busy, as in a training step, so
            # the Python autograd / op-dispatch host cost (which differs between the columns)
            # drops out. gpu_bwd_*: the kernels' own time.
            gpu = interleaved_ms({f"gpu_{n}": fns for n, fns in cands.items()}, warmup=2,
                                 iters=args.iters, lead_cycles=4_000_000)
            del cands
            add_timing(row, gpu, 2.5 * flops(b, HEADS, s, s, d, causal))
            best_gpu_ms = min(row["gpu_bwd_cudnn_ms"], row["gpu_bwd_flash_ms"])
            for kind in ("mkernel", *natives):
                row[f"gpu_bwd_{kind}_ratio_vs_best_sdpa"] = best_gpu_ms / row[f"gpu_bwd_{kind}_ms"]
            row["backward_kernel"] = mkernel.ops._attention_backward_choice(
                sets[0][0], sets[0][1], sets[0][2], causal)
            rows.append(row)
            print(f"fwd+bwd d={d} h_kv={h_kv} S={s:5d} b={b:2d} causal={int(causal)}  mkernel {row['mkernel_tflops']:6.1f} "
                  f"({row['backward_kernel']} bwd)  fa2-bwd {row['mkernel_fa2bwd_tflops']:6.1f}  "
                  f"native-bwd {row['mkernel_native_tflops']:6.1f}  "
                  f"cudnn {row['cudnn_tflops']:6.1f}  flash {row['flash_tflops']:6.1f} TF/s  "
                  f"x{row['ratio_vs_cudnn']:.3f} cuDNN  x{row['ratio_vs_flash']:.3f} FA2  "
                  f"native x{row['native_ratio_vs_best_sdpa']:.3f} best SDPA", flush=True)
            natives_txt = "  ".join(
                f"{NATIVE_KERNELS[kind]} {row[f'bwd_{kind}_tflops']:6.1f} "
                f"(x{row[f'bwd_{kind}_ratio_vs_best_sdpa']:.3f})" for kind in natives)
            print(f"   bwd alone, TF/s (x best SDPA): {natives_txt}  default "
                  f"{row['bwd_mkernel_tflops']:6.1f} (x{row['bwd_mkernel_ratio_vs_best_sdpa']:.3f})  "
                  f"cudnn {row['bwd_cudnn_tflops']:6.1f}  flash {row['bwd_flash_tflops']:6.1f}", flush=True)
            print(f"   bwd alone, GPU time, TF/s: default {row['gpu_bwd_mkernel_tflops']:6.1f} "
                  f"(x{row['gpu_bwd_mkernel_ratio_vs_best_sdpa']:.3f})  "
                  + "  ".join(f"{NATIVE_KERNELS[kind]} {row[f'gpu_bwd_{kind}_tflops']:6.1f}" for kind in natives)
                  + f"  cudnn {row['gpu_bwd_cudnn_tflops']:6.1f}  flash {row['gpu_bwd_flash_tflops']:6.1f}",
                  flush=True)
        del sets
    payload = {"bench": "attention_fwd_bwd", "device": device_info(), "commit": commit(),
               "method": f"interleaved CUDA events, 3 warm-up, median of {args.iters}, 2 rotated input sets; "
                         "gpu_bwd_*: the backward alone again with a ~2 ms GPU spin queued ahead of "
                         "each sample (interleaved_ms lead_cycles=4e6): GPU time, no host cost",
               "rows": rows}
    print(write_result("attention_bwd", payload))


# What each mainloop variant changes (AttnTraits::kVariant bits; attention_variants_*.cu).
# Session 8's run 2 measured 1, 3, 5, 9, 13, 17, 21, 33 (benchmarks/NOTES.md); 9 became the default.
# Session 9's run 2 measured 8, 64, 136, 137, 392, 649: 136 is the non-causal default, 9 the causal one.
# ring11 (s10run1): 1033, 1160, bit 10 (the masked / visible block split). attn11: 2184, bit 11.
# attn12: 4105, 6280, bit 12 (claimed tiles).
VARIANT_DOC = {
    8: "V one stage deeper than K (K 2, V 3 stages)",
    9: "8 + softmax row max/sum as 4 partial chains (the default since session 8; causal only since session 9)",
    64: "the default before session 8 (no variant bits)",
    136: "8 + O in the V stage of the tile's last block (no O buffer): K 3 + V 3 stages (the non-causal default in sessions 9-10)",
    137: "9 + O in a V stage: K 3 + V 3 stages",
    392: "8 + O in a V stage, the freed 32 KiB to V: K 2 + V 4 stages",
    649: "9 + O in a V stage, K 2 + V 3 (ring attention's engine-forwarding kernel's mainloop)",
    1033: "9 + masked and wholly visible KV blocks in two consumer loops (ring11; bit for bit 9)",
    1160: "136 + masked and wholly visible KV blocks in two consumer loops (ring11; bit for bit 136)",
    2184: "136 + the last partial round of tiles split along KV, merged in fp32 (attn11; the non-causal default since s10 run 2; causal runs 136)",
    4105: "9 + claimed tiles (attn12, bit 12: each CTA claims its next tile from a counter once its last load of the current one is issued; bit for bit 9)",
    6280: "2184 + claimed tiles (attn12, bit 12; causal runs 136 claimed; bit for bit 2184 / 136)",
    22664: "6280 + O stored from registers (attn13, bits 12 + 14; causal runs 136 claimed + bit 14; bit for bit 6280)",
    34952: "2184's mainloop on a 128x144 tile, K 2 + V 3 stages (attn14, bits 15-16 = 1; causal runs 136)",
    67720: "2184's mainloop on a 128x160 tile, K 2 + V 2 stages (attn14, bits 15-16 = 2; causal runs 136)",
    100488: "2184's mainloop on a 128x176 tile, K 2 + V 2 stages, FA3's d=128 non-causal tile (attn14, bits 15-16 = 3; causal runs 136)",
    133256: "2184 + lazy O rescale (attn15, bit 17: FA4's conditional rescaling, a row's max moves only by > 2^8; a warp skips O's FMULs when none moved; causal runs 136)",
    166024: "34952 + lazy O rescale (attn15, bit 17 on the 128x144 tile, K 2 + V 3; causal runs 136)",
    264328: "2184 + only consumer warpgroup 0 waits on the K/V full barriers (attn15, bit 18: FA3; bit for bit 2184; causal runs 136)",
    395400: "2184 + bits 17 + 18 (attn15: lazy O rescale, warpgroup 0 alone waits on K/V; causal runs 136)",
    137352: "6280 + bit 17 (session 43: the lazy O rescale on the claimed causal walk; non-causal runs 133256; the causal default since s43)",
    268424: "6280 + bit 18 (session 43: warpgroup 0 alone waits on K/V, claimed causal; non-causal runs 264328)",
    399496: "6280 + bits 17 + 18 (session 43, claimed causal; non-causal runs 395400)",
    690312: "166024 + the narrow top block's PV GEMM (attn16, bit 19: a top KV block of <= 64 keys runs 4 of 9 k-steps; causal runs 136)",
    952456: "690312 + only consumer warpgroup 0 waits on the K/V full barriers (attn16: bits 17 + 18 + 19 on 128x144; causal runs 136)",
    1738888: "690312 + the narrow top block's S GEMM, mask and softmax on its 64 columns (attn16, bit 20; causal runs 136)",
    2492552: "395400 + cross-tile overlap (attn17, bit 21: a tile's last PV GEMM shares its turn with the next tile's first S GEMM, Q double-buffered, K 2 + V 3; bit for bit 395400; causal runs 136)",
    6686856: "2492552 + one Q stage (attn17, bit 22: released in the tile's last block step; K 3 + V 3; bit for bit 395400; causal runs 136)",
    2508936: "2492552 + O from registers (bit 14: no meet in the epilogue, the warpgroups' epilogues stagger; bit for bit 395400; causal runs 136)",
    6703240: "6686856 + O from registers (bit 14; one Q stage; bit for bit 395400; causal runs 136)",
    17172616: "395400 + the next tile's coordinates before the epilogue (bit 24; bit for bit 395400; causal runs 136)",
    18516104: "1738888 + the next tile's coordinates before the epilogue (bit 24; bit for bit 1738888; causal runs 136)",
    33949832: "395400 + the tile mailbox (bit 25: the static tiles decoded by the producer's warp 2; bit for bit 395400; causal runs 136)",
    35293320: "1738888 + the tile mailbox (bit 25: the static tiles decoded by the producer's warp 2; bit for bit 1738888; causal runs 136)",
    18568: "2184 + O stored from registers (attn13, bit 14: no cross-warpgroup meet, V stage freed after the last PV; causal runs 136 + bit 14; bit for bit 2184 / 136)",
}


def with_variant(var: int, fn):
    """fn run with MKERNEL_ATTN_VARIANT=var (the engine's measurement switch), unset after."""
    def run():
        os.environ["MKERNEL_ATTN_VARIANT"] = str(var)
        try:
            return fn()
        finally:
            os.environ.pop("MKERNEL_ATTN_VARIANT", None)
    return run


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="S=8192, d=128 only")
    ap.add_argument("--seqs", type=str, default="",
                    help="comma-separated sequence lengths (d=128 only), e.g. 4096,8192")
    ap.add_argument("--iters", type=int, default=30)
    ap.add_argument("--backward", action="store_true", help="forward + backward")
    ap.add_argument("--native-kernels", type=str,
                    default="wgmma,wgmma_bulk_dq,wgmma_ws,wgmma_ws_dqwarp,wgmma_ws_dqwarp:grid,mma_sync",
                    help="--backward: the native backward's main kernels to time "
                         "(MKERNEL_ATTN_BWD_KERNEL values; wgmma always)")
    ap.add_argument("--head-dim", type=int, default=128, choices=(64, 128),
                    help="--backward: the head dim (the native backward's 64 or 128)")
    ap.add_argument("--kv-heads", type=int, default=0,
                    help=f"--backward: kv heads (GQA; a divisor of {HEADS}; 0: {HEADS}, MHA); "
                         "SDPA's columns run on k / v expanded to h heads")
    ap.add_argument("--skip-cluster", action="store_true",
                    help="leave out the cluster tile columns (alt2 256x128, alt3 256x160)")
    ap.add_argument("--skip-alt", action="store_true",
                    help="leave out every opt-in tile column (128x160 and the clusters)")
    ap.add_argument("--host-timed", action="store_true",
                    help="the pre-session-10 timing: each sample from an idle GPU (host-side cost "
                         "counts), columns in a rotating order; default: GPU time alone (a GPU "
                         "spin queued before each sample) in a seeded shuffled order")
    ap.add_argument("--variants", type=str, default="",
                    help="comma-separated mainloop variants (bf16 d=128 128x128; "
                         "MKERNEL_ATTN_VARIANT, csrc/kernels/attention/attention_variants_*.cu), "
                         "each a column mkernel_v<N> beside the default, e.g. 8,64")
    ap.add_argument("--kv-lens", type=str, default="",
                    help="comma-separated key lengths S_kv per query length (d=128; default: "
                         "S_kv = S): the tile-boundary fit's rows, time = fixed + S_kv x per-key "
                         "at a fixed tile count")
    ap.add_argument("--modes", type=str, default="nc,c",
                    help="which rows: nc (non-causal), c (causal), or both (default nc,c)")
    args = ap.parse_args()
    variants = [int(x) for x in args.variants.split(",") if x]
    modes = [m for m in args.modes.split(",") if m]
    if not modes or any(m not in ("nc", "c") for m in modes):
        ap.error("--modes: a comma-separated subset of nc, c")
    causal_modes = tuple(c for c in (False, True) if ("c" if c else "nc") in modes)
    if args.kv_heads and (args.kv_heads < 0 or HEADS % args.kv_heads):
        ap.error(f"--kv-heads: a divisor of {HEADS}")
    # Session 10 (attn11): pinned variant columns read up to 3.6% slower than the default
    # column running the same kernel (s9run3, s10run1). Every sample was timed from an idle GPU,
    # so host-side cost counted, and the rotating order gave each column a fixed predecessor.
    # Now: GPU time alone (a ~1 ms GPU spin queued ahead of each sample's start event) and a
    # seeded shuffled order; --host-timed keeps the old method for comparison.
    timing = {} if args.host_timed else {"lead_cycles": 2_000_000, "shuffle_seed": 0}
    method = ("interleaved CUDA events from an idle GPU (host cost counts), rotating order"
              if args.host_timed else
              "interleaved CUDA events, GPU time only (2e6-cycle GPU spin before each sample), "
              "seeded shuffled order")
    if args.backward:
        main_backward(args)
        return
    rows = []
    seqs = tuple(int(x) for x in args.seqs.split(",")) if args.seqs else ((8192,) if args.quick else SEQS)
    kv_lens = [int(x) for x in args.kv_lens.split(",") if x]
    if kv_lens and (not args.seqs or args.quick):
        ap.error("--kv-lens needs --seqs (d = 128 rows)")
    if kv_lens and True in causal_modes:
        ap.error("--kv-lens: non-causal rows only (--modes nc; causal masks align differently)")
    for d in (HEAD_DIMS[:1] if args.quick or args.seqs else HEAD_DIMS):
        for s, s_kv in [(s, n) for s in seqs for n in (kv_lens or [s])]:
            b = max(1, TOKENS // s)
            sets = [tuple(torch.randn(b, n, HEADS, d, device="cuda", dtype=torch.bfloat16) for n in (s, s_kv, s_kv))
                    for _ in range(3)]
            for causal in causal_modes:
                # The default column goes through the same wrapper as the pinned ones
                # (MKERNEL_ATTN_VARIANT=0: the default kernel), so every mkernel column pays the
                # same host-side path; with the default timing none of it counts anyway.
                cands = {
                    "mkernel": [with_variant(0, lambda q=q, k=k, v=v, c=causal: mkernel.attention(q, k, v, causal=c))
                                for q, k, v in sets],
                    "cudnn": [sdpa_fn(SDPBackend.CUDNN_ATTENTION, q, k, v, causal) for q, k, v in sets],
                    "flash": [sdpa_fn(SDPBackend.FLASH_ATTENTION, q, k, v, causal) for q, k, v in sets],
                }
                alts = []  # (column, tile)
                if d == 128 and causal and not args.skip_cluster:  # the cluster, causal
                    alts = [("mkernel_alt2", (256, 128))]
                if d == 64 and not causal:  # the other built d=64 tile than the default
                    alts = [("mkernel_alt", (128, 128) if s >= 2048 else (192, 128))]
                elif d == 128 and not causal:
                    # FA3-like longer KV blocks; a cluster of two CTAs sharing K/V by multicast
                    alts = [("mkernel_alt", (128, 160))]
                    if not args.skip_cluster:
                        alts += [("mkernel_alt2", (256, 128)), ("mkernel_alt3", (256, 160))]
                if args.skip_alt:
                    alts = []
                if d == 128:
                    for var in variants:
                        cands[f"mkernel_v{var}"] = [with_variant(var, lambda q=q, k=k, v=v, c=causal: mkernel.attention(q, k, v, causal=c))
                                                    for q, k, v in sets]
                for col, (bm, bn) in alts:
                    cands[col] = [lambda q=q, k=k, v=v, bm=bm, bn=bn, c=causal: mkernel.attention(q, k, v, causal=c, block_m=bm, block_n=bn)
                                  for q, k, v in sets]
                times = interleaved_ms(cands, warmup=5, iters=args.iters, **timing)
                f = flops(b, HEADS, s, s_kv, d, causal)
                row = {"b": b, "s": s, "s_kv": s_kv, "h": HEADS, "h_kv": HEADS, "d": d, "causal": causal,
                       "dtype": "bf16"}
                for name, t in times.items():
                    row[f"{name}_ms"] = t["median_ms"]
                    row[f"{name}_min_ms"] = t["min_ms"]
                    row[f"{name}_p90_ms"] = t["p90_ms"]
                    row[f"{name}_tflops"] = f / (t["median_ms"] * 1e-3) / 1e12
                row["ratio_vs_cudnn"] = row["cudnn_ms"] / row["mkernel_ms"]
                row["ratio_vs_flash"] = row["flash_ms"] / row["mkernel_ms"]
                rows.append(row)
                extra = ""
                for var in (variants if d == 128 else []):
                    row[f"ratio_v{var}_vs_cudnn"] = row["cudnn_ms"] / row[f"mkernel_v{var}_ms"]
                    extra += f"  v{var} {row[f'mkernel_v{var}_tflops']:6.1f}"
                for col, (bm, bn) in alts:
                    row[col.replace("mkernel_", "") + "_tile"] = f"{bm}x{bn}"
                    extra += f"  {bm}x{bn} {row[col + '_tflops']:6.1f}"
                print(f"d={d} S={s:5d} S_kv={s_kv:5d} b={b:2d} causal={int(causal)}  mkernel {row['mkernel_tflops']:6.1f}{extra}  "
                      f"cudnn {row['cudnn_tflops']:6.1f}  flash {row['flash_tflops']:6.1f} TF/s  "
                      f"x{row['ratio_vs_cudnn']:.3f} cuDNN  x{row['ratio_vs_flash']:.3f} FA2", flush=True)
            del sets
    payload = {"bench": "attention_fwd", "device": device_info(), "commit": commit(),
               "method": f"{method}, 5 warm-up, median of {args.iters}, 3 rotated input sets",
               "variants": {str(v): VARIANT_DOC.get(v, "?") for v in variants},
               "rows": rows,
               "geomean_ratio_vs_cudnn": statistics.geometric_mean([r["ratio_vs_cudnn"] for r in rows])}
    print(write_result("attention", payload))


if __name__ == "__main__":
    main()
