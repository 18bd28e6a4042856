"""What each rank process of tests/host/test_moe_host.py runs: moe_dispatch_gemm and moe_combine
through the host reference backend, forward and backward, against the float64 reference of
tests/moe_reference.py computed from every rank's inputs (each rank regenerates them all from
the case's seed).

A rank prints ``CASE {json}`` per checked case and ``OK <rank>`` at the end; a failed check
raises (exit status 1) with the case in the message. ``TEST_SUITE`` (comma-separated):
``matrix`` (the case table), ``carried`` (the table with topk_weights given to the dispatch:
its carried routes checked, the combine using them bit for bit the combine exchanging them),
``repeat`` (bit-identical results across calls), ``errors``
(a mismatched H and a bad expert id raise on every rank; the group stays usable), ``buffer``
(mkernel.moe.MoEBuffer against the plain ops and the reference), ``fuzz`` (FUZZ_CASES random cases
from FUZZ_SEED: tokens per rank 0-300, H / F multiples of 8, top-k 1-8, 1-4 experts a rank,
uniform / skewed / empty routing, capacity drops; the same draw on every rank).
"""

from __future__ import annotations

import json
import math
import os
import random
import sys

import torch
import torch.distributed as dist
import torch.nn.functional as F

import mkernel
from tests.moe_reference import layouts, make_inputs, make_weights, moe_forward, rel_err

BOUNDS = {torch.float32: 1e-5, torch.bfloat16: 1e-2, torch.float16: 1e-2}


def act(z: torch.Tensor) -> torch.Tensor:
    """The stand-in for everything between the two exchanges (row-local, differentiable)."""
    return F.silu(z)


def cases(world: int) -> list[dict]:
    """(seed, per-rank T, H, F, k, E, capacity, routing, dtype): ragged T with empty ranks, top-k
    1/2/8, empty experts, skew, capacity drops."""
    e8 = 8 if 8 % world == 0 else 3 * world  # k = 8 needs E >= 8, divisible by W
    return [
        dict(seed=1, tokens=[13 + 5 * r for r in range(world)], h=16, f=24, k=2, e=2 * world,
             capacity=0, kind="uniform", dtype="fp32"),
        dict(seed=2, tokens=[0 if r % 2 else 9 + r for r in range(world)], h=8, f=16, k=1,
             e=world, capacity=0, kind="skewed", dtype="bf16"),
        dict(seed=3, tokens=[7 + 3 * r for r in range(world)], h=16, f=8, k=8, e=max(e8, 8),
             capacity=0, kind="empty", dtype="fp32"),
        dict(seed=4, tokens=[11 + 2 * r for r in range(world)], h=8, f=8, k=2, e=2 * world,
             capacity=3, kind="skewed", dtype="fp32"),
        dict(seed=5, tokens=[0] * world, h=8, f=8, k=2, e=2 * world, capacity=0, kind="uniform",
             dtype="fp16"),
        dict(seed=6, tokens=[40 + 8 * r for r in range(world)], h=64, f=32, k=4, e=4 * world,
             capacity=0, kind="uniform", dtype="bf16"),
        dict(seed=7, tokens=[20 if r == 0 else 0 for r in range(world)], h=16, f=16, k=2,
             e=2 * world, capacity=4, kind="uniform", dtype="bf16"),
    ]


DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}


DEVICE = os.environ.get("TEST_DEVICE", "cpu")  # "cuda": the same checks on the GPU (tests/gpu)


def checkpoint(what: str, c: dict) -> None:
    """On CUDA: wait for the GPU here, so that a failing kernel is named by the step that ran it
    (with this process's wait record, when a device wait timed out)."""
    if DEVICE != "cuda":
        return
    try:
        torch.cuda.synchronize()
    except Exception as e:  # noqa: BLE001 (re-raised with the step and the wait record)
        raise RuntimeError(f"case {c.get('seed')}: CUDA failed by the end of {what}; wait record: "
                           f"{mkernel.last_wait_failure()}") from e


