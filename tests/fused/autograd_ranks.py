"""What each rank runs for tests/fused/test_fused_autograd.py (CPU, host reference kernels,
float32): the fused ops' and mkernel.nn layers' gradients against torch autograd of the unfused
model, which every rank builds from the same seed. Prints ``OK <rank>``; a mismatch raises.

``AUTOGRAD_SUITE``: ``ops`` (ag_gemm / gemm_rs / gemm_ar backward), ``mlp`` (column ->
GeLU -> row, sequence parallel on and off, gather_output / input_is_parallel=False) or
``compile`` (the sequence-parallel MLP under torch.compile(fullgraph=True), aot_eager).
"""

from __future__ import annotations

import os

import torch
import torch.distributed as dist
import torch.nn.functional as F

import mkernel
from mkernel.nn import ColumnParallelLinear, RowParallelLinear

TOL = 1e-4  # float32 GEMMs of a few dozen terms


def close(name: str, got: torch.Tensor, want: torch.Tensor) -> None:
    assert got is not None, f"{name}: no gradient"
    assert got.shape == want.shape, f"{name}: shape {tuple(got.shape)} != {tuple(want.shape)}"
    err = ((got.double() - want.double()).norm() / want.double().norm().clamp_min(1e-30)).item()
    assert err < TOL, f"{name}: relative error {err:.3g}"


def leaf(t: torch.Tensor) -> torch.Tensor:
    return t.detach().clone().requires_grad_(True)


