"""mkernel.moe_combine: y [E_local, capacity, H], handle [T, k] int64, topk_weights [T, k] fp32
-> out [T, H]."""

from __future__ import annotations

import pytest
import torch

from tests.moe_reference import rel_err

from .helpers import (
    OPCHECK_UTILS,
    VALIDATION_MODES,
    assert_bad_input_raises,
    assert_fake_cuda_rejects_fp32,
    assert_rejects_input_on_other_device,
    assert_tensor,
    bad,
    bad_world_size_and_group,
    compile_and_run,
    fake_mode,
    group,
    strided,
    t,
)

# (R or None, E_local, capacity, H, T, k, W): padded (capacity > 0) or packed (R rows) y; ragged
# T, one token, no tokens, a world of one.
SHAPES = [
    (None, 2, 20, 64, 37, 2, 4),
    (None, 2, 1, 128, 1, 1, 8),
    (300, 2, 0, 72, 129, 4, 3),
    (800, 8, 0, 48, 100, 8, 1),
    (0, 2, 0, 64, 0, 2, 2),
]


def op():
    return torch.ops.mkernel.moe_combine.default


def inputs(device, rows, e_local, capacity, h, tokens, k, world, dtype=torch.bfloat16):
    y_shape = (e_local, capacity, h) if capacity else (rows, h)
    return (
        t(y_shape, device, dtype),
        t((tokens, k), device, torch.int64),
        t((world, e_local), device, torch.int32),
        t((tokens, k), device, torch.float32),
    )


@pytest.mark.parametrize("device", ["cpu", "cuda"])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("rows, e_local, capacity, h, tokens, k, world", SHAPES)
def test_fake_shapes(device, dtype, rows, e_local, capacity, h, tokens, k, world):
    with fake_mode():
        y, route, recv_counts, weights = inputs(device, rows, e_local, capacity, h, tokens, k, world, dtype)
        out = op()(y, route, recv_counts, weights, 1, world, tokens)
        gathered = torch.ops.mkernel._moe_gather(y, route, recv_counts, 1, world)
        rows3 = torch.empty(tokens, k, h, dtype=dtype, device=device)
        scattered = torch.ops.mkernel._moe_scatter(rows3, route, recv_counts, 1, world, capacity,
                                                   rows or 0)
    assert_tensor(out, (tokens, h), dtype, device)
    assert_tensor(gathered, (tokens, k, h), dtype, device)
    assert_tensor(scattered, y.shape, dtype, device)


@pytest.mark.parametrize("rows, e_local, capacity, h, tokens, k, world", SHAPES)
def test_opcheck(rows, e_local, capacity, h, tokens, k, world):
    args = (*inputs("meta", rows, e_local, capacity, h, tokens, k, world), 1, world, tokens)
    torch.library.opcheck(op(), args, test_utils=OPCHECK_UTILS)


@pytest.mark.parametrize("backend", ["eager", "aot_eager"])
def test_compile_dynamic(ops, backend):
    """num_tokens is a SymInt in the schema: a dynamic token count stays symbolic."""
    g = group(4)

    def fn(y, route, recv_counts, weights):
        handle = ops.MoeHandle(route, recv_counts)
        return (
            ops.moe_combine(y, handle, weights, group=g),
            ops.moe_combine(y, handle, weights, num_tokens=route.shape[0], group=g),
        )

    cases = [inputs("meta", None, 2, 24, 64, n, 2, 4) for n in (37, 100, 129)]
    outs, frames = compile_and_run(fn, cases, backend=backend, dynamic=True)
    assert frames == 1, "a ragged token count must not recompile under dynamic shapes"
    for (_, route, _, _), (out, out_explicit) in zip(cases, outs, strict=True):
        assert_tensor(out, (route.shape[0], 64), torch.bfloat16, "meta")
        assert_tensor(out_explicit, (route.shape[0], 64), torch.bfloat16, "meta")


def test_dispatch_then_combine_traces(ops):
    """The handle of moe_dispatch_gemm feeds moe_combine inside one graph."""
    g = group(2)

    def fn(x, idx, w1, weights):
        dispatched = ops.moe_dispatch_gemm(x, idx, w1, num_experts=4, capacity=16, group=g)
        y = dispatched.out[..., : x.shape[1]]  # stands in for the expert's second GEMM
        return ops.moe_combine(y.contiguous(), dispatched.handle, weights, group=g)

    x, idx, w1 = t((13, 32), "meta"), t((13, 2), "meta", torch.int64), t((2, 64, 32), "meta")
    weights = t((13, 2), "meta", torch.float32)
    (out,), frames = compile_and_run(
        fn, [(x, idx, w1, weights)], backend="aot_eager", dynamic=False
    )
    assert frames == 1
    assert_tensor(out, (13, 32), torch.bfloat16, "meta")


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
@pytest.mark.parametrize("capacity", [0, 3])
def test_world_one_cpu_values(ops, dtype, capacity):
    """combine = the fp32 weighted sum of each token's rows; gather/scatter move rows by route."""
    from tests.moe_reference import layouts, make_inputs

    e, h, tokens, k = 4, 16, 21, 2
    ins = make_inputs(7, 0, tokens, h, k, e, "uniform", dtype)
    routes, (lay,) = layouts([ins.topk_idx], e, capacity)
    y = torch.randn(lay.rows, h, dtype=torch.float64).to(dtype)
    y_op = y.view(e, capacity, h) if capacity else y
    handle = ops.MoeHandle(routes[0], lay.recv_counts)
    out = ops.moe_combine(y_op, handle, ins.topk_weights, group=group(1))
    ref = torch.zeros(tokens, h, dtype=torch.float64)
    for tt in range(tokens):
        for j in range(k):
            code = int(routes[0][tt, j])
            if code >= 0:
                ref[tt] += float(ins.topk_weights[tt, j]) * y[code & 0xFFFFFFFF].double()
    assert rel_err(out, ref) <= (1e-6 if dtype == torch.float32 else 1e-2)
    gathered = torch.ops.mkernel._moe_gather(y_op, routes[0], lay.recv_counts, 1, 1)
    back = torch.ops.mkernel._moe_scatter(gathered, routes[0], lay.recv_counts, 1, 1, capacity,
                                          0 if capacity else lay.rows)
    valid = torch.tensor([o is not None for o in lay.origin], dtype=torch.bool)
    assert torch.equal(back.reshape(-1, h)[valid], y[valid])
    assert not back.reshape(-1, h)[~valid].any()


