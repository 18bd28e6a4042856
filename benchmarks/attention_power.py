"""Is the attention forward power-bound? Each candidate (the engine's variants, SDPA's cuDNN and
flash backends) runs back to back for a sustained window (default 2 s) while nvidia-smi samples
the SM clock, the board power and the clock-event (throttle) reasons every 20 ms; windows go
round-robin over the candidates, several rounds. Per candidate: the median time per call (CUDA
events over the window), TF/s, the median SM clock and power over the window's samples (its first
0.3 s dropped: the clock settles), and from them the work per clock cycle (TF/s per GHz: what a
kernel does with its cycles) and per joule (TF/s per W: what it does with its power).

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
import datetime as dt
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.nn.functional import scaled_dot_product_attention as sdpa

sys.path.insert(0, __file__.rsplit("/", 1)[0])
from common import commit, device_info, write_result  # noqa: E402

import mkernel  # noqa: E402

SETTLE_S = 0.3


def smi_fields() -> list[str]:
    """The query fields this nvidia-smi knows (the throttle reasons were renamed clock events)."""
    base = ["timestamp", "clocks.sm", "power.draw", "temperature.gpu"]
    for reasons in ("clocks_event_reasons.active", "clocks_throttle_reasons.active"):
        r = subprocess.run(["nvidia-smi", f"--query-gpu={reasons}", "--format=csv,noheader"],
                           capture_output=True, text=True)
        if r.returncode == 0:
            return base + [reasons]
    return base


def parse_smi(path: Path, fields: list[str]) -> list[dict]:
    rows = []
    for line in path.read_text().splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) != len(fields) or parts[0] == "timestamp":
            continue
        try:
            t = dt.datetime.strptime(parts[0], "%Y/%m/%d %H:%M:%S.%f").timestamp()
            row = {"t": t, "mhz": float(parts[1].split()[0]), "w": float(parts[2].split()[0]),
                   "temp": float(parts[3])}
        except ValueError:
            continue
        if len(parts) > 4:
            row["reasons"] = parts[4]
        rows.append(row)
    return rows


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
            os.environ.update(env)
            try:
                return mkernel.attention(q, k, v, causal=causal)
            finally:
                for key in env:
                    os.environ.pop(key, None)
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
            os.environ.update(env)
            try:
                return torch.autograd.grad(o, (q, k, v), g, retain_graph=True)
            finally:
                for key in env:
                    os.environ.pop(key, None)
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
    # Calls per window from a short timing of each.
    per_call = {}
    for name, fn in cands.items():
        for _ in range(5):
            fn()
        e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        e0.record()
        for _ in range(20):
            fn()
        e1.record()
        e1.synchronize()
        per_call[name] = e0.elapsed_time(e1) / 20 / 1e3
    fields = smi_fields()
    with tempfile.TemporaryDirectory() as tmp:
        smi_path = Path(tmp) / "smi.csv"
        smi = subprocess.Popen(["nvidia-smi", f"--query-gpu={','.join(fields)}", "--format=csv,noheader",
                                "-lms", "20", "-f", str(smi_path)])
        time.sleep(1.0)  # the GPU idles: its clock and power at rest
        idle_end = time.time()
        windows = []
        names = list(cands)
        for r in range(args.rounds):
            for j in range(len(names)):
                name = names[(r + j) % len(names)]
                fn = cands[name]
                n = max(10, int(args.window / per_call[name]))
                torch.cuda.synchronize()
                t0 = time.time()
                e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                e0.record()
                for _ in range(n):
                    fn()
                e1.record()
                e1.synchronize()
                windows.append({"name": name, "round": r, "calls": n, "t0": t0, "t1": time.time(),
                                "ms_per_call": e0.elapsed_time(e1) / n})
        time.sleep(0.3)
        smi.terminate()
        smi.wait()
        samples = parse_smi(smi_path, fields)
    idle = [x for x in samples if x["t"] < idle_end]
    rows = []
    for name in names:
        mine = [w for w in windows if w["name"] == name]
        ws = [x for w in mine for x in samples if w["t0"] + SETTLE_S <= x["t"] <= w["t1"]]
        ms = statistics.median(w["ms_per_call"] for w in mine)
        tflops = flop / (ms * 1e-3) / 1e12
        row = {"candidate": name, "ms_per_call": ms, "tflops": tflops,
               "ms_per_window": [w["ms_per_call"] for w in mine], "samples": len(ws)}
        if ws:
            mhz = statistics.median(x["mhz"] for x in ws)
            watts = statistics.median(x["w"] for x in ws)
            row.update({"sm_mhz_median": mhz, "power_w_median": watts,
                        "sm_mhz_range": [min(x["mhz"] for x in ws), max(x["mhz"] for x in ws)],
                        "temp_c_median": statistics.median(x["temp"] for x in ws),
                        "tflops_per_ghz": tflops / (mhz / 1e3), "tflops_per_w": tflops / watts,
                        "reasons": sorted({x.get("reasons", "") for x in ws})})
        rows.append(row)
        print(f"S={s} d={d} h_kv={h_kv}{' causal' if args.causal else ''}{' bwd' if args.backward else ''} {name:>10s}: {ms:.4f} ms  {tflops:6.1f} TF/s  "
              + (f"SM {row['sm_mhz_median']:.0f} MHz ({row['sm_mhz_range'][0]:.0f}-{row['sm_mhz_range'][1]:.0f})  "
                 f"{row['power_w_median']:.0f} W  {row['tflops_per_ghz']:.1f} TF/s per GHz  "
                 f"{row['tflops_per_w']:.3f} TF/s per W  reasons {row['reasons']}" if ws else "no samples"),
              flush=True)
    base = next((r for r in rows if r["candidate"] == "cudnn"), None)
    if base is not None and "tflops_per_ghz" in base:
        for r in rows:
            if "tflops_per_ghz" in r:
                r["vs_cudnn"] = {"time": base["ms_per_call"] / r["ms_per_call"],
                                 "per_cycle": r["tflops_per_ghz"] / base["tflops_per_ghz"],
                                 "per_joule": r["tflops_per_w"] / base["tflops_per_w"],
                                 "clock": r["sm_mhz_median"] / base["sm_mhz_median"]}
                print(f"  {r['candidate']:>10s} vs cudnn: time x{r['vs_cudnn']['time']:.3f}  "
                      f"per cycle x{r['vs_cudnn']['per_cycle']:.3f}  per joule x{r['vs_cudnn']['per_joule']:.3f}  "
                      f"clock x{r['vs_cudnn']['clock']:.3f}", flush=True)
    payload = {"bench": "attention_power", "device": device_info(), "commit": commit(),
               "shape": {"b": b, "s": s, "h": h, "h_kv": h_kv, "d": d, "causal": args.causal,
                         "dtype": "bf16"},
               "what": "the backward alone (dq, dk, dv through a retained graph)" if args.backward
               else "the forward",
               "method": f"round-robin windows of ~{args.window} s per candidate, {args.rounds} rounds; "
                         f"nvidia-smi every 20 ms ({', '.join(fields[1:])}), each window's first {SETTLE_S} s "
                         "dropped; medians",
               "idle": {"sm_mhz_median": statistics.median(x["mhz"] for x in idle) if idle else None,
                        "power_w_median": statistics.median(x["w"] for x in idle) if idle else None},
               "rows": rows, "windows": windows}
    print(write_result("attention_power", payload))


if __name__ == "__main__":
    main()
