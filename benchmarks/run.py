"""``make bench``: run every GPU benchmark of this folder, then tables and plots from their JSON.

Discovers ``benchmarks/bench_*.py`` (so a benchmark added later runs without editing this file),
runs each with this interpreter from the repository root, and renders every JSON it wrote with
report.py (``results/X.json`` -> ``X.md`` + ``X.png``). Without a CUDA GPU it says so and runs
nothing (exit 0): every Python benchmark here times GPU kernels against a GPU anchor. The host
data-path benchmark is Go: ``go run ./benchmarks/bench_proxy`` (it pins and spins two CPUs, so it
is not started behind your back).

    python benchmarks/run.py [--only gemm,grouped_gemm] [--list]

Exit status: non-zero when a benchmark failed or wrote no JSON.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import report  # noqa: E402


def discover() -> dict[str, Path]:
    """name -> script, for every benchmarks/bench_*.py (bench_gemm.py -> "gemm")."""
    return {p.stem[len("bench_"):]: p for p in sorted(HERE.glob("bench_*.py"))}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--only", default="", help="comma-separated benchmark names (default: all)")
    ap.add_argument("--list", action="store_true", help="list the benchmarks and exit")
    args = ap.parse_args(argv)
    benches = discover()
    if args.list:
        print("\n".join(f"{n}: {p.relative_to(HERE.parent)}" for n, p in benches.items()))
        return 0
    if args.only:
        unknown = set(args.only.split(",")) - set(benches)
        if unknown:
            print(f"bench: no benchmark named {sorted(unknown)}; there are {sorted(benches)}", file=sys.stderr)
            return 2
        benches = {n: p for n, p in benches.items() if n in args.only.split(",")}

    import torch

    if not torch.cuda.is_available():
        print(f"bench: no CUDA GPU on this machine: ran nothing ({len(benches)} GPU benchmarks: "
              f"{', '.join(benches)}). The host data path: go run ./benchmarks/bench_proxy")
        return 0
    failed = []
    for name, script in benches.items():
        before = set(report.RESULTS.glob("*.json"))
        print(f"bench: {name} ({script.relative_to(HERE.parent)})", flush=True)
        t0 = time.monotonic()
        rc = subprocess.run([sys.executable, str(script)], cwd=HERE.parent).returncode
        new = sorted(set(report.RESULTS.glob("*.json")) - before)
        print(f"bench: {name} exited {rc} after {time.monotonic() - t0:.0f} s, wrote "
              f"{', '.join(p.name for p in new) or 'no JSON'}", flush=True)
        if rc != 0 or not new:
            failed.append(name)
        for path in new:
            md, png = report.report(path)
            print(f"bench: {md.relative_to(HERE.parent)}" + (f", {png.relative_to(HERE.parent)}" if png else ""))
    if failed:
        print(f"bench: FAILED: {', '.join(failed)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
