"""What each rank process of tests/host/test_host_collectives.py runs: all_gather, reduce_scatter
and all_reduce through the host reference backend (csrc/collectives_host.cpp) against torch
references built from every rank's inputs.

Inputs are fresh random tensors seeded by (call, rank), so every rank regenerates the others'.
Checks per call: the shape and dtype; all_gather equal to torch.cat of the inputs; the sums by
relative error against a float64 reference AND bit-equal to the spec (fp32 additions in rank
order 0..W-1, rounded once); all_reduce identical on every rank (digests over gloo). Prints
``CASE {json}`` per call and ``OK <rank>`` at the end; a failed check raises (exit status 1).
``TEST_SUITE`` (comma-separated): matrix, back_to_back, grow, mismatch, bad_input, subgroup.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys

import torch
import torch.distributed as dist

import mkernel

BOUNDS = {torch.float32: 1e-6, torch.bfloat16: 1e-2, torch.float16: 1e-3}
DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}
OPS = ("all_gather", "reduce_scatter", "all_reduce")


def rel_err(out: torch.Tensor, ref: torch.Tensor) -> float:
    ref = ref.double()
    diff = (out.double() - ref).norm().item()
    norm = ref.norm().item()
    return diff / norm if norm > 0 else diff


def make(seed: int, rank: int, shape: tuple[int, ...], dtype) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed * 7919 + rank)
    return torch.randn(shape, generator=g, dtype=torch.float64).to(dtype)


def digest(t: torch.Tensor) -> str:
    return hashlib.sha1(t.contiguous().view(torch.uint8).numpy().tobytes()).hexdigest()


class Checker:
    def __init__(self, ctx, tag: str = ""):
        self.ctx, self.rank, self.world, self.tag = ctx, ctx.rank, ctx.world_size, tag
        self.calls = 0

    def call(self, op: str, x: torch.Tensor) -> torch.Tensor:
        return getattr(torch.ops.mkernel, op)(x, self.ctx.handle, self.world)

    def run(self, op: str, dtype: str, shape: tuple[int, ...], seed: int | None = None) -> dict:
        dt = DTYPES[dtype]
        self.calls += 1
        seed = self.calls if seed is None else seed
        world, rank = self.world, self.rank
        ins = [make(seed, r, shape, dt) for r in range(world)]
        x = ins[rank]
        before = x.clone()
        out = self.call(op, x)
        case = f"rank {rank}/{world}{' ' + self.tag if self.tag else ''}: {op} {dtype} {shape} (call {self.calls})"
        assert torch.equal(x, before), f"{case}: the input was modified"
        if op == "all_gather":
            ref64 = torch.cat(ins).double()
            spec = torch.cat(ins)
        else:
            ref64 = sum(t.double() for t in ins)
            acc = ins[0].float().clone()
            for t in ins[1:]:
                acc += t.float()  # fp32 additions in rank order
            spec = acc.to(dt)
            if op == "reduce_scatter":
                b = shape[0] // world
                ref64, spec = ref64[rank * b:(rank + 1) * b], spec[rank * b:(rank + 1) * b]
        assert out.dtype == dt and out.shape == spec.shape, f"{case}: got {tuple(out.shape)} {out.dtype}"
        assert out.data_ptr() != x.data_ptr() or x.numel() == 0, f"{case}: the output aliases x"
        err = rel_err(out, ref64)
        bits = torch.equal(out, spec)
        print("CASE " + json.dumps({"group": self.tag, "op": op, "dtype": dtype, "shape": list(shape),
                                    "err": err, "bound": BOUNDS[dt], "bits": bits}), flush=True)
        assert err <= BOUNDS[dt], f"{case}: relative error {err:.3g} > {BOUNDS[dt]}"
        assert bits, f"{case}: not the rank-order fp32 sum (max diff {(out.double() - spec.double()).abs().max()})"
        if op == "all_reduce":
            digests = [None] * world
            dist.all_gather_object(digests, digest(out), group=getattr(self.ctx, "pg", None))
            assert len(set(digests)) == 1, f"{case}: ranks hold different bits: {digests}"
        return {"err": err}


def matrix(c: Checker) -> None:
    """Every op and dtype, ragged shapes (fewer elements than ranks, 1-D, 3-D, empty)."""
    w = c.world
    for dtype in ("fp32", "bf16", "fp16"):
        c.run("all_gather", dtype, (7, 5, 3))
        c.run("reduce_scatter", dtype, (3 * w, 17))
        c.run("all_reduce", dtype, (13, 9))
    c.run("all_gather", "fp32", (1,))
    c.run("all_gather", "bf16", (0, 4))  # empty everywhere
    c.run("reduce_scatter", "bf16", (w, 1))
    c.run("reduce_scatter", "fp32", (2 * w, 3, 2))
    c.run("all_reduce", "fp32", (max(1, w - 1),))  # fewer elements than ranks: empty blocks
    c.run("all_reduce", "fp16", (2, 3, 4))
    c.run("all_reduce", "fp32", (0, 3))


def back_to_back(c: Checker) -> None:
    """Calls in a row without a barrier, mixed with the host GEMM ops; reproducible bits."""
    for i in range(6):
        c.run(OPS[i % 3], "bf16", (2 * c.world + (i % 3 != 1), 11))
    x = make(4242, c.rank, (4 * c.world, 33), torch.float32)
    w = make(4243, c.rank, (5, 33), torch.float32)
    mkernel.gemm_ar(x, w, group=c.ctx)
    a = c.call("reduce_scatter", x)
    mkernel.ag_gemm(x, w, group=c.ctx)
    b = c.call("reduce_scatter", x)
    assert torch.equal(a, b), f"rank {c.rank}: reduce_scatter is not reproducible"
    assert torch.equal(c.call("all_reduce", x), c.call("all_reduce", x)), "all_reduce not reproducible"


def grow(c: Checker) -> None:
    """Calls larger than the data paths' first buffers (64 KiB) regrow them on every rank."""
    before = json.loads(torch.ops.mkernel._group_info(c.ctx.handle))
    c.run("all_gather", "fp32", (100, 130))  # 52 KB per rank, W x that to receive
    c.run("all_reduce", "fp32", (257, 301))  # 309 KB
    c.run("reduce_scatter", "bf16", (64 * c.world, 129))
    after = json.loads(torch.ops.mkernel._group_info(c.ctx.handle))
    assert after["opens"] > before["opens"], (before["opens"], after["opens"])


