"""Device diagnostic (xnode6): fused_nodes_ranks.py's ``grow`` suite — s14run1's failing
sequences of first calls across 2 emulated nodes under the GPU-direct emulation — with every
rank's output streamed (no pytest capture: a stall's lines reach the log before any outer limit).

  python3 tests/gpu/run_grow.py [--steps ag1,ag2] [--copier process|thread] [--prune 0|1]
                                [--grids co|both] [--submit ce|plain] [--op-timeout 15] [--timeout 60]

--grids both: MKERNEL_FUSED_GRIDS=both (the candidate list before xnode6: the share's grid too,
measured first); co: the default (the co-resident grid only across nodes under an MPS limit).
--submit: MKERNEL_NET_GDR_COPIER_SUBMIT (xnode7): ce = the copy engines (cudaMemcpyBatchAsync +
PreferOverlapWithCompute, the default), plain = cudaMemcpyAsync (the copier process before xnode7).
Each step prints a COPIER line: the submission path that ran and the copies' mean latency/service.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from tests.launch import run_ranks  # noqa: E402

RANK_MAIN = f"""
import sys
sys.path.insert(0, {str(ROOT)!r})
from tests.gpu.fused_nodes_ranks import main
main()
"""


def grow_env(steps: str, copier: str, prune: str, grids: str, op_timeout: str, world: int,
             submit: str = "ce") -> dict:
    env = dict(FUSED_NODES_SUITE="grow", GROW_STEPS=steps, MKERNEL_OP_TIMEOUT=op_timeout,
               MKERNEL_NET_EMULATE="50GB/s,3us", MKERNEL_FUSED_NODES="1", MKERNEL_NET_GDR="1",
               MKERNEL_NET_GDR_COPIER=copier, MKERNEL_NET_GDR_COPIER_SUBMIT=submit,
               MKERNEL_FUSED_PRUNE=prune, MKERNEL_FUSED_VERBOSE="1",
               NCCL_NVLS_ENABLE="0", CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=str(max(1, 100 // world)))
    if grids == "both":
        env["MKERNEL_FUSED_GRIDS"] = "both"
    return env


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--world", type=int, default=2)
    ap.add_argument("--nodes", type=int, default=2)
    ap.add_argument("--steps", default="ag1,ag2")
    ap.add_argument("--copier", choices=["process", "thread"], default="process")
    ap.add_argument("--prune", choices=["0", "1"], default="1")
    ap.add_argument("--grids", choices=["co", "both"], default="co")
    ap.add_argument("--submit", choices=["ce", "plain"], default="ce")
    ap.add_argument("--op-timeout", default="15")
    ap.add_argument("--timeout", type=float, default=60.0)
    a = ap.parse_args()
    env = grow_env(a.steps, a.copier, a.prune, a.grids, a.op_timeout, a.world, a.submit)
    label = (f"world {a.world} nodes {a.nodes} steps {a.steps} copier {a.copier} submit {a.submit} "
             f"prune {a.prune} grids {a.grids} op-timeout {a.op_timeout}")
    print(f"run_grow: {label}", flush=True)
    t0 = time.monotonic()
    res = run_ranks(RANK_MAIN, a.world, nodes=a.nodes, timeout=a.timeout, env=env,
                    passthrough=tuple(range(a.world)))
    bad = {r.rank: r.returncode for r in res if r.returncode != 0}
    print(f"run_grow: {label}: {'FAILED ranks ' + str(bad) if bad else 'all ranks ok'} "
          f"in {time.monotonic() - t0:.1f} s", flush=True)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
