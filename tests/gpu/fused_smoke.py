"""The smallest GPU proof of the fused ops, for a short device slot: W rank processes under MPS
(an MPS daemon it starts when none runs) run tests/gpu/fused_ranks.py's suites, W = 2 then 4;
each launch's rank output is printed as soon as it ends, so a later hang loses nothing.
Exit status 1 on any failure.

    python3 -u tests/gpu/fused_smoke.py [--worlds 2,4] [--suites ag,rs,ar,peertma] [--timeout 50]
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from common import mps_daemon  # noqa: E402  (benchmarks/common.py: the shared MPS helper)
from tests.launch import run_ranks  # noqa: E402


# ag_gemm.cpp's once-per-process line when the MKERNEL_FUSED_AG_PEER_TMA kernel launches.
PEER_MARK = "mkernel.ag_gemm: peer-TMA kernel launched"


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--worlds", default="2,4")
    ap.add_argument("--suites", default="ag,rs,ar")
    ap.add_argument("--time-at", type=int, default=2, help="also run the timing suite at this W")
    ap.add_argument("--timeout", type=float, default=50.0)
    ap.add_argument("--expect-peer", action="store_true",
                    help="require the peer-TMA kernel's launch line on every rank whatever the "
                         "suites (e.g. agdefault: the default auto route measures it, fused16)")
    ap.add_argument("--grids", default="share,co_resident",
                    help="share: the fused kernels on the grid of this rank's SMs; co_resident: "
                         "pinned to the co-resident grid (FUSED_GRID, tests/gpu/fused_ranks.py)")
    args = ap.parse_args()
    code = (ROOT / "tests" / "gpu" / "fused_ranks.py").read_text()
    failed = False
    with mps_daemon("fused_smoke") as mps_env:
        for world, grid in [(int(w), g) for w in args.worlds.split(",")
                            for g in args.grids.split(",")]:
            suites = args.suites + (",time" if world == args.time_at and grid == "share" else "")
            env = dict(mps_env, CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=str(100 // world),
                       FUSED_SUITE=suites, MKERNEL_OP_TIMEOUT=os.environ.get("MKERNEL_OP_TIMEOUT", "15"),
                       NCCL_NVLS_ENABLE="0", FUSED_GRID=grid)
            results = run_ranks(code, world, timeout=args.timeout, env=env)
            for r in sorted(results, key=lambda r: r.rank):
                ok = r.returncode == 0 and f"OK {r.rank}" in r.stdout
                wants_peer = args.expect_peer or {"peertma", "peergraph"} & set(suites.split(","))
                if wants_peer and PEER_MARK not in r.stderr:
                    print(f"rank {r.rank}: the peer-TMA kernel never launched", flush=True)
                    ok = False
                failed |= not ok
                print(f"=== W={world} grid={grid} rank {r.rank}: rc={r.returncode} "
                      f"{'OK' if ok else 'FAILED'}", flush=True)
                lines = r.stdout.splitlines()
                keep = [ln for ln in lines if ln.startswith(("TIME", "SUITE", "OK"))]
                bad = [ln for ln in lines if ln.startswith("CASE") and '"rel": ' in ln]
                if r.rank == 0 or not ok:
                    print("\n".join(keep), flush=True)
                    worst = sorted(bad, key=lambda ln: -float(ln.split('"rel": ')[1].split(",")[0]))[:3]
                    print("worst cases:\n" + "\n".join(worst), flush=True)
                if not ok:
                    print(r.stderr[-2500:], flush=True)
    print("FUSED SMOKE " + ("FAILED" if failed else "PASSED"), flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
