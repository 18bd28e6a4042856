"""Does moving bytes beside a power-capped GEMM cost less through cudaMemcpyAsync than through SM loads
and stores? (benchmarks/NOTES.md "Session 24": on two H200s the Llama-70B GEMMs run at the 700 W cap,
and the fused ag_gemm kernel — whose copy role moves the peer's rows with SM instructions — runs 1.07-1.09x
the GEMM alone in sustained calls while equal to it per launch.)

One GPU, torch only (no mkernel build): N back-to-back cuBLAS GEMMs of the Llama-70B fc1 shape gathered
over W = 2 ([8192, 8192] x [8192, 14336], bf16) on the current stream, and on a side stream, once per GEMM
(each waiting for the previous GEMM's start), a copy of `--mib` MiB (the ag copy role moves 64 MiB per call
there) by one of:

- ``none``: no traffic (the GEMM alone);
- ``sm``: an elementwise kernel (``torch.add(src, 0, out=dst)``: SM loads and stores, the copy role's way);
- ``memcpy``: ``dst.copy_(src)`` (same dtype, contiguous: cudaMemcpyAsync device to device).

Each variant's median ms per GEMM over `--samples` samples of N calls, interleaved round by round, with the
GPU's SM clock and power sampled by nvidia-smi beside them (``--smi``). Writes
benchmarks/results/power_copy_probe_<gpu>_<time>.json.

    python benchmarks/power_copy_probe.py [--calls 20] [--samples 5] [--mib 64,256]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--calls", type=int, default=20, help="GEMMs per sample")
    ap.add_argument("--samples", type=int, default=5)
    ap.add_argument("--mib", default="64,256", help="MiB copied per GEMM (comma-separated)")
    ap.add_argument("--smi", action="store_true", help="sample SM clock / power every 50 ms")
    args = ap.parse_args()
    import torch

    sys.path.insert(0, str(ROOT / "benchmarks"))
    from common import commit, device_info, write_result  # noqa: E402

    dev = torch.device("cuda", 0)
    a = torch.randn(8192, 8192, device=dev, dtype=torch.bfloat16)
    b = torch.randn(14336, 8192, device=dev, dtype=torch.bfloat16) / 64
    side = torch.cuda.Stream()
    sizes = [int(x) for x in args.mib.split(",") if x]
    bufs = {m: (torch.randn(m << 19, device=dev, dtype=torch.bfloat16),
                torch.empty(m << 19, device=dev, dtype=torch.bfloat16)) for m in sizes}

    def run(kind: str, mib: int) -> float:
        """ms per GEMM of one sample of args.calls GEMMs with `kind` traffic of `mib` MiB each."""
        src, dst = bufs[mib] if mib else (None, None)
        main = torch.cuda.current_stream()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        started = [torch.cuda.Event() for _ in range(args.calls)]
        start.record()
        for i in range(args.calls):
            started[i].record(main)
            torch.matmul(a, b.t())
            if kind != "none":
                with torch.cuda.stream(side):
                    side.wait_event(started[i])
                    if kind == "sm":
                        torch.add(src, 0, out=dst)
                    else:
                        dst.copy_(src)
        main.wait_stream(side)
        end.record()
        end.synchronize()
        return start.elapsed_time(end) / args.calls

    variants = [("none", 0)] + [(k, m) for m in sizes for k in ("sm", "memcpy")]
    for k, m in variants:  # warm-up (cuBLAS heuristics, allocations)
        run(k, m)
    smi = None
    smi_path = ROOT / "benchmarks" / "results" / f"power_copy_probe_smi_{time.strftime('%Y%m%d-%H%M%S')}.csv"
    if args.smi:
        smi = subprocess.Popen(["nvidia-smi", "--query-gpu=timestamp,index,clocks.sm,power.draw",
                                "--format=csv", "-lms", "50", "-f", str(smi_path)])
        time.sleep(0.5)
    got: dict[tuple[str, int], list[float]] = {v: [] for v in variants}
    marks = []
    for s in range(args.samples):
        for j in range(len(variants)):
            v = variants[(s + j) % len(variants)]
            t0 = time.time()
            got[v].append(run(*v))
            marks.append({"variant": f"{v[0]}/{v[1]}", "t_start": t0, "t_end": time.time()})
    if smi is not None:
        smi.terminate()
        smi.wait()
    base = statistics.median(got[("none", 0)])
    rows = []
    for (k, m), ms in got.items():
        med = statistics.median(ms)
        rows.append({"traffic": k, "mib_per_gemm": m, "ms_per_gemm": med, "over_gemm_alone": med / base,
                     "samples": ms})
        print(f"{k:>7} {m:>4} MiB/GEMM: {med:.3f} ms per GEMM ({med / base:.3f}x the GEMM alone)", flush=True)
    path = write_result("power_copy_probe", {
        "bench": "power_copy_probe", "commit": commit(), "device": device_info(),
        "gemm": "torch.matmul [8192, 8192] x [8192, 14336] bf16 (cuBLAS), back to back",
        "calls_per_sample": args.calls, "rows": rows, "marks": marks,
        "smi_csv": smi_path.name if args.smi else None})
    print(path)


if __name__ == "__main__":
    main()