def run_case(ctx, c: dict) -> dict:
    rank, world = ctx.rank, ctx.world_size
    dt = DTYPES[c["dtype"]]
    if DEVICE == "cuda" and dt == torch.float32:
        dt = torch.bfloat16  # the CUDA kernels take bf16/fp16
    e, el = c["e"], c["e"] // world
    ins = [make_inputs(c["seed"], s, c["tokens"][s], c["h"], c["k"], e, c["kind"], dt)
           for s in range(world)]
    w1_all = make_weights(c["seed"], e, c["f"], c["h"], dt)
    routes, lay = layouts([i.topk_idx for i in ins], e, c["capacity"])
    me, my = ins[rank], lay[rank]
    bound = BOUNDS[dt]

    # Forward, with grads.
    x = me.x.clone().to(DEVICE).requires_grad_(True)
    w1 = w1_all[rank * el:(rank + 1) * el].clone().to(DEVICE).requires_grad_(True)
    w = me.topk_weights.clone().to(DEVICE).requires_grad_(True)
    carry = bool(c.get("carry"))  # the weights travel with the dispatch (the `carried` suite)
    one_node = world == int(os.environ.get("LOCAL_WORLD_SIZE", world))
    # MKERNEL_MOE_FUSED=auto: a shape's first call times the fused and the default path
    # (choose_path) and returns a later call's output, in memory the allocator recycled from the
    # timed calls: settle both verdicts (with and without recv_x) first, so that the checked calls
    # below start from poisoned memory. The two verdicts may differ (the keys differ).
    auto = DEVICE == "cuda" and os.environ.get("MKERNEL_MOE_FUSED") == "auto"
    if auto:
        mkernel.moe_dispatch_gemm(x, me.topk_idx.to(DEVICE), w1, num_experts=e,
                                  capacity=c["capacity"], topk_weights=w if carry else None,
                                  group=ctx)
        if c["capacity"] == 0 and one_node:
            with torch.no_grad():
                mkernel.moe_dispatch_gemm(x.detach(), me.topk_idx.to(DEVICE), w1.detach(),
                                          num_experts=e, capacity=0, group=ctx)
        checkpoint("moe_dispatch_gemm's measured first calls (MKERNEL_MOE_FUSED=auto)", c)
    if DEVICE == "cuda":
        poison_allocator()
    res = mkernel.moe_dispatch_gemm(x, me.topk_idx.to(DEVICE), w1, num_experts=e,
                                    capacity=c["capacity"], topk_weights=w if carry else None,
                                    group=ctx)
    checkpoint("moe_dispatch_gemm", c)
    if c["capacity"] == 0 and one_node:
        # Without a weight gradient the received rows are not returned: with
        # MKERNEL_MOE_GATHER_A=1 the CUDA dispatch on one node then skips its expansion copy and
        # the grouped GEMM gathers each row where it landed (gemm::Problem::a_row_map). The
        # same rows, bit for bit, as the expanded path (under MKERNEL_MOE_FUSED=auto one call may
        # run fused and the other not: within the bound of each other then).
        if DEVICE == "cuda":
            poison_allocator()
        with torch.no_grad():
            lean = mkernel.moe_dispatch_gemm(x.detach(), me.topk_idx.to(DEVICE), w1.detach(),
                                             num_experts=e, capacity=0, group=ctx)
        checkpoint("moe_dispatch_gemm without recv_x", c)
        live_rows = int(res.counts.sum())
        assert torch.equal(lean.counts, res.counts), c
        if auto:
            diff = rel_err(lean.out[:live_rows].cpu(), res.out.detach()[:live_rows].cpu().double())
            assert diff <= bound, (c, diff, bound)
        else:
            assert torch.equal(lean.out[:live_rows], res.out.detach()[:live_rows]), (
                c, rel_err(lean.out[:live_rows].cpu(), res.out.detach()[:live_rows].cpu()))
    if carry:
        check_peer_routes(ctx, c, res.handle, routes, ins)
    route = res.handle.route.cpu()
    assert torch.equal(route, routes[rank]), (c, route, routes[rank])
    assert torch.equal(res.handle.recv_counts.cpu(), my.recv_counts), (c, res.handle.recv_counts)
    assert torch.equal(res.counts.cpu(), my.counts), c
    assert torch.equal(res.offs.cpu(), torch.cumsum(my.counts, 0, dtype=torch.int32)), c
    out2d = res.out.reshape(-1, c["f"]).cpu()
    if DEVICE == "cuda" and world > 1 and c["capacity"] == 0:
        # The packed outputs hold a static bound of rows on CUDA at W > 1 (csrc/moe_ep.h).
        assert out2d.shape[0] >= my.rows, (c, res.out.shape, my.rows)
        out2d = out2d[:my.rows]
    if DEVICE == "cuda":  # rows past the counts are unspecified on CUDA
        live = torch.tensor([o is not None for o in my.origin], dtype=torch.bool)
        out2d = out2d.masked_fill(~live.unsqueeze(1), 0)
    assert out2d.shape[0] == my.rows, (c, res.out.shape, my.rows)
    ref_out = torch.zeros(my.rows, c["f"], dtype=torch.float64)
    for row, o in enumerate(my.origin):
        if o is not None:
            s, t, _, le = o
            ref_out[row] = ins[s].x[t].double() @ w1_all[rank * el + le].double().T
    err_out = rel_err(out2d.detach(), ref_out)
    y = act(res.out)
    out = mkernel.moe_combine(y, res.handle, w, group=ctx)
    checkpoint("moe_combine", c)
    if carry:  # the carried routes give the bits of the combine's own exchange of them
        plain = mkernel.moe_combine(y.detach(), res.handle, w.detach().clone(), group=ctx)
        assert torch.equal(out.detach(), plain), (c, rel_err(out.detach().cpu(), plain.cpu()))
    gen = torch.Generator().manual_seed(c["seed"] * 31 + rank)
    g = torch.randn(out.shape, generator=gen, dtype=torch.float64)
    grad_rows = []  # the gradient reaching the expert outputs (a diagnosis when grad_w1 is off)
    if res.out.requires_grad:
        res.out.register_hook(lambda gr: grad_rows.append(gr.detach().clone()))
    (out.double() * g.to(DEVICE)).sum().backward()
    checkpoint("the backward pass (_moe_scatter, _moe_gather, moe_combine)", c)
    out = out.cpu()

    # The float64 reference, over every rank's tokens.
    xs = [i.x.double().requires_grad_(s == rank) for s, i in enumerate(ins)]
    w1r = w1_all.double().requires_grad_(True)
    ws = [i.topk_weights.double().requires_grad_(s == rank) for s, i in enumerate(ins)]
    loss = 0.0
    ref_mine = None
    for s in range(world):
        o = moe_forward(xs[s], ins[s].topk_idx, ws[s], w1r, routes[s], act)
        gs = torch.randn(o.shape, generator=torch.Generator().manual_seed(c["seed"] * 31 + s),
                         dtype=torch.float64)
        loss = loss + (o * gs).sum()
        if s == rank:
            ref_mine = o
    loss.backward()
    errs = {
        "out": err_out,
        "combine": rel_err(out.detach(), ref_mine.detach()),
        "grad_x": rel_err(x.grad.cpu(), xs[rank].grad) if c["tokens"][rank] else 0.0,
        "grad_w1": rel_err(w1.grad.cpu(), w1r.grad[rank * el:(rank + 1) * el]),
        "grad_w": _weight_grad_err(w.grad.cpu(), ws[rank].grad, xs[rank].detach(), ins[rank].topk_idx,
                                   w1_all, routes[rank], c, rank, dt) if c["tokens"][rank] else 0.0,
    }
    if c["tokens"][rank]:
        assert x.grad.shape == x.shape and w.grad.shape == w.shape
    # NaN anywhere fails (max() of floats skips a NaN that is not first).
    worst = float("nan") if any(math.isnan(v) for v in errs.values()) else max(errs.values())
    bound = BOUNDS[dt]
    rec = dict(case=c["seed"], rank=rank, world=world, dtype=str(dt)[6:], k=c["k"], device=DEVICE,
               capacity=c["capacity"], rows=my.rows, err=worst, errs=errs, bound=bound)
    if not worst <= bound:
        rec["pieces"] = _diagnose(c, rank, el, ins, w1_all, my, res, grad_rows)
        raise AssertionError(f"rank {rank}: case {json.dumps(rec)} exceeds its bound")
    print("CASE", json.dumps(rec), flush=True)
    return rec