def mismatch(c: Checker) -> None:
    """Ranks that disagree on the shape or dtype all get an error naming a peer; the group stays
    usable."""
    last = c.world - 1
    x = make(77, c.rank, (5 + (c.rank == last), 4), torch.float32)
    try:
        c.call("all_reduce", x)
    except RuntimeError as e:
        msg = str(e)
        assert "mkernel.all_reduce" in msg and "x's first dimension must be the same on every rank" in msg, msg
        assert f"rank {last}" in msg or c.rank == last, msg
    else:
        raise AssertionError(f"rank {c.rank}: mismatched shapes were accepted")
    x = make(78, c.rank, (2 * c.world, 3), torch.float32 if c.rank else torch.bfloat16)
    try:
        c.call("reduce_scatter", x)
    except RuntimeError as e:
        assert "every rank must use the same dtype" in str(e), str(e)
    else:
        raise AssertionError(f"rank {c.rank}: mismatched dtypes were accepted")
    x = make(79, c.rank, (4, 2, 3 + (c.rank == last)), torch.float32)
    try:
        c.call("all_gather", x)
    except RuntimeError as e:
        assert "must be the same on every rank" in str(e), str(e)
    else:
        raise AssertionError(f"rank {c.rank}: mismatched trailing sizes were accepted")
    c.run("all_reduce", "fp32", (7, 3))  # still works


def bad_input(c: Checker) -> None:
    """Caller mistakes raise on every rank before any data moves (the group stays usable)."""
    cases = [
        ("all_reduce", torch.tensor(1.0), "at least one dimension"),
        ("all_gather", torch.ones(4, dtype=torch.int32), "x must be"),
        ("all_reduce", torch.ones(4, 6)[:, ::2], "contiguous"),
        ("reduce_scatter", torch.ones(c.world + 1, 2), "divisible by world_size"),
    ]
    for op, x, text in cases:
        try:
            c.call(op, x)
        except (ValueError, RuntimeError) as e:
            assert text in str(e) and f"mkernel.{op}" in str(e), str(e)
        else:
            raise AssertionError(f"{op} accepted {x.shape} {x.dtype}")
    try:
        torch.ops.mkernel.all_reduce(torch.ones(3), c.ctx.handle, c.world + 1)
    except (ValueError, RuntimeError) as e:
        assert "world_size" in str(e), str(e)
    else:
        raise AssertionError("a wrong world_size was accepted")
    c.run("reduce_scatter", "fp32", (c.world, 2))


def subgroup(c: Checker) -> None:
    """The odd ranks as a group of their own (its first rank is not rank 0, and with emulated
    nodes its ranks span several nodes), interleaved with the full group."""
    odd = [r for r in range(c.world) if r % 2 == 1]
    pg = dist.new_group(odd)
    sub = Checker(mkernel.init(pg), "odd") if c.rank in odd else None
    for _ in range(2):
        if sub is not None:
            assert sub.world == len(odd) and sub.rank == odd.index(c.rank)
            for op in OPS:
                sub.run(op, "fp32", (2 * sub.world, 5))
        c.run("all_reduce", "bf16", (9, 4))
    if sub is not None:
        sub.ctx.close()


def main() -> None:
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    ctx = mkernel.init()
    c = Checker(ctx)
    for suite in os.environ.get("TEST_SUITE", "matrix").split(","):
        globals()[suite](c)
    ctx.barrier()
    mkernel.shutdown()
    dist.destroy_process_group()
    print("OK", c.rank, c.calls, flush=True)
    sys.stdout.flush()
