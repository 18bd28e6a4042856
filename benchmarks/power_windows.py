"""Sustained timing beside the SM clock and the board power: the harness of attention_power.py and
gemm_power.py.

Each candidate (a zero-argument callable that enqueues one call on the current stream) runs back to
back for a window of ~`window` seconds, windows round-robin over the candidates for `rounds`
rounds, while nvidia-smi samples the SM clock, the board power, the temperature and the
clock-event (throttle) reasons every 20 ms. Per candidate: the median time per call over its
windows (CUDA events), TF/s, and over its windows' samples (each window's first SETTLE_S s
dropped: the clock settles) the median clock and power, and from them the work per clock cycle
(TF/s per GHz) and per joule (TF/s per W). Session 51 found the attention kernels at the H100's
700 W cap in such windows: there a kernel's saved cycles come back as a lower clock unless its
energy falls too, and short samples (a few dozen calls) run partly above the sustained clock.
An untimed lead-in window (the first candidate's) follows the idle second: the first timed window
after the idle GPU ran 3-6 % slower than the same candidate's round-1 window (session 54,
fused_power, 8 of 8 rows: the op 1.6-2.7 % above the same path forced over two rounds, within
0.5 % in round 1), the clock swinging as the board power climbs to its cap.
"""

from __future__ import annotations

import datetime as dt
import statistics
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Callable

import torch

SETTLE_S = 0.3
SAMPLE_MS = 20


def _smi_knows(field: str, numeric: bool = False) -> bool:
    """Whether nvidia-smi answers `field` (an unknown name fails; an unsupported one prints [N/A]
    or [Not Supported], which `numeric` refuses)."""
    r = subprocess.run(["nvidia-smi", f"--query-gpu={field}", "--format=csv,noheader"],
                       capture_output=True, text=True)
    value = r.stdout.strip().splitlines()[0] if r.stdout.strip() else ""
    return r.returncode == 0 and (not numeric or value[:1].isdigit())


def smi_fields() -> list[str]:
    """The query fields this nvidia-smi knows (the throttle reasons were renamed clock events).
    The power is the instantaneous draw where the driver has it: on recent drivers `power.draw` is
    a 1 s average, so a window's samples up to 1 s after its start (and the idle second after a
    calibration) read partly the previous work's power (session 53: "idle" read 380-455 W after
    the calibration calls, against 74 W at rest)."""
    power = "power.draw.instant" if _smi_knows("power.draw.instant", numeric=True) else "power.draw"
    base = ["timestamp", "clocks.sm", power, "temperature.gpu"]
    for reasons in ("clocks_event_reasons.active", "clocks_throttle_reasons.active"):
        if _smi_knows(reasons):
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


def _per_call_s(fn: Callable[[], object]) -> float:
    for _ in range(5):
        fn()
    e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    e0.record()
    for _ in range(20):
        fn()
    e1.record()
    e1.synchronize()
    return e0.elapsed_time(e1) / 20 / 1e3


def sustained(cands: dict[str, Callable[[], object]], flop: float, window: float, rounds: int,
              label: str = "", anchor: str | None = None, agree: Callable[[float], float] | None = None,
              gpu: int | None = None, sample: bool = True) -> dict:
    """Times `cands` in sustained windows (module docstring). flop: one call's work. anchor: the
    candidate the others are compared with (time, per cycle, per joule, clock), if present.
    Collective candidates (every rank of a group calls them, benchmarks/fused_power.py): `agree`
    returns the largest of the ranks' values (so every rank runs the same number of calls a
    window, and a window's time is its slowest rank's); `gpu` the nvidia-smi index to sample;
    `sample` False on the ranks that share a sampled GPU (MPS) or need no samples.
    Returns {"rows", "windows", "idle", "method"} for the result JSON; prints a line a candidate."""
    agree = agree or (lambda v: v)
    per_call = {name: agree(_per_call_s(fn)) for name, fn in cands.items()}
    fields = smi_fields() if sample else ["timestamp"]
    names = list(cands)
    windows = []
    with tempfile.TemporaryDirectory() as tmp:
        smi_path = Path(tmp) / "smi.csv"
        smi_path.touch()
        smi = subprocess.Popen(["nvidia-smi", f"--query-gpu={','.join(fields)}", "--format=csv,noheader",
                                "-lms", str(SAMPLE_MS), "-f", str(smi_path)]
                               + (["-i", str(gpu)] if gpu is not None else [])) if sample else None
        try:
            time.sleep(1.0)  # the GPU idles: its clock and power at rest
            idle_end = time.time()
            lead = cands[names[0]]  # the lead-in window: untimed, outside `windows`
            for _ in range(max(10, int(window / per_call[names[0]]))):
                lead()
            torch.cuda.synchronize()
            for r in range(rounds):
                for j in range(len(names)):
                    name = names[(r + j) % len(names)]
                    fn = cands[name]
                    n = max(10, int(window / per_call[name]))
                    torch.cuda.synchronize()
                    t0 = time.time()
                    e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                    e0.record()
                    for _ in range(n):
                        fn()
                    e1.record()
                    e1.synchronize()
                    windows.append({"name": name, "round": r, "calls": n, "t0": t0, "t1": time.time(),
                                    "ms_per_call": agree(e0.elapsed_time(e1) / n)})
            time.sleep(0.3)
        finally:
            if smi is not None:
                smi.terminate()
                smi.wait()
        samples = parse_smi(smi_path, fields) if sample else []
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
        print(f"{label} {name:>10s}: {ms:.4f} ms  {tflops:6.1f} TF/s  "
              + (f"SM {row['sm_mhz_median']:.0f} MHz ({row['sm_mhz_range'][0]:.0f}-{row['sm_mhz_range'][1]:.0f})  "
                 f"{row['power_w_median']:.0f} W  {row['tflops_per_ghz']:.1f} TF/s per GHz  "
                 f"{row['tflops_per_w']:.3f} TF/s per W  reasons {row['reasons']}" if ws else "no samples"),
              flush=True)
    base = next((r for r in rows if r["candidate"] == anchor), None)
    if base is not None and "tflops_per_ghz" in base:
        for r in rows:
            if "tflops_per_ghz" in r:
                r[f"vs_{anchor}"] = {"time": base["ms_per_call"] / r["ms_per_call"],
                                     "per_cycle": r["tflops_per_ghz"] / base["tflops_per_ghz"],
                                     "per_joule": r["tflops_per_w"] / base["tflops_per_w"],
                                     "clock": r["sm_mhz_median"] / base["sm_mhz_median"]}
                v = r[f"vs_{anchor}"]
                print(f"  {r['candidate']:>10s} vs {anchor}: time x{v['time']:.3f}  per cycle "
                      f"x{v['per_cycle']:.3f}  per joule x{v['per_joule']:.3f}  clock x{v['clock']:.3f}",
                      flush=True)
    return {"rows": rows, "windows": windows,
            "idle": {"sm_mhz_median": statistics.median(x["mhz"] for x in idle) if idle else None,
                     "power_w_median": statistics.median(x["w"] for x in idle) if idle else None},
            "method": f"an untimed lead-in window of {names[0]}, then round-robin windows of ~{window} s "
                      f"per candidate, {rounds} rounds; nvidia-smi "
                      f"every {SAMPLE_MS} ms ({', '.join(fields[1:])}), each window's first {SETTLE_S} s "
                      "dropped; medians"}


def row_fields(res: dict) -> dict:
    """sustained()'s result as a JSON row's fields: method, idle clock / power, candidates, windows."""
    return {"method": res["method"], "idle": res["idle"], "candidates": res["rows"], "windows": res["windows"]}