def check_peer_routes(ctx, c: dict, handle, routes: list[torch.Tensor], ins: list) -> None:
    """The dispatch's carried routes against every rank's reference routes and weights: slot
    s*Tm + t holds (code low, code high) per choice, then the weights' bits (0 where the choice
    was dropped or the token is padding), Tm = the largest T. They exist exactly where the
    pipelined combine can use them: CUDA, several nodes, capacity 0."""
    world, k = ctx.world_size, c["k"]
    nodes = world // int(os.environ.get("LOCAL_WORLD_SIZE", world))
    pr = handle.peer_routes
    assert pr is not None and pr.dtype == torch.int32 and pr.shape[1] == 3 * k, (c, pr)
    if not (DEVICE == "cuda" and nodes > 1 and c["capacity"] == 0):
        assert pr.shape[0] == 0, (c, pr.shape)
        return
    tm = max(c["tokens"])
    want = torch.zeros(world * tm, 3 * k, dtype=torch.int32)
    for s in range(world):
        t = c["tokens"][s]
        codes = torch.full((tm, k), -1, dtype=torch.int64)
        codes[:t] = routes[s]
        wts = torch.zeros(tm, k, dtype=torch.float32)
        wts[:t] = ins[s].topk_weights.float()
        wts = wts.masked_fill(codes < 0, 0.0)
        want[s * tm:(s + 1) * tm, :2 * k] = codes.view(torch.int32)
        want[s * tm:(s + 1) * tm, 2 * k:] = wts.view(torch.int32)
    assert torch.equal(pr.cpu(), want), (c, (pr.cpu() != want).nonzero()[:8])


def carried(ctx) -> None:
    """The matrix with topk_weights given to the dispatch (MoEMLP's way): the routes it carries
    equal the reference's, the combine that uses them equals the combine that exchanges them, bit
    for bit, and both the float64 reference."""
    for c in cases(ctx.world_size):
        run_case(ctx, dict(c, carry=True))


def poison_allocator() -> None:
    """Leave NaN-filled blocks in CUDA's caching allocator so the op's fresh outputs start as
    NaN (a row the kernels never write fails the check)."""
    blocks = [torch.full((1 << n,), float("nan"), device="cuda") for n in range(8, 22, 2)]
    torch.cuda.synchronize()
    del blocks


