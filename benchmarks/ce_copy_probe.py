"""What a copy engine gives ag_gemm's copy-engine route (session 27), torch only (no mkernel build):
one process, the whole GPU (or each GPU pair where there are two or more).

Times, per size (median of `--iters` samples, CUDA events):
- ``ce_local``: a same-device copy as ``cudaMemcpyBatchAsync`` with the PreferOverlapWithCompute
  hint (the route's submission, csrc/comm/ce_copy.h; through ctypes on the CUDA runtime torch
  loaded);
- ``plain_local``: the same copy as ``cudaMemcpyAsync`` (torch's ``copy_``): an SM kernel or a copy
  engine, the driver's choice;
- with two GPUs, ``ce_peer`` / ``plain_peer``: GPU 0 -> GPU 1 the same two ways;
- ``gemm_alone`` and ``gemm_with_ce``: a bf16 GEMM of Llama-70B fc1's per-rank shape at W = 2
  (8192 x 14336 x 8192) alone, and with the hinted copy of 64 MiB (a rank's x) on a side stream
  issued just before it: whether the copy engine's traffic slows the GEMM (the route's premise),
  and whether the copy finishes under it (``ce_under_gemm_ms``: the copy's own events).

Prints JSON lines and writes the result under benchmarks/results/ (and $OUT: common.write_result). Predictions (H200):
ce_local 60-200 GB/s (nccl#2177 read ~87 GiB/s for a hinted local copy), plain_local >= 1.2 TB/s
(an SM kernel), ce_peer 100-200 GB/s per engine over NVLink; gemm_with_ce within 1 % of gemm_alone.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import statistics
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
from common import commit, device_info, write_result  # noqa: E402


class MemLocation(ctypes.Structure):
    _fields_ = [("type", ctypes.c_int32), ("id", ctypes.c_int32)]


class MemcpyAttributes(ctypes.Structure):  # cudaMemcpyAttributes (CUDA >= 12.8)
    _fields_ = [("src_access_order", ctypes.c_int32), ("src_loc_hint", MemLocation),
                ("dst_loc_hint", MemLocation), ("flags", ctypes.c_uint32)]


SRC_ACCESS_ORDER_STREAM = 1  # cudaMemcpySrcAccessOrderStream
PREFER_OVERLAP_WITH_COMPUTE = 1  # cudaMemcpyFlagPreferOverlapWithCompute


def runtime() -> ctypes.CDLL:
    major = torch.version.cuda.split(".")[0]
    return ctypes.CDLL(f"libcudart.so.{major}")


def ce_copy(rt: ctypes.CDLL, dst: torch.Tensor, src: torch.Tensor, stream: torch.cuda.Stream) -> None:
    """dst[:] = src by cudaMemcpyBatchAsync (one copy, the copy-engine hint) on `stream`."""
    dsts = (ctypes.c_void_p * 1)(dst.data_ptr())
    srcs = (ctypes.c_void_p * 1)(src.data_ptr())
    sizes = (ctypes.c_size_t * 1)(src.numel() * src.element_size())
    attr = MemcpyAttributes(SRC_ACCESS_ORDER_STREAM, MemLocation(0, 0), MemLocation(0, 0),
                            PREFER_OVERLAP_WITH_COMPUTE)
    idx = (ctypes.c_size_t * 1)(0)
    err = rt.cudaMemcpyBatchAsync(dsts, srcs, sizes, ctypes.c_size_t(1), ctypes.byref(attr), idx,
                                  ctypes.c_size_t(1), ctypes.c_void_p(stream.cuda_stream))
    if err != 0:
        raise RuntimeError(f"cudaMemcpyBatchAsync: cudaError_t {err}")


def timed(fn, iters: int, stream: torch.cuda.Stream) -> float:
    """Median ms of `iters` calls of fn() on `stream` (two warm-up calls)."""
    with torch.cuda.stream(stream):
        for _ in range(2):
            fn()
    torch.cuda.synchronize()
    samples = []
    for _ in range(iters):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record(stream)
        with torch.cuda.stream(stream):
            fn()
        b.record(stream)
        b.synchronize()
        samples.append(a.elapsed_time(b))
    return statistics.median(samples)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes-mib", default="2,16,64,256")
    ap.add_argument("--iters", type=int, default=10)
    args = ap.parse_args()
    rt = runtime()
    s = torch.cuda.Stream()
    rows = []
    for mib in [int(v) for v in args.sizes_mib.split(",")]:
        n = mib << 20
        src = torch.empty(n, dtype=torch.uint8, device="cuda:0")
        dst = torch.empty_like(src)
        row = {"mib": mib}
        row["ce_local_ms"] = timed(lambda: ce_copy(rt, dst, src, s), args.iters, s)
        row["plain_local_ms"] = timed(lambda: dst.copy_(src), args.iters, s)
        if torch.cuda.device_count() >= 2:
            far = torch.empty(n, dtype=torch.uint8, device="cuda:1")
            row["ce_peer_ms"] = timed(lambda: ce_copy(rt, far, src, s), args.iters, s)
            row["plain_peer_ms"] = timed(lambda: far.copy_(src), args.iters, s)
        for k in [k for k in row if k.endswith("_ms")]:
            row[k.replace("_ms", "_gbs")] = n / (row[k] * 1e-3) / 1e9
        rows.append(row)
        print("ROW " + json.dumps(row), flush=True)
    # The route's premise: a copy engine's 64 MiB beside the capped GEMM.
    a = torch.randn(8192, 8192, device="cuda:0", dtype=torch.bfloat16)
    w = torch.randn(14336, 8192, device="cuda:0", dtype=torch.bfloat16)
    src = torch.empty(64 << 20, dtype=torch.uint8, device="cuda:0")
    dst = torch.empty_like(src)
    side = torch.cuda.Stream()
    copy_ms = []

    def gemm_with_ce():
        e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        side.wait_stream(torch.cuda.current_stream())
        e0.record(side)
        ce_copy(rt, dst, src, side)
        e1.record(side)
        torch.matmul(a, w.t())
        torch.cuda.current_stream().wait_stream(side)
        copy_ms.append((e0, e1))

    gemm = {"gemm_alone_ms": timed(lambda: torch.matmul(a, w.t()), args.iters, s),
            "gemm_with_ce_ms": timed(gemm_with_ce, args.iters, s)}
    torch.cuda.synchronize()
    gemm["ce_under_gemm_ms"] = statistics.median(e0.elapsed_time(e1) for e0, e1 in copy_ms)
    gemm["gemm_with_ce_over_alone"] = gemm["gemm_with_ce_ms"] / gemm["gemm_alone_ms"]
    print("GEMM " + json.dumps(gemm), flush=True)
    payload = {"bench": "ce_copy_probe", "commit": commit(), "device": device_info(),
               "iters": args.iters, "rows": rows, "gemm": gemm}
    print(f"wrote {write_result('ce_copy_probe', payload)}", flush=True)


if __name__ == "__main__":
    main()