def _args(
    d,
    *,
    y=(2, 8, 16),
    route=(6, 2),
    counts=(2, 2),
    weights=(6, 2),
    dtype=torch.bfloat16,
    route_dtype=torch.int64,
    counts_dtype=torch.int32,
    weights_dtype=torch.float32,
    group=1,
    world=2,
    tokens=6,
    y_fn=t,
    route_fn=t,
    weights_fn=t,
):
    return (
        y_fn(y, d, dtype),
        route_fn(route, d, route_dtype),
        t(counts, d, counts_dtype),
        weights_fn(weights, d, weights_dtype),
        group,
        world,
        tokens,
    )


OP = r"mkernel\.moe_combine"
BAD_INPUTS = [
    *bad_world_size_and_group(OP),
    bad(
        "y_dim",
        RuntimeError,
        rf"{OP}: y must be a 2-D tensor \[R, H\] \(packed\) or a 3-D tensor "
        rf"\[E_local, capacity, H\], got 1-D \[16\]",
        y=(16,),
    ),
    bad(
        "y_experts",
        RuntimeError,
        rf"{OP}: y \[E_local, capacity, H\] must hold recv_counts' E_local experts "
        rf"\(y: \[3, 8, 16\], recv_counts: \[2, 2\]\)",
        y=(3, 8, 16),
    ),
    bad(
        "route_dim",
        RuntimeError,
        rf"{OP}: route must be a 2-D tensor \[T, k\], got 3-D \[6, 2, 1\]",
        route=(6, 2, 1),
    ),
    bad(
        "recv_counts_world",
        RuntimeError,
        rf"{OP}: recv_counts must have world_size = 2 rows \(recv_counts: \[3, 2\]\)",
        counts=(3, 2),
    ),
    bad(
        "recv_counts_dtype",
        RuntimeError,
        rf"{OP}: recv_counts must be int32 \(the recv_counts moe_dispatch_gemm returned\), "
        rf"got int64",
        counts_dtype=torch.int64,
    ),
    bad(
        "topk_weights_dim",
        RuntimeError,
        rf"{OP}: topk_weights must be a 2-D tensor \[T, k\], got 1-D \[12\]",
        weights=(12,),
    ),
    bad("y_dtype", RuntimeError, rf"{OP}: y must be bf16 or fp16 .*got int32", dtype=torch.int32),
    bad(
        "route_dtype",
        RuntimeError,
        rf"{OP}: route must be int64 \(the route moe_dispatch_gemm returned\), got int32",
        route_dtype=torch.int32,
    ),
    bad(
        "topk_weights_dtype",
        RuntimeError,
        rf"{OP}: topk_weights must be fp32 \(routing weights\), got bf16",
        weights_dtype=torch.bfloat16,
    ),
    bad(
        "num_tokens",
        RuntimeError,
        rf"{OP}: num_tokens must equal the token count T of route \[T, k\] "
        rf"\(num_tokens: 5, route: \[6, 2\]\)",
        tokens=5,
    ),
    bad(
        "topk_weights_shape",
        RuntimeError,
        rf"{OP}: topk_weights must have the shape of route \[T, k\] "
        rf"\(route: \[6, 2\], topk_weights: \[6, 3\]\)",
        weights=(6, 3),
    ),
    bad("y_strided", RuntimeError, rf"{OP}: y must be row-major contiguous", y_fn=strided),
    bad(
        "route_strided",
        RuntimeError,
        rf"{OP}: route must be row-major contiguous",
        route_fn=strided,
    ),
    bad(
        "topk_weights_strided",
        RuntimeError,
        rf"{OP}: topk_weights must be row-major contiguous",
        weights_fn=strided,
    ),
]


@pytest.mark.parametrize("mode", VALIDATION_MODES)
@pytest.mark.parametrize("overrides, exc, match", BAD_INPUTS)
def test_bad_input(mode, overrides, exc, match):
    assert_bad_input_raises(mode, op(), lambda d: _args(d, **overrides), exc, match)


@pytest.mark.parametrize("arg", ["route", "topk_weights"])
def test_bad_device(arg):
    assert_rejects_input_on_other_device(
        op(), _args("cpu"), ("y", "route", "recv_counts", "topk_weights"), arg, OP
    )


def test_fake_cuda_rejects_fp32():
    assert_fake_cuda_rejects_fp32(
        op(),
        lambda: _args("cuda", dtype=torch.float32),
        rf"{OP}: y must be bf16 or fp16 on CUDA, got fp32",
    )