def _weight_grad_err(got, ref, x, idx, w1_all, route, c: dict, rank: int, dt) -> float:
    """The routing weights' gradient error on the scale of rel_err: each element is one dot
    product <act(z), g> over F, which can cancel to near 0 (a rank with one token: session 44's
    fuzz), so each is held to bound x |ref| plus two units of rounding of its terms' magnitude
    sum |act(z)| . |g| (what rounding act(z) to the input dtype alone may move it by)."""
    bound = BOUNDS[dt]
    if got.numel() == 0:
        return 0.0
    g = torch.randn(c["tokens"][rank], c["f"], generator=torch.Generator().manual_seed(c["seed"] * 31 + rank),
                    dtype=torch.float64)
    mags = []
    for j in range(idx.shape[1]):
        z = torch.einsum("th,tfh->tf", x.double(), w1_all.double()[idx[:, j]])
        mags.append((act(z).abs() * g.abs()).sum(-1) * (route[:, j] >= 0).double())
    mag = torch.stack(mags, 1)
    # two roundings of act(z) to the dtype, and a float32 sum over F terms
    unit, unit32 = torch.finfo(dt).eps / 2, torch.finfo(torch.float32).eps / 2
    allowed = bound * ref.double().abs() + (2 * unit + c["f"] * unit32) * mag
    excess = (got.double() - ref.double()).abs() / allowed.clamp_min(1e-300)
    return float(excess.max()) * bound  # <= bound exactly when every element is within its own


def _diagnose(c: dict, rank: int, el: int, ins, w1_all, my, res, grad_rows) -> dict:
    """Which stored piece of a case is off, row by row against float64: the received rows
    (recv_x, what the weight gradient reads) and the gradient reaching the expert outputs."""
    f = c["f"]
    flat_x = res.recv_x.reshape(-1, res.recv_x.shape[-1]).double().cpu() if res.recv_x.numel() else None
    g_out = grad_rows[0].reshape(-1, f).double().cpu() if grad_rows else None
    bad_x, bad_g, live = [], [], 0
    for row, o in enumerate(my.origin):
        if o is None:
            continue
        live += 1
        s, t, j, le = o
        xr = ins[s].x[t].double()
        if flat_x is not None and row < flat_x.shape[0] and not torch.equal(flat_x[row], xr):
            bad_x.append(row)
        if g_out is not None and row < g_out.shape[0]:
            z = xr @ w1_all[rank * el + le].double().T
            sig = torch.sigmoid(z)
            gs = torch.randn(c["tokens"][s], f, generator=torch.Generator().manual_seed(c["seed"] * 31 + s),
                             dtype=torch.float64)[t]
            want = gs * ins[s].topk_weights[t, j].double() * sig * (1 + z * (1 - sig))
            if not torch.isfinite(g_out[row]).all() or \
                    (g_out[row] - want).norm() > 0.05 * want.norm() + 1e-6:
                bad_g.append(row)
    return {"live_rows": live, "recv_x_bad_rows": bad_x[:12], "recv_x_bad": len(bad_x),
            "grad_out_bad_rows": bad_g[:12], "grad_out_bad": len(bad_g),
            "recv_x_shape": list(res.recv_x.shape), "counts": res.counts.tolist()}


