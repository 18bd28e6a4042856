"""Is the attention forward power-bound? Each candidate (the engine's variants, SDPA's cuDNN and
flash backends) runs back to back in sustained windows (default 2 s) beside nvidia-smi's SM clock,
board power and clock-event reasons (benchmarks/power_windows.py): per candidate the median time
per call, TF/s, the median clock and power, the work per clock cycle (TF/s per GHz: what a kernel
does with its cycles) and per joule (TF/s per W: what it does with its power).

Session 51's question: the timeline builds say bit 25 (the tile mailbox) saves 0.6% of a tile's
cycles, the bench saw ~0; a kernel at the board's power cap trades saved cycles for a lower clock,
and then what decides the race with cuDNN is work per joule, not per cycle.

--causal, --head-dim 64, --heads-kv (GQA; give --backends= then: SDPA would need K/V expanded)
and --backward (the backward alone, each candidate's own: the engine's default choice, SDPA's
backend's) pick the problem.

    python benchmarks/attention_power.py [--seq 4096] [--variants 0,1738888,35293320,0:8] [--window 2]
"""

from __future__ import annotations

import argparse
import sys

import torch
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.nn.functional import scaled_dot_product_attention as sdpa

sys.path.insert(0, __file__.rsplit("/", 1)[0])
from common import commit, device_info, env_set, write_result  # noqa: E402
from power_windows import sustained  # noqa: E402

import mkernel  # noqa: E402


def candidates(specs: list[str], q, k, v, backends: list[str], causal: bool):
    """specs: "N" (mainloop variant N, 0 the default) or "N:MB" (with an L2 section budget of MB
    MiB, MKERNEL_ATTN_L2_SECTION_MB)."""
    qt, kt, vt = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
    out = {}
    for spec in specs:
        var, _, mb = spec.partition(":")
        name = ("mkernel" if int(var) == 0 else f"v{var}") + (f"@l2={mb}" if mb else "")
        env = {}
        if int(var):
            env["MKERNEL_ATTN_VARIANT"] = var
        if mb:
            env["MKERNEL_ATTN_L2_SECTION_MB"] = mb

        def run(env=env):
            with env_set(env):
                return mkernel.attention(q, k, v, causal=causal)
        out[name] = run
    for be in backends:
        backend = SDPBackend.CUDNN_ATTENTION if be == "cudnn" else SDPBackend.FLASH_ATTENTION

        def run_sdpa(backend=backend):
            with sdpa_kernel(backend):
                return sdpa(qt, kt, vt, is_causal=causal)
        out[be] = run_sdpa
    return out


def bwd_env(spec: str) -> dict[str, str]:
    """--bwd-specs entry -> the backward's environment: auto (the engine's choice), native (its
    own kernel, wgmma_ws_dqwarp), native:MB (with an L2 section budget of MB MiB for the causal
    order, MKERNEL_ATTN_BWD_L2_SECTION_MB), native:grid (the plain grid order)."""
    if spec == "auto":
        return {}
    kind, _, opt = spec.partition(":")
    if kind != "native":
        raise SystemExit(f"--bwd-specs: auto, native, native:MB or native:grid, got {spec!r}")
    env = {"MKERNEL_ATTN_BWD": "native", "MKERNEL_ATTN_BWD_KERNEL": "wgmma_ws_dqwarp"}
    if opt == "grid":
        env["MKERNEL_ATTN_BWD_TILE_ORDER"] = "grid"
    elif opt:
        env["MKERNEL_ATTN_BWD_L2_SECTION_MB"] = str(int(opt))
    return env


def backward_candidates(fwd: dict, q, k, v, dout, envs: dict[str, dict] | None = None) -> dict:
    """The backward alone of each forward candidate: its forward runs once here (grad enabled),
    each call then takes the gradients of q, k, v through the retained graph (the engine's
    default backward choice, or SDPA's backend's own). envs: name -> the environment of that
    candidate's backward calls (bwd_env)."""
    out = {}
    for name, fn in fwd.items():
        res = fn()
        o = res[0] if isinstance(res, tuple) else res
        g = dout if o.shape == dout.shape else dout.transpose(1, 2)  # SDPA's (b, h, s, d)
        env = (envs or {}).get(name, {})

        def run(o=o, g=g, env=env):
            with env_set(env):
                return torch.autograd.grad(o, (q, k, v), g, retain_graph=True)
        out[name] = run
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seq", type=int, default=4096)
    ap.add_argument("--variants", type=str, default="0,1738888,35293320",
                    help="N (mainloop variant, 0 the default) or N:MB (an L2 section budget of MB MiB)")
    ap.add_argument("--backends", type=str, default="cudnn")
    ap.add_argument("--window", type=float, default=2.0, help="seconds per candidate window")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--tokens", type=int, default=16384, help="b * S")
    ap.add_argument("--causal", action="store_true")
    ap.add_argument("--backward", action="store_true",
                    help="time the backward alone (2.5x the forward's FLOPs) through a retained graph")
    ap.add_argument("--bwd-specs", type=str, default="",
                    help="--backward: the engine's candidates as backward choices instead of forward "
                         "variants: auto, native, native:MB, native:grid (bwd_env)")
    ap.add_argument("--head-dim", type=int, default=128, choices=(64, 128))
    ap.add_argument("--heads-kv", type=int, default=0, help="K/V heads (GQA); 0: 32, as q")
    args = ap.parse_args()
    s, h, d, h_kv = args.seq, 32, args.head_dim, args.heads_kv or 32
    b = max(1, args.tokens // s)
    gen = torch.Generator(device="cuda").manual_seed(51)
    q, k, v = (torch.randn(b, s, hh, d, device="cuda", dtype=torch.bfloat16, generator=gen,
                           requires_grad=args.backward)
               for hh in (h, h_kv, h_kv))
    flop = 4.0 * b * h * s * s * d / (2 if args.causal else 1) * (2.5 if args.backward else 1.0)
    cands = candidates([x for x in args.variants.split(",") if x], q, k, v,
                       [x for x in args.backends.split(",") if x], args.causal)
    if args.backward:
        dout = torch.randn(b, s, h, d, device="cuda", dtype=torch.bfloat16, generator=gen)
        envs = None
        if args.bwd_specs:
            specs = [x for x in args.bwd_specs.split(",") if x]
            base = candidates(["0"], q, k, v, [], args.causal)["mkernel"]
            sdpa_cands = {n: f for n, f in cands.items() if n in ("cudnn", "flash")}
            cands = {f"mkernel@bwd={x}": base for x in specs} | sdpa_cands
            envs = {f"mkernel@bwd={x}": bwd_env(x) for x in specs}
        cands = backward_candidates(cands, q, k, v, dout, envs)
    what = ("S=%d d=%d h_kv=%d" % (s, d, h_kv)) + (" causal" if args.causal else "") \
        + (" bwd" if args.backward else "")
    res = sustained(cands, flop, args.window, args.rounds, label=what, anchor="cudnn")
    payload = {"bench": "attention_power", "device": device_info(), "commit": commit(),
               "shape": {"b": b, "s": s, "h": h, "h_kv": h_kv, "d": d, "causal": args.causal,
                         "dtype": "bf16"},
               "what": "the backward alone (dq, dk, dv through a retained graph)" if args.backward
               else "the forward",
               "method": res["method"], "idle": res["idle"], "rows": res["rows"],
               "windows": res["windows"]}
    print(write_result("attention_power", payload))


if __name__ == "__main__":
    main()
