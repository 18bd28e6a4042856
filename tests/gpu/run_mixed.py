"""Device diagnostic: fused_nodes_ranks.py's ``mixed`` suite with every rank's output streamed
(no pytest capture), for bisecting a hang across emulated nodes.

  python3 tests/gpu/run_mixed.py --world 2 --nodes 2 [--gdr 0|1] [--skip ag,rs] [--timeout 90]
"""

from __future__ import annotations

import argparse
import os
import sys
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


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--world", type=int, default=2)
    ap.add_argument("--nodes", type=int, default=2)
    ap.add_argument("--gdr", choices=["0", "1"], default="0")
    ap.add_argument("--skip", default="")
    ap.add_argument("--timeout", type=float, default=90.0)
    a = ap.parse_args()
    env = dict(FUSED_NODES_SUITE="mixed", MKERNEL_OP_TIMEOUT="15", MKERNEL_NET_EMULATE="50GB/s,3us",
               MKERNEL_FUSED_NODES="1", MKERNEL_NET_GDR=a.gdr, MIXED_SKIP=a.skip, NCCL_NVLS_ENABLE="0",
               CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=str(max(1, 100 // a.world)))
    res = run_ranks(RANK_MAIN, a.world, nodes=a.nodes, timeout=a.timeout, env=env,
                    passthrough=tuple(range(a.world)))
    bad = [r.rank for r in res if r.returncode != 0]
    print(f"run_mixed: world {a.world} nodes {a.nodes} gdr {a.gdr} skip {a.skip or '-'}: "
          f"{'FAILED ranks ' + str(bad) if bad else 'all ranks ok'}", flush=True)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