def fuzz_cases(world: int) -> list[dict]:
    """FUZZ_CASES random cases for run_case, drawn from FUZZ_SEED (the same list on every rank)."""
    r = random.Random(f"moe-{os.environ.get('FUZZ_SEED', '0')}-{world}")
    out = []
    for i in range(int(os.environ.get("FUZZ_CASES", "8"))):
        k = r.choice((1, 2, 2, 4, 8))
        el = max(r.choice((1, 2, 3, 4)), -(-k // world))  # k distinct experts need E >= k
        tokens = [0 if r.random() < 0.15 else r.choice((1, 7, 64, 129, r.randint(1, 300)))
                  for _ in range(world)]
        cap = 0 if r.random() < 0.7 else r.randint(1, 40)
        out.append(dict(seed=500 + i, tokens=tokens, h=8 * r.randint(1, 64), f=8 * r.randint(1, 64),
                        k=k, e=el * world, capacity=cap, kind=r.choice(("uniform", "skewed", "empty")),
                        dtype=r.choice(("bf16", "fp16", "fp32"))))
    return out


def fuzz(ctx) -> None:
    for c in fuzz_cases(ctx.world_size):
        print("FUZZ", json.dumps(dict(c, fuzz_seed=os.environ.get("FUZZ_SEED", "0"))), flush=True)
        run_case(ctx, c)


def wgrad_probe(ctx) -> None:
    """A diagnosis (session 44): the fuzz case whose w1 gradient came out NaN on CUDA at W = 3
    with capacity drops, run with the weight-gradient step instrumented: each of its inputs and
    its output checked for non-finite values and against float64, printed as PROBE lines."""
    from mkernel import _moe_registry as reg
    real, real_dgrad = reg._grouped_wgrad, reg._grouped_dgrad
    before = {}

    def dgrad_probed(grad_out, w1, counts, capacity):
        # grad_out as the dispatch's backward received it, before the dgrad GEMM and the combine
        # that sends dx home run: the weight gradient reads it after both.
        before["grad_out"], before["recv_x"] = grad_out.detach().clone(), None
        return real_dgrad(grad_out, w1, counts, capacity)

    def probed(grad_out, recv_x, counts, capacity):
        changed = None
        if "grad_out" in before:
            changed = not torch.equal(torch.nan_to_num(before["grad_out"], nan=1e30),
                                      torch.nan_to_num(grad_out.detach(), nan=1e30))
        out = real(grad_out, recv_x, counts, capacity)
        torch.cuda.synchronize() if DEVICE == "cuda" else None
        live = torch.arange(capacity, device=counts.device).unsqueeze(0) < counts.unsqueeze(1) \
            if capacity > 0 else None
        g64 = grad_out.double().masked_fill(~live.unsqueeze(-1), 0) if live is not None else grad_out.double()
        x64 = recv_x.double().masked_fill(~live.unsqueeze(-1), 0) if live is not None else recv_x.double()
        want = torch.bmm(g64.transpose(1, 2), x64) if capacity > 0 else None
        rec = {"rank": ctx.rank, "capacity": capacity, "counts": counts.tolist(),
               "grad_out_changed_since_dgrad": changed,
               "grad_out": [list(grad_out.shape), list(grad_out.stride()), str(grad_out.dtype),
                            bool(torch.isfinite(grad_out).all())],
               "grad_out_live_finite": bool(torch.isfinite(g64).all()),
               "recv_x": [list(recv_x.shape), list(recv_x.stride()), bool(torch.isfinite(recv_x).all())],
               "recv_x_live_finite": bool(torch.isfinite(x64).all()),
               "out": [list(out.shape), str(out.dtype), bool(torch.isfinite(out).all())],
               "rel_vs_fp64": None if want is None or not torch.isfinite(out).all() else
               float((out.double() - want).norm() / want.norm().clamp_min(1e-30))}
        if want is not None:  # the same product with g^T made contiguous first, and in float32
            for name, alt in (("contiguous", lambda a, b: torch.bmm(a.transpose(1, 2).contiguous(), b)),
                              ("fp32", lambda a, b: torch.bmm(a.float().transpose(1, 2), b.float()))):
                o = alt(g64.to(grad_out.dtype), x64.to(recv_x.dtype))
                rec["rel_" + name] = float((o.double() - want).norm() / want.norm().clamp_min(1e-30)) \
                    if torch.isfinite(o).all() else "nonfinite"
        print("PROBE", json.dumps(rec), flush=True)
        return out

    reg._grouped_wgrad, reg._grouped_dgrad = probed, dgrad_probed
    try:
        case = fuzz_cases(ctx.world_size)[2]
        try:
            run_case(ctx, case)
        except AssertionError as e:
            print("PROBE-FAIL", str(e)[:1500], flush=True)
    finally:
        reg._grouped_wgrad, reg._grouped_dgrad = real, real_dgrad


def matrix(ctx) -> None:
    for c in cases(ctx.world_size):
        run_case(ctx, c)


def repeat(ctx) -> None:
    """Three calls of one case give bit-identical outputs, routes and gradients."""
    world = ctx.world_size
    c = dict(seed=11, tokens=[25 + r for r in range(world)], h=32, f=16, k=2, e=2 * world,
             capacity=0, kind="skewed", dtype="bf16")
    ins = make_inputs(c["seed"], ctx.rank, c["tokens"][ctx.rank], c["h"], c["k"], c["e"],
                      c["kind"], torch.bfloat16)
    w1 = make_weights(c["seed"], c["e"], c["f"], c["h"], torch.bfloat16)[ctx.rank * 2:ctx.rank * 2 + 2]
    w1 = w1.to(DEVICE)
    idx, tw = ins.topk_idx.to(DEVICE), ins.topk_weights.to(DEVICE)
    seen = []
    for _ in range(3):
        x = ins.x.clone().to(DEVICE).requires_grad_(True)
        res = mkernel.moe_dispatch_gemm(x, idx, w1, num_experts=c["e"], group=ctx)
        out = mkernel.moe_combine(act(res.out), res.handle, tw, group=ctx)
        out.float().sum().backward()
        rows = int(res.counts.sum())  # rows past the counts are unspecified on CUDA
        seen.append((res.out.detach()[:rows], res.handle.route, out.detach(), x.grad))
    for other in seen[1:]:
        for a, b in zip(seen[0], other, strict=True):
            assert torch.equal(a, b), "repeated calls differ"
    print("CASE", json.dumps(dict(case="repeat", rank=ctx.rank, err=0.0, bound=1.0)), flush=True)


def errors(ctx) -> None:
    """A shape mismatch and a bad expert id raise on every rank, naming the rank; then the group
    still works."""
    rank, world = ctx.rank, ctx.world_size
    h = 16 if rank != world - 1 else 24
    x = torch.randn(5, h)
    idx = torch.zeros(5, 1, dtype=torch.int64)
    w1 = torch.randn(1, 8, h)
    try:
        mkernel.moe_dispatch_gemm(x, idx, w1, num_experts=world, group=ctx)
        raise AssertionError("a mismatched H did not raise")
    except RuntimeError as e:
        assert f"rank {world - 1 if rank != world - 1 else 0}" in str(e) and "H" in str(e), str(e)
        print("ERR", json.dumps({"msg": str(e).splitlines()[0]}), flush=True)
    x, w1 = torch.randn(5, 16), torch.randn(1, 8, 16)
    bad = idx.clone()
    if rank == world - 1:
        bad[3, 0] = world + 5
    try:
        mkernel.moe_dispatch_gemm(x, bad, w1, num_experts=world, group=ctx)
        raise AssertionError("a bad expert id did not raise")
    except ValueError as e:
        assert f"topk_idx[3, 0] of rank {world - 1} is {world + 5}" in str(e), str(e)
        print("ERR", json.dumps({"msg": str(e).splitlines()[0]}), flush=True)
    run_case(ctx, cases(world)[0])


def mlp(ctx) -> None:
    """mkernel.nn.MoEMLP (SwiGLU experts) against the dense float64 formula over every rank's
    tokens: output and the gradients of x, w1, w2 and topk_weights; capacity-free and padded."""
    from mkernel.nn import MoEMLP

    rank, world = ctx.rank, ctx.world_size
    h, inter, k = 16, 24, 2
    e = 2 * world
    el = e // world
    # CUDA: bf16 (the kernels' dtypes), H = 64 (the GPU kernels' row alignment), bound 2e-2.
    dt, bound = (torch.bfloat16, 2e-2) if DEVICE == "cuda" else (torch.float32, 1e-5)
    if DEVICE == "cuda":
        h = 64
    for capacity in (0, 5):
        seed = 40 + capacity
        tokens = [17 + 4 * s for s in range(world)]
        g = torch.Generator().manual_seed(seed)
        # The reference takes the layer's own (rounded) weights and inputs.
        w1_all = (torch.randn(e, 2 * inter, h, generator=g, dtype=torch.float64) / h ** 0.5).to(dt).double()
        w2_all = (torch.randn(e, h, inter, generator=g, dtype=torch.float64) / inter ** 0.5).to(dt).double()
        ins = [make_inputs(seed, s, tokens[s], h, k, e, "skewed", dt) for s in range(world)]
        routes, _ = layouts([i.topk_idx for i in ins], e, capacity)
        layer = MoEMLP(h, inter, e, capacity=capacity, group=ctx, dtype=dt, device=DEVICE)
        with torch.no_grad():
            layer.w1.copy_(w1_all[rank * el:(rank + 1) * el])
            layer.w2.copy_(w2_all[rank * el:(rank + 1) * el])
        me = ins[rank]
        x = me.x.clone().to(DEVICE).requires_grad_(True)
        w = me.topk_weights.clone().to(DEVICE).requires_grad_(True)
        out = layer(x, me.topk_idx.to(DEVICE), w)
        grads = [torch.randn(tokens[s], h, generator=torch.Generator().manual_seed(seed + s),
                             dtype=torch.float64) for s in range(world)]
        (out.double() * grads[rank].to(DEVICE)).sum().backward()

        w1r, w2r = w1_all.clone().requires_grad_(True), w2_all.clone().requires_grad_(True)
        xs = [i.x.double().requires_grad_(s == rank) for s, i in enumerate(ins)]
        ws = [i.topk_weights.double().requires_grad_(s == rank) for s, i in enumerate(ins)]
        loss, ref = 0.0, None
        for s in range(world):
            o = torch.zeros(tokens[s], h, dtype=torch.float64)
            kept = (routes[s] >= 0).double()
            for j in range(k):
                hh = torch.einsum("th,tfh->tf", xs[s], w1r[ins[s].topk_idx[:, j]])
                a = F.silu(hh[:, :inter]) * hh[:, inter:]
                y = torch.einsum("ti,thi->th", a, w2r[ins[s].topk_idx[:, j]])
                o = o + y * (ws[s][:, j] * kept[:, j]).unsqueeze(1)
            loss = loss + (o * grads[s]).sum()
            if s == rank:
                ref = o
        loss.backward()
        errs = {
            "out": rel_err(out.detach().cpu(), ref.detach()),
            "grad_x": rel_err(x.grad.cpu(), xs[rank].grad),
            "grad_w1": rel_err(layer.w1.grad.cpu(), w1r.grad[rank * el:(rank + 1) * el]),
            "grad_w2": rel_err(layer.w2.grad.cpu(), w2r.grad[rank * el:(rank + 1) * el]),
            "grad_w": rel_err(w.grad.cpu(), ws[rank].grad),
        }
        rec = dict(case=f"mlp/c{capacity}", rank=rank, err=max(errs.values()), errs=errs, bound=bound)
        if not rec["err"] <= bound:
            raise AssertionError(f"rank {rank}: {json.dumps(rec)}")
        print("CASE", json.dumps(rec), flush=True)


def buffer(ctx) -> None:
    """mkernel.moe.MoEBuffer over ten calls: T changing per rank and per call in calls 0-2 (T = 0
    on one rank once), then fixed; from call 3 every rank but 0 passes the same tensors (x,
    topk_idx, topk_weights, the combine's y: written in place), so those ranks move to the direct
    graphs (dispatch replayed from call 5, combine at call 7) while rank 0, whose tensors are fresh
    at each call, stays on the static graph and an eager combine (ranks replaying different graphs,
    or one eager while the others replay, in one exchange); w1 swapped for another tensor at call 8
    (a second static graph on every rank). Each call's dispatch rows, counts, route and combine
    equal the plain ops' on the same inputs bit for bit and the float64 reference within the
    dtype's bound. CUDA: the graphs captured are the ones that design implies (rank 0: 2 dispatch,
    0 combine; the others: 4 and 2). Then the argument errors."""
    rank, world = ctx.rank, ctx.world_size
    # TEST_BUFFER_WEIGHTS=1: the weights go to the dispatch too (carried routes across nodes).
    weighted = os.environ.get("TEST_BUFFER_WEIGHTS") == "1"
    dt = torch.bfloat16 if DEVICE == "cuda" else torch.float32
    h, f, k, e, max_t = 64, 32, 2, 2 * world, 40
    el = e // world
    buf = mkernel.moe.MoEBuffer(e, max_t, group=ctx)
    w1_alls = [make_weights(90 + i, e, f, h, dt) for i in range(2)]
    w1s = [w[rank * el:(rank + 1) * el].clone().to(DEVICE) for w in w1_alls]
    fixed = [(19 + 6 * s) % (max_t + 1) for s in range(world)]  # T from call 3
    xp = torch.empty(fixed[rank], h, dtype=dt, device=DEVICE)  # the same tensors, call after call
    idxp = torch.empty(fixed[rank], k, dtype=torch.int64, device=DEVICE)
    twp = torch.empty(fixed[rank], k, dtype=torch.float32, device=DEVICE)
    ys = torch.empty(world * max_t * min(k, el), f, dtype=dt, device=DEVICE)  # combine's y, one address
    held = []  # rank 0's (and calls 0-2's) tensors stay alive: fresh addresses each call
    if DEVICE == "cuda":
        poison_allocator()
    with torch.no_grad():
        for call in range(10):
            if call < 3:
                tokens = [(17 + 9 * s + 7 * call) % (max_t + 1) for s in range(world)]
                if call == 2:
                    tokens[world - 1] = 0
            else:
                tokens = fixed
            ins = [make_inputs(100 + call, s, tokens[s], h, k, e, "skewed", dt) for s in range(world)]
            wi = 0 if call < 8 else 1
            w1 = w1s[wi]
            me = ins[rank]
            same = call >= 3 and rank != 0
            if same:
                x, idx, tw = xp.copy_(me.x), idxp.copy_(me.topk_idx), twp.copy_(me.topk_weights)
            else:
                x, idx, tw = me.x.to(DEVICE), me.topk_idx.to(DEVICE), me.topk_weights.to(DEVICE)
                held.append((x, idx, tw))
            res = buf.dispatch_gemm(x, idx, w1, tw if weighted else None)
            rows = int(res.counts.sum())
            got = (res.out[:rows].clone(), res.counts.clone(), res.handle.route.clone())
            if same or DEVICE != "cuda":
                yin = ys[:res.out.shape[0]]  # CUDA: the static row bound (= ys); CPU: the exact rows
            else:
                yin = torch.empty_like(ys)
                held.append(yin)
            yin[:rows].copy_(act(res.out[:rows]))
            out_b = buf.combine(yin, res.handle, tw).clone()
            checkpoint(f"MoEBuffer call {call}", {"seed": 100 + call})
            ref = mkernel.moe_dispatch_gemm(x, idx, w1, num_experts=e, group=ctx)
            assert torch.equal(got[0], ref.out[:rows]), f"rank {rank} call {call}: dispatch out != the op's"
            assert torch.equal(got[1], ref.counts) and torch.equal(got[2], ref.handle.route), \
                f"rank {rank} call {call}: counts / route != the op's"
            out_e = mkernel.moe_combine(yin, ref.handle, tw, group=ctx)
            assert torch.equal(out_b, out_e), f"rank {rank} call {call}: combine != the op's"
            routes, _ = layouts([i.topk_idx for i in ins], e, 0)
            assert torch.equal(got[2].cpu(), routes[rank]), f"rank {rank} call {call}: route != reference"
            exp = moe_forward(me.x.double(), me.topk_idx, me.topk_weights.double(), w1_alls[wi].double(),
                              routes[rank], act)
            err = rel_err(out_b.cpu(), exp) if tokens[rank] else float(out_b.numel())
            rec = dict(case=f"buffer/{call}", rank=rank, world=world, tokens=tokens[rank], err=err,
                       bound=BOUNDS[dt], captures=[buf._dispatch.captures, buf._combine.captures])
            if not err <= BOUNDS[dt]:
                raise AssertionError(f"rank {rank}: {json.dumps(rec)}")
            print("CASE", json.dumps(rec), flush=True)
    expect = ([2, 0] if rank == 0 else [4, 2]) if DEVICE == "cuda" else [0, 0]
    got_caps = [buf._dispatch.captures, buf._combine.captures]
    assert got_caps == expect, f"rank {rank}: graphs captured (dispatch, combine) {got_caps}, expected {expect}"
    x = torch.zeros(max_t + 1, h, dtype=dt, device=DEVICE)
    idx = torch.zeros(max_t + 1, k, dtype=torch.int64, device=DEVICE)
    for what, fn in (
        ("more than the buffer's max_tokens", lambda: buf.dispatch_gemm(x, idx, w1s[0])),
        ("forward only", lambda: buf.dispatch_gemm(x[:4], idx[:4], w1s[0].clone().requires_grad_(True))),
        ("does not come from this buffer", lambda: buf.combine(
            ys, mkernel.ops.MoeHandle(idx[:4].clone(), idx[:1].int()), torch.zeros(4, k, device=DEVICE))),
    ):
        try:
            fn()
        except ValueError as err:
            assert what in str(err), str(err)
        else:
            raise AssertionError(f"MoEBuffer accepted a call that must raise ({what})")
    # mkernel.nn.MoEMLP(inference_max_tokens=...) under no_grad: its buffered forward (graphs on
    # CUDA, from the third call at the same addresses) equals its plain forward bit for bit.
    from mkernel.nn import MoEMLP

    layer = MoEMLP(h, 24, e, group=ctx, dtype=dt, device=DEVICE, inference_max_tokens=max_t)
    xq, iq, wq = xp.clone(), idxp.clone(), twp.clone()
    with torch.no_grad():
        for i in range(4):
            ins = make_inputs(200 + i, rank, fixed[rank], h, k, e, "uniform", dt)
            xq.copy_(ins.x), iq.copy_(ins.topk_idx), wq.copy_(ins.topk_weights)
            got = layer(xq, iq, wq)
            layer.inference_max_tokens = 0
            ref = layer(xq, iq, wq)
            layer.inference_max_tokens = max_t
            assert torch.equal(got, ref), f"rank {rank}: MoEMLP's buffered forward {i} != its plain forward"
    if DEVICE == "cuda":
        assert layer._buffer is not None and layer._buffer.captures >= 2, layer._buffer.captures


def kill(ctx) -> None:
    """Fault test: dispatch + combine in a loop while TEST_VICTIM SIGKILLs itself mid-call; the
    other ranks must raise an error naming the victim (printed as ERR), then the group refuses
    calls."""
    import threading
    import time

    print("PID", os.getpid(), flush=True)
    victim = int(os.environ["TEST_VICTIM"])
    if ctx.rank == victim:
        def die():
            time.sleep(float(os.environ.get("TEST_DIE_AFTER", "1.5")))
            os.kill(os.getpid(), 9)

        threading.Thread(target=die, daemon=True).start()
    e = 2 * ctx.world_size
    ins = make_inputs(3, ctx.rank, 64, 32, 2, e, "uniform", torch.float32)
    w1 = make_weights(3, e, 32, 32, torch.float32)[ctx.rank * 2:ctx.rank * 2 + 2]
    calls = 0
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        t0 = time.monotonic()
        try:
            res = mkernel.moe_dispatch_gemm(ins.x, ins.topk_idx, w1, num_experts=e, group=ctx)
            mkernel.moe_combine(res.out, res.handle, ins.topk_weights, group=ctx)
        except RuntimeError as err:
            print("ERR", json.dumps({"calls": calls, "s": time.monotonic() - t0, "msg": str(err)}),
                  flush=True)
            try:
                mkernel.moe_dispatch_gemm(ins.x, ins.topk_idx, w1, num_experts=e, group=ctx)
            except RuntimeError as err2:
                assert "unusable after an earlier failure" in str(err2), str(err2)
            else:
                raise AssertionError("a broken group accepted another call")
            os._exit(0)
        calls += 1
    raise AssertionError(f"rank {ctx.rank}: no failure after {calls} calls")


def main() -> None:
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    ctx = mkernel.init()
    for suite in os.environ.get("TEST_SUITE", "matrix").split(","):
        globals()[suite](ctx)
    ctx.barrier()
    mkernel.shutdown()
    dist.destroy_process_group()
    print("OK", ctx.rank, flush=True)
    sys.stdout.flush()