def suite_ops(ctx, rank: int, world: int) -> None:
    g = torch.Generator().manual_seed(1234)
    rnd = lambda *s: torch.randn(*s, generator=g)  # noqa: E731

    # ag_gemm: out_r = X @ W_r.T, loss = sum_r <out_r, G_r> + <gathered_r, H_r>.
    m, k, n = 5, 16, 24
    xs, ws = [rnd(m, k) for _ in range(world)], [rnd(n, k) for _ in range(world)]
    gs, hs = [rnd(world * m, n) for _ in range(world)], [rnd(world * m, k) for _ in range(world)]
    X, Ws = leaf(torch.cat(xs)), [leaf(w) for w in ws]
    sum((X @ Ws[r].T * gs[r]).sum() + (X * hs[r]).sum() for r in range(world)).backward()
    for return_gathered in (False, True):
        x, w = leaf(xs[rank]), leaf(ws[rank])
        if return_gathered:
            out, gathered = mkernel.ag_gemm(x, w, group=ctx, return_gathered=True)
            ((out * gs[rank]).sum() + (gathered * hs[rank]).sum()).backward()
            close("ag_gemm dgrad (gathered used)", x.grad, X.grad[rank * m:(rank + 1) * m])
        else:
            out = mkernel.ag_gemm(x, w, group=ctx)
            (out * gs[rank]).sum().backward()
            want = (sum(gs[r] @ ws[r] for r in range(world)))[rank * m:(rank + 1) * m]
            close("ag_gemm dgrad", x.grad, want)
        close("ag_gemm wgrad", w.grad, Ws[rank].grad)

    # gemm_rs: out_r = (sum_s x_s @ w_s.T)[rows of r], loss = sum_r <out_r, G_r>.
    rows, k, n = 4 * world, 12, 20
    xs, ws = [rnd(rows, k) for _ in range(world)], [rnd(n, k) for _ in range(world)]
    gs = [rnd(rows // world, n) for _ in range(world)]
    Xs, Ws = [leaf(x) for x in xs], [leaf(w) for w in ws]
    total = sum(Xs[s] @ Ws[s].T for s in range(world))
    b = rows // world
    sum((total[r * b:(r + 1) * b] * gs[r]).sum() for r in range(world)).backward()
    x, w = leaf(xs[rank]), leaf(ws[rank])
    (mkernel.gemm_rs(x, w, group=ctx) * gs[rank]).sum().backward()
    close("gemm_rs dgrad", x.grad, Xs[rank].grad)
    close("gemm_rs wgrad", w.grad, Ws[rank].grad)

    # gemm_ar: out = sum_s x_s @ w_s.T on every rank, one loss <out, G>.
    rows, k, n = 7, 12, 20
    xs, ws, G = [rnd(rows, k) for _ in range(world)], [rnd(n, k) for _ in range(world)], rnd(rows, n)
    Xs, Ws = [leaf(x) for x in xs], [leaf(w) for w in ws]
    (sum(Xs[s] @ Ws[s].T for s in range(world)) * G).sum().backward()
    x, w = leaf(xs[rank]), leaf(ws[rank])
    (mkernel.gemm_ar(x, w, group=ctx) * G).sum().backward()
    close("gemm_ar dgrad", x.grad, Xs[rank].grad)
    close("gemm_ar wgrad", w.grad, Ws[rank].grad)


def suite_mlp(ctx, rank: int, world: int, compiled: bool = False) -> None:
    s, bsz, h, f = 4 * world, 3, 16, 8 * world
    fl = f // world
    variants = ((True, False),) if compiled else ((True, False), (False, False), (False, True))
    for sp, gather_output in variants:
        g = torch.Generator().manual_seed(99)
        rnd = lambda *sh: torch.randn(*sh, generator=g)  # noqa: E731
        W1, b1, W2, b2 = leaf(rnd(f, h) / 4), leaf(rnd(f)), leaf(rnd(h, f) / 4), leaf(rnd(h))
        X, G = leaf(rnd(s, bsz, h)), rnd(s, bsz, h)
        (((F.gelu(X @ W1.T + b1) @ W2.T + b2)) * G).sum().backward()

        col = ColumnParallelLinear(h, f, sequence_parallel=sp, gather_output=gather_output,
                                   group=ctx)
        row = RowParallelLinear(f, h, sequence_parallel=sp, input_is_parallel=not gather_output,
                                group=ctx)
        cols = slice(rank * fl, (rank + 1) * fl)
        with torch.no_grad():
            col.weight.copy_(W1[cols])
            col.bias.copy_(b1[cols])
            row.weight.copy_(W2[:, cols])
            row.bias.copy_(b2)
        seq = slice(rank * s // world, (rank + 1) * s // world)
        x = leaf(X[seq] if sp else X)

        def mlp(inp: torch.Tensor) -> torch.Tensor:
            hidden, _ = col(inp)
            return row(F.gelu(hidden))[0]

        if compiled:
            mlp = torch.compile(mlp, backend="aot_eager", fullgraph=True)
        y = mlp(x)
        want_y = (F.gelu(X @ W1.T + b1) @ W2.T + b2).detach()
        tag = f"mlp sp={sp} gather_output={gather_output}"
        close(f"{tag} output", y, want_y[seq] if sp else want_y)
        (y * (G[seq] if sp else G)).sum().backward()
        close(f"{tag} dX", x.grad, X.grad[seq] if sp else X.grad)
        close(f"{tag} dW1", col.weight.grad, W1.grad[cols])
        close(f"{tag} db1", col.bias.grad, b1.grad[cols])
        close(f"{tag} dW2", row.weight.grad, W2.grad[:, cols])
        db2 = row.bias.grad.clone()
        if sp:  # each rank's bias grad covers its tokens (bias.sequence_parallel): sum them
            dist.all_reduce(db2)
        close(f"{tag} db2", db2, b2.grad)


def main() -> None:
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    dist.init_process_group("gloo", rank=rank, world_size=world)
    ctx = mkernel.init()
    suites = {"ops": suite_ops, "mlp": suite_mlp,
              "compile": lambda c, r, w: suite_mlp(c, r, w, compiled=True)}
    suites[os.environ["AUTOGRAD_SUITE"]](ctx, rank, world)
    print(f"OK {rank}", flush=True)
    mkernel.shutdown()
    dist.destroy_process_group()


main()
