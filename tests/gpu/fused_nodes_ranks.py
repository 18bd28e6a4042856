"""What each rank process of tests/gpu/test_fused_nodes.py runs: the fused ag_gemm on a group
spanning several emulated nodes (MKERNEL_FUSED_NODES=1: the kernel pushes this rank's rows to
the other nodes through the inter-node FIFO and consumes theirs as they arrive), W ranks on one
GPU under MPS, against a float32 reference every rank computes from every rank's inputs
(tests/gpu/fused_ranks.py's helpers: seeded inputs, poisoned outputs, per-tile max error).

``FUSED_NODES_SUITE`` (comma-separated):
  ``ag``   ragged shapes (one row, m not a tile multiple, 16 inter-node pieces), bf16 and fp16,
           out + gathered and out alone, every call of a dtype back to back without a host sync,
           then the same shapes again (the receive halves of both call parities reused);
  ``rs``   gemm_rs: ragged M (a multiple of W only: a tile's rows meet up to W owners), bf16 and
           fp16, back to back, two rounds; the partial tiles of other nodes' rows go through the
           FIFO and are summed in fp32 in rank order;
  ``ar``   gemm_ar across nodes (the fused gemm_rs across nodes into a [ceil(M/W), N] shard, then
           the substrate's all_gather): ragged M (not a multiple of W; one row; an owner with no
           rows), bf16 and fp16, back to back, two rounds, every M on the fused path
           (MKERNEL_GEMM_AR_ALGO set: the decode rule would keep M <= 512 unfused); each CASE
           carries the output's SHA-256 so the test checks identical bits on every rank;
  ``mixed`` collectives, fused ag / rs and gemm_ar (forced and chosen) in one process across
           nodes, the inter-node path printed around every step (the s12run2 hang; MIXED_SKIP);
  ``grow``  s14run1's failing sequences of first calls under the GPU-direct emulation (ag_gemm
           smoke then 2048x8192x7168, gemm_rs smoke), choose_path measuring, values checked
           (GROW_STEPS);
  ``kill`` the last rank SIGKILLs itself while its ag_gemm runs; every other rank must raise
           within MKERNEL_OP_TIMEOUT (+ slack), its wait record (where it has one) naming the
           dead rank. Ends the process.
Prints ``CASE {json}`` per checked output and ``OK <rank>`` at the end.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import sys
import tempfile
import time
import warnings

import torch
import torch.distributed as dist

import mkernel
from mkernel._module_loading import gdr_requested
from tests.gpu.fused_ranks import (DTYPES, REDUCE_SHAPES, ag_reference, check, emit, inputs, poison,
                                   reduce_reference)

# (m rows per rank, K, N): one row; ragged m; m spanning several 128-row tiles with K = 4096
# (8 KiB rows: 16-row chunks, 125 chunks in 16 pieces of 8); a 128x256-tile shape.
AG_SHAPES = [(1, 64, 96), (37, 128, 136), (333, 512, 256), (2000, 4096, 512), (1024, 1024, 4096)]


def suite_ag(ctx, rank: int, world: int) -> None:
    no_fallback("ag_gemm", run_ag, ctx, rank, world)


def suite_rs(ctx, rank: int, world: int) -> None:
    no_fallback("gemm_rs", run_rs, ctx, rank, world)


def run_ag(ctx, rank: int, world: int) -> None:
    for rnd in range(2):  # the second round reuses both receive halves (call parity)
        for dname, dtype in DTYPES.items():
            pending = []
            for i, (m, k, n) in enumerate(AG_SHAPES):
                case = 1000 * i + (0 if dtype is torch.bfloat16 else 500) + 50 * rnd
                gathered_ref, ref, x, w = ag_reference(case, world, m, k, n, dtype, rank)
                poison(((world * m, n), dtype), ((world * m, k), dtype))
                out, gathered = mkernel.ag_gemm(x.cuda(), w.cuda(), group=ctx, return_gathered=True)
                out_only = mkernel.ag_gemm(x.cuda(), w.cuda(), group=ctx)
                pending.append((dict(op="ag_gemm_nodes", dtype=dname, m=m, k=k, n=n, world=world,
                                     rank=rank, round=rnd),
                                out, gathered, out_only, ref, gathered_ref))
            torch.cuda.synchronize()
            for c, out, gathered, out_only, ref, gathered_ref in pending:
                check("out", out, ref, c)
                check("out_only", out_only, ref, c)
                assert torch.equal(gathered.cpu(), gathered_ref), f"gathered differs: {c}"


def no_fallback(op: str, fn, ctx, rank: int, world: int) -> None:
    """Runs fn; a fallback to the unfused path warns once per process (fused_common.cpp
    note_fallback, a C++ TORCH_WARN: logged on file descriptor 2 for ops called through
    torch.ops, not raised as a Python warning): none may happen, or the fused kernel was not
    what ran."""
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile() as tmp:
        os.dup2(tmp.fileno(), 2)
        try:
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                fn(ctx, rank, world)
                torch.cuda.synchronize()
        finally:  # what was logged goes on to the real stderr, also when fn raised
            os.dup2(saved, 2)
            os.close(saved)
            tmp.seek(0)
            text = tmp.read().decode(errors="replace")
            sys.stderr.write(text)
    text += "\n".join(str(c.message) for c in caught)
    unfused = [ln for ln in text.splitlines() if "runs unfused" in ln]
    assert not unfused, f"{op} across nodes ran unfused: {unfused}"
    info = json.loads(torch.ops.mkernel._net_path_info(ctx.handle, world))
    want_gdr = gdr_requested(os.environ)  # MKERNEL_NET_GDR, or its default
    assert info.get("gpu_direct", False) == want_gdr, f"gpu_direct {info.get('gpu_direct')}, want {want_gdr}"
    emit("PATH", {"op": op, "rank": rank, "fused": True, "transport": info.get("transport"),
                  "gpu_direct": info.get("gpu_direct", False)})


def run_rs(ctx, rank: int, world: int) -> None:
    for rnd in range(2):
        for dname, dtype in DTYPES.items():
            pending = []
            for i, (rows, k, n) in enumerate(REDUCE_SHAPES):
                rows = (rows + world - 1) // world * world
                case = 1000 * i + (0 if dtype is torch.bfloat16 else 500) + 100 + 50 * rnd
                total, x, w = reduce_reference(case, world, rows, k, n, dtype, rank)
                b = rows // world
                ref = total[rank * b:(rank + 1) * b]
                poison((tuple(ref.shape), dtype))
                out = mkernel.gemm_rs(x.cuda(), w.cuda(), group=ctx)
                pending.append((dict(op="gemm_rs_nodes", dtype=dname, m=rows, k=k, n=n, world=world,
                                     rank=rank, round=rnd), out, ref))
            torch.cuda.synchronize()
            for c, out, ref in pending:
                check("out", out, ref, c)


# (M, k, N) for gemm_ar across nodes: M ragged against any W (W = 2, 4): one row (ranks past the
# first own none), 9 rows (W = 4: the last owner holds none), rows not a tile multiple, and a
# 128x256-tile shape with M = 4 * 513 - 2 (every owner's block crosses tile rows).
AR_SHAPES = [(1, 64, 96), (9, 128, 136), (333, 256, 200), (1001, 512, 1024), (2050, 512, 4096)]


def suite_ar(ctx, rank: int, world: int) -> None:
    no_fallback("gemm_ar", run_ar, ctx, rank, world)


def run_ar(ctx, rank: int, world: int) -> None:
    for rnd in range(2):  # the second round reuses both receive halves (call parity)
        for dname, dtype in DTYPES.items():
            pending = []
            for i, (rows, k, n) in enumerate(AR_SHAPES):
                case = 1000 * i + (0 if dtype is torch.bfloat16 else 500) + 300 + 50 * rnd
                total, x, w = reduce_reference(case, world, rows, k, n, dtype, rank)
                per = (rows + world - 1) // world
                # out is the first M rows of the gathered shards [W * per, N]; the shard [per, N]
                poison(((world * per, n), dtype), ((per, n), dtype), ((rows, n), dtype))
                out = mkernel.gemm_ar(x.cuda(), w.cuda(), group=ctx)
                pending.append((dict(op="gemm_ar_nodes", dtype=dname, m=rows, k=k, n=n, world=world,
                                     rank=rank, round=rnd), out, total))
            torch.cuda.synchronize()
            for c, out, ref in pending:
                assert out.is_contiguous() and tuple(out.shape) == tuple(ref.shape), c
                bits = out.contiguous().view(torch.int16).cpu().numpy().tobytes()
                check("out", out, ref, dict(c, sha=hashlib.sha256(bits).hexdigest()[:16]))


# The sequence that hung in s12run2 (bench_fused --nodes-lean: ag and rs rows across 2 emulated
# nodes, then gemm_ar's first call, whose choose_path timed the substrate all_reduce across nodes:
# "waiting for inter-node data from peer rank 0 (flag index 0: wants >= 303, saw 0)"). Each step
# prints the rank's inter-node path before and after it (sizes, transport) and checks its values;
# MIXED_SKIP (comma-separated step names) leaves steps out, so one launch per variant bisects it.
MIXED_STEPS = ("ar_small", "ag", "ar_small2", "rs", "ar_small3", "ar_big", "gemm_ar_auto", "gemm_ar_forced")


def suite_mixed(ctx, rank: int, world: int) -> None:
    skip = set(filter(None, os.environ.get("MIXED_SKIP", "").split(",")))
    dtype = torch.bfloat16

    def all_reduce_step(rows: int, cols: int, case: int) -> None:
        g = torch.Generator().manual_seed(case)
        xs = [torch.randint(-8, 8, (rows, cols), generator=g).to(dtype) for _ in range(world)]
        ref = sum(x.double() for x in xs)  # small integers: exact in bf16 and fp32
        poison(((rows, cols), dtype))
        out = mkernel.all_reduce(xs[rank].cuda(), group=ctx)
        torch.cuda.synchronize()
        assert torch.equal(out.double().cpu(), ref), f"all_reduce {rows}x{cols} wrong on rank {rank}"

    def ag_step() -> None:  # bench_fused's ag smoke row per rank: 1024 x 8192, N = 3584
        os.environ["MKERNEL_FUSED"] = "force"
        _, ref, x, w = ag_reference(9100, world, 1024, 8192, 3584, dtype, rank)
        for _ in range(3):
            out = mkernel.ag_gemm(x.cuda(), w.cuda(), group=ctx)
        torch.cuda.synchronize()
        check("out", out, ref, dict(op="mixed_ag", rank=rank))

    def rs_step() -> None:  # bench_fused's rs smoke row: 4096 x 1024 x 8192
        os.environ["MKERNEL_FUSED"] = "force"
        total, x, w = reduce_reference(9200, world, 4096, 1024, 8192, dtype, rank)
        b = 4096 // world
        for _ in range(3):
            out = mkernel.gemm_rs(x.cuda(), w.cuda(), group=ctx)
        torch.cuda.synchronize()
        check("out", out, total[rank * b:(rank + 1) * b], dict(op="mixed_rs", rank=rank))

    def gemm_ar_step(pin: str | None) -> None:  # the ar smoke row; pin None: choose_path
        if pin is None:
            os.environ.pop("MKERNEL_FUSED", None)
        else:
            os.environ["MKERNEL_FUSED"] = pin
        os.environ["MKERNEL_FUSED_VERBOSE"] = "1"
        total, x, w = reduce_reference(9300, world, 4096, 1024, 8192, dtype, rank)
        for _ in range(3):
            out = mkernel.gemm_ar(x.cuda(), w.cuda(), group=ctx)
        torch.cuda.synchronize()
        check("out", out, total, dict(op="mixed_gemm_ar", pin=pin, rank=rank))

    steps = {
        "ar_small": lambda: all_reduce_step(2048, 1024, 1),
        "ag": ag_step,
        "ar_small2": lambda: all_reduce_step(2048, 1024, 2),
        "rs": rs_step,
        "ar_small3": lambda: all_reduce_step(2048, 1024, 3),
        "ar_big": lambda: all_reduce_step(4096, 8192, 4),
        "gemm_ar_auto": lambda: gemm_ar_step(None),
        "gemm_ar_forced": lambda: gemm_ar_step("force"),
    }
    for name in MIXED_STEPS:
        if name in skip:
            continue
        before = torch.ops.mkernel._net_path_info(ctx.handle, world)
        print(f"STEP {name} rank {rank} begins; path {before}", flush=True)
        t0 = time.monotonic()
        steps[name]()
        after = torch.ops.mkernel._net_path_info(ctx.handle, world)
        print(f"STEP {name} rank {rank} ok in {time.monotonic() - t0:.2f} s; path {after}", flush=True)
        emit("MIXED", {"step": name, "rank": rank})


# s14run1's two failures across 2 emulated nodes under the GPU-direct emulation, as sequences of
# first calls (choose_path: every candidate plan and the unfused path measured): xn3_w2 ran
# ag_gemm x [1024, 8192] w [3584, 8192], then x [2048, 8192] w [7168, 8192] (its first call never
# returned: a 15 s stall, then "unspecified launch failure"); xn5_B ran gemm_rs 4096x1024x8192
# (x [4096, 1024] per rank, w [8192, 1024]) as its first call with MKERNEL_NET_GDR_COPIER=thread
# (the same). GROW_STEPS (comma-separated, default every step) picks them; a step name ending in
# "f" runs the shape once more with MKERNEL_FUSED=force (the fused kernel's own values). Every
# output is checked against the float32 reference; each step prints its first call's seconds
# and the inter-node path (sizes, copier, proxy stats) before and after it, and on a failure the
# wait record and the path's state before it raises.
GROW_SHAPES = {"ag1": ("ag", 1024, 8192, 3584), "ag2": ("ag", 2048, 8192, 7168),
               "rs1": ("rs", 4096, 1024, 8192)}
GROW_STEPS = ("ag1", "ag2", "rs1")


def suite_grow(ctx, rank: int, world: int) -> None:
    from benchmarks.common import copier_delta  # the repo root is on sys.path (tests.gpu imports)
    steps = [s for s in os.environ.get("GROW_STEPS", ",".join(GROW_STEPS)).split(",") if s]
    dtype = torch.bfloat16
    os.environ["MKERNEL_FUSED_VERBOSE"] = "1"  # the measured candidates on stderr
    for i, name in enumerate(steps):
        forced = name.endswith("f") and name[:-1] in GROW_SHAPES
        kind, m, k, n = GROW_SHAPES[name[:-1] if forced else name]
        if forced:
            os.environ["MKERNEL_FUSED"] = "force"
        else:
            os.environ.pop("MKERNEL_FUSED", None)
        before = torch.ops.mkernel._net_path_info(ctx.handle, world)
        print(f"STEP {name} rank {rank} begins ({kind} {m}x{k}x{n}, MKERNEL_FUSED="
              f"{os.environ.get('MKERNEL_FUSED', '-')}); path {before}", flush=True)
        case = 9400 + 10 * list(GROW_SHAPES).index(name[:-1] if forced else name)
        if kind == "ag":
            _, ref, x, w = ag_reference(case, world, m, k, n, dtype, rank)
            out_shape = (world * m, n)
        else:
            total, x, w = reduce_reference(case, world, m, k, n, dtype, rank)
            b = m // world
            ref = total[rank * b:(rank + 1) * b]
            out_shape = (b, n)
        x, w = x.cuda(), w.cuda()
        torch.cuda.synchronize()
        try:
            outs = []
            t0 = time.monotonic()
            for call in range(2):  # the first call (the measurement), then one more
                poison((out_shape, dtype))
                outs.append(mkernel.ag_gemm(x, w, group=ctx) if kind == "ag"
                            else mkernel.gemm_rs(x, w, group=ctx))
                torch.cuda.synchronize()
                if call == 0:
                    first_s = time.monotonic() - t0
            for call, out in enumerate(outs):
                check(f"out{call}", out, ref, dict(op=f"grow_{name}", rank=rank, m=m, k=k, n=n))
        except Exception:
            print(f"WAIT rank {rank} step {name}: {mkernel.ops.last_wait_failure()}",
                  file=sys.stderr, flush=True)
            try:
                info = torch.ops.mkernel._net_path_info(ctx.handle, world)
            except Exception as e:  # noqa: BLE001
                info = f"unreadable: {type(e).__name__}: {e}"
            print(f"PATH rank {rank} step {name} after the failure: {info}", file=sys.stderr,
                  flush=True)
            raise
        after = torch.ops.mkernel._net_path_info(ctx.handle, world)
        print(f"STEP {name} rank {rank} ok: first call {first_s:.2f} s; path {after}", flush=True)
        # xnode7: how the copier submitted this step's copies and what each cost (both calls).
        print(f"COPIER step {name} rank {rank} " + json.dumps(copier_delta(before, after)), flush=True)
        emit("GROW", {"step": name, "rank": rank, "first_s": round(first_s, 3)})
    os.environ["MKERNEL_FUSED"] = "force"


def suite_kill(ctx, rank: int, world: int) -> None:
    victim = world - 1
    m, k, n = 4096, 1024, 4096  # 512 tiles of every rank's rows: each CTA waits on the victim's first
    x, w = inputs(7, rank, m, k, n, torch.bfloat16)
    x, w = x.cuda(), w.cuda()
    for _ in range(3):  # the same shape first: the kill call grows nothing (no host collective)
        mkernel.ag_gemm(x, w, group=ctx)
    torch.cuda.synchronize()
    dist.barrier()
    if rank == victim:
        mkernel.ag_gemm(x, w, group=ctx)
        os.kill(os.getpid(), signal.SIGKILL)
    t0 = time.monotonic()
    try:
        for _ in range(3):
            mkernel.ag_gemm(x, w, group=ctx)
        mkernel.synchronize()
    except Exception as e:  # noqa: BLE001
        emit("ERR", {"suite": "kill", "type": type(e).__name__, "s": time.monotonic() - t0,
                     "msg": str(e)[:600], "record": mkernel.last_wait_failure()})
        os._exit(0)
    raise AssertionError("an ag_gemm without the killed rank succeeded")


def main() -> None:
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    torch.set_num_threads(1)
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.cuda.set_device(0)
    os.environ.setdefault("MKERNEL_FUSED", "force")  # the fused kernel itself, not the choice
    os.environ.setdefault("MKERNEL_FUSED_NODES", "1")
    dist.init_process_group("gloo", rank=rank, world_size=world)
    ctx = mkernel.init()
    for name in os.environ.get("FUSED_NODES_SUITE", "ag").split(","):
        try:
            {"ag": suite_ag, "rs": suite_rs, "ar": suite_ar, "kill": suite_kill,
             "mixed": suite_mixed, "grow": suite_grow}[name](ctx, rank, world)
        except Exception:
            print(f"WAIT rank {rank}: {mkernel.ops.last_wait_failure()}", file=sys.stderr, flush=True)
            raise
        print(f"SUITE {name} done on rank {rank}", flush=True)
    torch.cuda.synchronize()
    print(f"OK {rank}", flush=True)
    mkernel.shutdown()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
