"""Where the fused reduce ops lose time (W=2 ranks on one GPU under MPS, 50% of the SMs each):
a diagnostic run for the fused ops' design, not a benchmark of the product.

1. ``ipc``: copy bandwidth of a 256 MiB buffer read from this process's memory vs the same
   buffer read from the peer rank's memory through CUDA IPC (how the fused ops and the
   substrate's collectives read peers), both ranks at once.
2. ``gemm``: the engine GEMM (auto plan; configs 0/1 and 6 = coop_256x128_c2x1, the fused
   ops' candidates) vs the hooked kernel with the fused ops' default tile config
   and its per-tile flag release (gemm_hooked), at a few persistent-grid sizes (sm_count):
   the GEMM half of a fused call without its reduction, and whether fewer clusters than
   SMs / 2 are co-resident under MPS.
3. ``side``: gemm_rs / gemm_ar (the fused kernel pinned) with the side warps staged through
   shared memory, from registers, or idle (the consumers then reduce everything).

Rank 0 prints ``DIAG {json}`` lines and writes benchmarks/results/fused_diag_<gpu>_<time>.json
(and a copy under $OUT).

    python benchmarks/fused_diag.py [--timeout 60]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def rank_main() -> None:
    import torch
    import torch.distributed as dist
    from torch.multiprocessing.reductions import reduce_tensor

    sys.path.insert(0, str(ROOT / "benchmarks"))
    from common import commit, device_info, write_result  # noqa: E402

    import mkernel

    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    torch.cuda.set_device(0)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    ctx = mkernel.init()
    rows = []

    def emit(row: dict) -> None:
        rows.append(row)
        if rank == 0:
            print("DIAG " + json.dumps(row), flush=True)

    def timed(fn, reps: int = 5, samples: int = 7) -> float:
        """Max over ranks of the median ms per call (both ranks measure at once)."""
        fn()
        torch.cuda.synchronize()
        got = []
        for _ in range(samples):
            dist.barrier()
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            for _ in range(reps):
                fn()
            b.record()
            b.synchronize()
            got.append(a.elapsed_time(b) / reps)
        t = torch.tensor([statistics.median(got)], dtype=torch.float64)
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        return t.item()

    # 1. Local vs peer (CUDA IPC) reads.
    n = 128 << 20  # bf16 elements: 256 MiB
    mine = torch.ones(n, dtype=torch.bfloat16, device="cuda")
    dst = torch.empty_like(mine)
    handles = [None] * world
    dist.all_gather_object(handles, reduce_tensor(mine)[1])
    try:
        peer = reduce_tensor(mine)[0](*handles[(rank + 1) % world])
        assert peer.shape == mine.shape
    except Exception as e:  # the rest of the diagnosis does not need it
        emit({"what": "ipc", "error": repr(e)[:300]})
        peer = None
    for name, src in (("local", mine), ("peer", peer)):
        ok = torch.tensor([0.0 if src is None else 1.0])
        dist.all_reduce(ok, op=dist.ReduceOp.MIN)
        if not ok.item():
            continue
        ms = timed(lambda src=src: dst.copy_(src))
        emit({"what": "ipc", "read": name, "bytes_read": 2 * n, "ms": ms,
              "read_write_gbs": 4 * n / ms / 1e6})
    del peer
    torch.cuda.synchronize()
    dist.barrier()

    # 2. and 3. at the fused-smoke shape (per rank).
    for m, k, nn in [(4096, 1024, 8192), (8192, 2048, 8192)]:
        x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
        w = torch.randn(nn, k, device="cuda", dtype=torch.bfloat16) / 32
        shape = {"m": m, "k": k, "n": nn}
        emit(dict(shape, what="gemm", kind="engine auto", plan=mkernel.gemm_plan(x, w),
                  ms=timed(lambda: mkernel.gemm(x, w))))
        sms = torch.cuda.get_device_properties(0).multi_processor_count
        tiles_wide = -(-m // 128) * -(-nn // 256)
        cfg = 0 if tiles_wide >= sms else 1  # fused_dispatch.cu fused_config
        bn = 256 if cfg == 0 else 128
        flags = torch.zeros(-(-m // 128) * -(-nn // bn), dtype=torch.int64, device="cuda")
        for c in sorted({cfg, 6}):  # the fused default and coop_256x128_c2x1, CUTLASS's kernel
            emit(dict(shape, what="gemm", kind="engine cfg", config=c,
                      ms=timed(lambda c=c: mkernel.gemm(x, w, config=c))))
        # The hooked kernel releasing a flag per tile right after its stores (FlagHooks: the
        # consumers wait for the stores to land), then without flags at several grid sizes.
        ms = timed(lambda: torch.ops.mkernel.gemm_hooked(
            x, w, None, 128, 0, flags, 1, None, cfg, 0, 0, 0, 10.0, 1))
        emit(dict(shape, what="gemm", kind="hooked, tile flags", config=cfg, sm_count=sms, ms=ms))
        for sm in (0, sms - 2, sms - 8, sms // 2):
            ms = timed(lambda sm=sm: torch.ops.mkernel.gemm_hooked(
                x, w, None, 128, 0, None, 1, None, cfg, sm, 0, 0, 10.0, 1))
            emit(dict(shape, what="gemm", kind="hooked", config=cfg, sm_count=sm or sms, ms=ms))
        os.environ["MKERNEL_FUSED"] = "force"
        for side in ("staged", "regs", "idle"):
            os.environ["MKERNEL_FUSED_SIDE"] = side
            for op in ("gemm_rs", "gemm_ar"):
                fn = getattr(mkernel, op)
                emit(dict(shape, what="side", op=op, side=side,
                          ms=timed(lambda fn=fn: fn(x, w, group=ctx))))
        del os.environ["MKERNEL_FUSED_SIDE"]
        del os.environ["MKERNEL_FUSED"]

    if rank == 0:
        path = write_result("fused_diag", {"bench": "fused_diag", "commit": commit(),
                                           "device": device_info(), "world": world,
                                           "mps_share_percent":
                                               os.environ.get("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"),
                                           "rows": rows})
        print(f"wrote {path}", flush=True)
    mkernel.shutdown()
    dist.destroy_process_group()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--timeout", type=float, default=60)
    args = ap.parse_args()
    sys.path.insert(0, str(ROOT))
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from common import mps_daemon

    from tests.launch import run_ranks

    env = {"CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": "50", "NCCL_NVLS_ENABLE": "0"}
    code = f"import runpy; runpy.run_path({str(Path(__file__).resolve())!r}, run_name='__rank__')"
    with mps_daemon("fused_diag") as mps_env:
        results = run_ranks(code, 2, timeout=args.timeout, env=dict(env, **mps_env))
    for r in results:
        if r.returncode != 0 or r.rank == 0:
            sys.stdout.write(r.stdout[-8000:])
            sys.stderr.write(r.stderr[-4000:])
    sys.exit(max((r.returncode if r.returncode is not None else 124) for r in results))


if __name__ == "__main__":
    main()
elif __name__ == "__rank__":
    rank_main()
