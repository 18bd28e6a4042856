"""Where does the ring's hooked engine kernel lose to the plain engine? (issue 13; benchmarks/NOTES.md
"Session 24": on two whole H200s the ring's compute-alone ceiling — its own hooked launch on local K/V —
ran 2.024 ms against 1.741 ms for the plain engine on the same blocks at mha_b4_h16 non-causal, 16 %.)

One GPU, one process, no communication: rank 0's ring work for W = 2 on K/V held locally
(``torch.ops.mkernel.ring_attention_compute_alone``, the whole mode's hooked launch with every flag
released) under the ring's knobs, against the plain engine (``mkernel.attention``) on the same K/V
under mainloop variants (``MKERNEL_ATTN_VARIANT``; attention_dispatch.cu kVariants), all interleaved in one
timing loop (GPU time: a spin ahead of each sample hides the host side). Non-causal the two compute
exactly the same blocks; causal the ring's zigzag work has no one-launch plain twin, so its rows compare
the hooked configurations among themselves, and the plain variants on a causal square of the same
token count.

    python benchmarks/ring_hooked_gap.py [--shapes mha,gqa,s12k] [--iters 20]

Writes benchmarks/results/ring_hooked_gap_<gpu>_<time>.json.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import commit, device_info, env_set, interleaved_ms, write_result  # noqa: E402

SHAPES = {  # name: (b, s_local, h, h_kv), d = 128, W = 2 (bench_ring_attention.py's rows)
    "mha": (4, 4096, 16, 16),
    "gqa": (1, 8192, 32, 8),
    "s12k": (4, 12288, 16, 16),
}
HOOKED = {  # the ring's knobs, read per call (csrc/ring_attention.cpp)
    # the forwarding policy's kernel (variant 137), claimed tiles, flag skip, and (session 25) the
    # flag cache across tiles and the late claim
    "ring_default": {},
    "ring_nocache": {"MKERNEL_RING_FLAG_CACHE": "0"},
    "ring_early_claim": {"MKERNEL_RING_LATE_CLAIM": "0"},
    "ring_s24": {"MKERNEL_RING_FLAG_CACHE": "0", "MKERNEL_RING_LATE_CLAIM": "0"},  # session 24's default
    "ring_static": {"MKERNEL_RING_TILES": "static"},
    "ring_flagwait": {"MKERNEL_RING_SEND": "kernel"},  # the KV-wait policy (variant 9), claimed
    "ring_flagwait_static": {"MKERNEL_RING_SEND": "kernel", "MKERNEL_RING_TILES": "static"},
    "ring_noskip": {"MKERNEL_RING_FLAG_SKIP": "0", "MKERNEL_RING_FLAG_CACHE": "0"},
    # key chunks per shard (the flags to acquire; the default 4 since session 26)
    "ring_chunks16": {"MKERNEL_RING_CHUNKS": "16"},
    "ring_chunks8": {"MKERNEL_RING_CHUNKS": "8"},
    "ring_chunks2": {"MKERNEL_RING_CHUNKS": "2"},
    # the causal kernels' masked and visible blocks in two loops (non-causal unchanged)
    "ring_split": {"MKERNEL_RING_SPLIT_MASK": "1"},
    # the non-causal engine on the 128x144 tile (flags by keys; the KV-wait policy)
    "ring_n144": {"MKERNEL_RING_BLOCK_N": "144"},
    # the same kernels with no KV wait at all (flags released: safe in this op only)
    "ring_nowait": {"MKERNEL_RING_MEASURE_NO_WAIT": "1"},
    "ring_flagwait_static_nowait": {"MKERNEL_RING_SEND": "kernel", "MKERNEL_RING_TILES": "static",
                                    "MKERNEL_RING_MEASURE_NO_WAIT": "1"},
}
PLAIN_NONCAUSAL = [0, 9, 649, 2184]
PLAIN_CAUSAL = [0, 9, 649]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shapes", default="mha,gqa,s12k")
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--causal", default="0,1")
    args = ap.parse_args()
    import mkernel  # noqa: F401  (registers the ops)

    dev = torch.device("cuda")
    rows = []
    for name in args.shapes.split(","):
        b, s, h, hkv = SHAPES[name]
        for causal in [c == "1" for c in args.causal.split(",")]:
            g = torch.Generator(device=dev).manual_seed(7)
            q = torch.randn(b, s, h, 128, device=dev, dtype=torch.bfloat16, generator=g)
            k = torch.randn(b, 2 * s, hkv, 128, device=dev, dtype=torch.bfloat16, generator=g)
            v = torch.randn(b, 2 * s, hkv, 128, device=dev, dtype=torch.bfloat16, generator=g)
            cands = {}
            for cname, env in HOOKED.items():
                def hooked(env=env):
                    with env_set(env):
                        return torch.ops.mkernel.ring_attention_compute_alone(q, k, v, 0, 2, causal)
                cands[cname] = [hooked]
            if causal:  # a causal square of the same tokens: the plain kernels' causal mainloops
                qc = torch.randn(b, 2 * s, h, 128, device=dev, dtype=torch.bfloat16, generator=g)
            for var in PLAIN_CAUSAL if causal else PLAIN_NONCAUSAL:
                env = {"MKERNEL_ATTN_VARIANT": str(var)} if var else {}
                def plain(env=env):
                    with env_set(env):
                        return mkernel.attention(qc if causal else q, k, v, causal=causal)
                cands[f"plain_{var or 'default'}"] = [plain]
            # Values first: every hooked configuration against the plain default (non-causal: the
            # same blocks, so within bf16 rounding of each other).
            checks = {}
            ref = cands["ring_default"][0]()[0].float()
            for cname in HOOKED:
                o = cands[cname][0]()[0].float()
                checks[cname] = float((o - ref).abs().max() / ref.abs().max())
            if not causal:
                o = cands["plain_default"][0]()[0].float()
                checks["plain_default"] = float((o - ref).abs().max() / ref.abs().max())
            times = interleaved_ms(cands, warmup=3, iters=args.iters, lead_cycles=2_000_000)
            row = {"shape": name, "b": b, "s_local": s, "h": h, "h_kv": hkv, "d": 128, "world": 2,
                   "causal": causal, "rel_max_vs_ring_default": checks,
                   "median_ms": {n: t["median_ms"] for n, t in times.items()},
                   "min_ms": {n: t["min_ms"] for n, t in times.items()}}
            base = row["median_ms"]["ring_default"]
            print(f"{name} causal={causal}: " + ", ".join(
                f"{n} {t:.3f} ({base / t:.3f}x)" for n, t in row["median_ms"].items()), flush=True)
            print(f"  checks: {checks}", flush=True)
            rows.append(row)
    path = write_result("ring_hooked_gap", {
        "benchmark": "ring_hooked_gap", "commit": commit(), "device": device_info(), "iters": args.iters,
        "definition": "median GPU ms per call, interleaved; ring_* = ring_attention_compute_alone (rank 0, "
                      "W = 2) under the ring's knobs; plain_N = mkernel.attention with MKERNEL_ATTN_VARIANT=N "
                      "(non-causal: the same blocks; causal: a causal square of 2 s_local tokens)",
        "rows": rows})
    print(path)


if __name__ == "__main__":
    main()
