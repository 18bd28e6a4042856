"""What each rank process of tests/gpu/test_moe_ranks.py runs beside tests/host/moe_rank_checks.py
(TEST_DEVICE=cuda): the MoE ops on CUDA at W > 1 captured in a CUDA graph and replayed with new
inputs (copied into the captured tensors; with and without mkernel.moe.reserve_tokens), each
replay bit-identical to an eager call on the same
inputs and within bf16 rounding of the float64 reference from every rank's inputs.

Prints ``CASE {json}`` per checked replay and ``OK <rank>`` at the end; a failed check raises.
``TEST_SUITE``: comma-separated suites of moe_rank_checks (matrix, repeat), ``graph`` or
``kill`` (the last rank dies mid-dispatch, or mid-combine with TEST_KILL_OP=combine; the others
print ``ERR {json}`` and exit).
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time

import torch
import torch.distributed as dist
import torch.nn.functional as F

import mkernel
from tests.host import moe_rank_checks
from tests.moe_reference import layouts, make_inputs, make_weights, moe_forward, rel_err


def graph(ctx) -> None:
    rank, world = ctx.rank, ctx.world_size
    dt = torch.bfloat16
    h, f, k, e = 64, 32, 2, 2 * world
    el = e // world
    tokens = [24 + 4 * s for s in range(world)]
    for capacity in (0, 6):
        # capacity 0 runs with a reserved token bound (no host exchange), 6 without.
        mkernel.moe.reserve_tokens(max(tokens) + 3 if capacity == 0 else 0, group=ctx)
        w1_all = make_weights(50 + capacity, e, f, h, dt)
        w1 = w1_all[rank * el:(rank + 1) * el].cuda()

        def inputs_of(seed):
            return [make_inputs(seed, s, tokens[s], h, k, e, "skewed", dt) for s in range(world)]

        first = inputs_of(60 + capacity)[rank]
        sx, sidx, sw = first.x.cuda(), first.topk_idx.cuda(), first.topk_weights.cuda()

        def step():
            res = mkernel.moe_dispatch_gemm(sx, sidx, w1, num_experts=e, capacity=capacity,
                                            group=ctx)
            return res, mkernel.moe_combine(F.silu(res.out), res.handle, sw, group=ctx)

        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            step()  # eager warm-up: the group's memory and the GEMM plan exist before capture
        torch.cuda.current_stream().wait_stream(stream)
        torch.cuda.synchronize()
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g, stream=stream):
            gres, gout = step()
        for seed in (70 + capacity, 80 + capacity):
            ins = inputs_of(seed)
            sx.copy_(ins[rank].x)
            sidx.copy_(ins[rank].topk_idx)
            sw.copy_(ins[rank].topk_weights)
            gout.fill_(float("nan"))
            g.replay()
            torch.cuda.synchronize()
            g_out, g_route = gout.clone(), gres.handle.route.clone()
            eres, eout = step()
            torch.cuda.synchronize()
            assert torch.equal(g_out, eout), f"rank {rank}: replay != eager (capacity {capacity})"
            assert torch.equal(g_route, eres.handle.route), f"rank {rank}: routes differ"
            routes, _ = layouts([i.topk_idx for i in ins], e, capacity)
            assert torch.equal(g_route.cpu(), routes[rank]), f"rank {rank}: route != reference"
            ref = moe_forward(ins[rank].x.double(), ins[rank].topk_idx,
                              ins[rank].topk_weights.double(), w1_all.double(), routes[rank],
                              F.silu)
            err = rel_err(g_out.cpu(), ref)
            rec = dict(case=f"graph/c{capacity}/s{seed}", rank=rank, world=world, err=err,
                       bound=1e-2)
            if not err <= 1e-2:
                raise AssertionError(f"rank {rank}: {json.dumps(rec)}")
            print("CASE", json.dumps(rec), flush=True)


def kill(ctx) -> None:
    """After a good call the victim (last rank) launches a dispatch and SIGKILLs itself while it
    runs; every other rank must raise within MKERNEL_OP_TIMEOUT (+ slack), its wait record naming
    the victim, not hang. Ends the process."""
    rank, world = ctx.rank, ctx.world_size
    victim = world - 1
    e, h, f, k, t = 2 * world, 64, 32, 2, 64
    gen = torch.Generator(device="cuda").manual_seed(5 + rank)
    x = torch.randn(t, h, device="cuda", dtype=torch.bfloat16, generator=gen)
    idx = torch.rand(t, e, device="cuda", generator=gen).topk(k, dim=1).indices
    w1 = torch.randn(e // world, f, h, device="cuda", dtype=torch.bfloat16, generator=gen)
    mkernel.moe.reserve_tokens(t, group=ctx)

    wts = torch.rand(t, k, device="cuda", generator=gen)
    kill_op = os.environ.get("TEST_KILL_OP", "dispatch")  # "combine": the victim dies in the combine

    def dispatch():
        return mkernel.moe_dispatch_gemm(x, idx, w1, num_experts=e, group=ctx)

    def call():
        d = dispatch()
        return mkernel.moe_combine(d.out, d.handle, wts, group=ctx) if kill_op == "combine" else d

    call()
    torch.cuda.synchronize()
    dist.barrier()
    if rank == victim:
        if kill_op == "combine":
            d = dispatch()
            torch.cuda.synchronize()  # the dispatch completed with every rank; the combine will not
            mkernel.moe_combine(d.out, d.handle, wts, group=ctx)
        else:
            call()
        os.kill(os.getpid(), signal.SIGKILL)
    t0 = time.monotonic()
    try:
        for _ in range(3):
            call()
        torch.cuda.synchronize()
    except Exception as err:  # noqa: BLE001  (the type is part of the record)
        print("ERR", json.dumps({"suite": "kill", "type": type(err).__name__,
                                 "s": time.monotonic() - t0, "msg": str(err)[:600],
                                 "record": mkernel.last_wait_failure()}), flush=True)
        os._exit(0)
    raise AssertionError("a dispatch without the killed rank succeeded")


def main() -> None:
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    ctx = mkernel.init()
    for suite in os.environ.get("TEST_SUITE", "graph").split(","):
        fn = {"graph": graph, "kill": kill}.get(suite) or getattr(moe_rank_checks, suite)
        try:
            fn(ctx)
        except Exception as e:
            # The device wait record (op, peer, flag, values) when a kernel of this rank trapped,
            # in the last line of the traceback.
            raise RuntimeError(f"rank {ctx.rank}: suite {suite} failed: {str(e)[:300]}; wait "
                               f"record: {mkernel.last_wait_failure()}") from e
    ctx.barrier()
    mkernel.shutdown()
    dist.destroy_process_group()
    print("OK", ctx.rank, flush=True)
    sys.stdout.flush()
