"""mkernel.moe_combine: y [E_local, capacity, H], handle [T, k] int64, topk_weights [T, k] fp32
-> out [T, H]."""

from __future__ import annotations

import pytest
import torch

from .helpers import (
    VALIDATION_MODES,
    assert_tensor,
    bad,
    call_in_mode,
    compile_and_run,
    fake_mode,
    group,
    opcheck_or_missing,
    requires_cuda,
    strided,
    t,
)
from .references import WORLD_ONE, check_moe_round_trip_world_one, moe_inputs, moe_reference, rel_err

# (E_local, capacity, H, T, k, W): ragged T, one token, no tokens, a world of one.
SHAPES = [
    (2, 20, 64, 37, 2, 4),
    (2, 1, 128, 1, 1, 8),
    (2, 77, 72, 129, 4, 3),
    (8, 100, 48, 100, 8, 1),
    (2, 8, 64, 0, 2, 2),
]


def op():
    return torch.ops.mkernel.moe_combine.default


def inputs(device, e_local, capacity, h, tokens, k, dtype=torch.bfloat16):
    return (
        t((e_local, capacity, h), device, dtype),
        t((tokens, k), device, torch.int64),
        t((tokens, k), device, torch.float32),
    )


@pytest.mark.parametrize("device", ["cpu", "cuda"])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("e_local, capacity, h, tokens, k, world", SHAPES)
def test_fake_shapes(device, dtype, e_local, capacity, h, tokens, k, world):
    with fake_mode():
        y, handle, weights = inputs(device, e_local, capacity, h, tokens, k, dtype)
        out = op()(y, handle, weights, 1, world, tokens)
    assert_tensor(out, (tokens, h), dtype, device)


@pytest.mark.parametrize("backend", ["eager", "aot_eager"])
def test_compile_dynamic(ops, backend):
    """num_tokens is a SymInt in the schema: a dynamic token count stays symbolic."""
    g = group(4)

    def fn(y, handle, weights):
        return (
            ops.moe_combine(y, handle, weights, group=g),
            ops.moe_combine(y, handle, weights, num_tokens=handle.shape[0], group=g),
        )

    cases = [inputs("meta", 2, 24, 64, n, 2) for n in (37, 100, 129)]
    outs, frames = compile_and_run(fn, cases, backend=backend, dynamic=True)
    assert frames == 1, "a ragged token count must not recompile under dynamic shapes"
    for (_, handle, _), (out, out_explicit) in zip(cases, outs, strict=True):
        assert_tensor(out, (handle.shape[0], 64), torch.bfloat16, "meta")
        assert_tensor(out_explicit, (handle.shape[0], 64), torch.bfloat16, "meta")


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


@pytest.mark.xfail(strict=True, raises=NotImplementedError,
                   reason="moe_dispatch_gemm + moe_combine CPU reference kernels not landed "
                          "(issue 14)")
def test_compile_world_one_round_trip(ops):
    """dispatch + combine compiled in one graph (fake kernels while tracing), then run by the CPU
    kernels at W = 1 against float64."""
    x, idx, w1, weights = moe_inputs("cpu", torch.float32)

    def fn(x, idx, w1, weights):
        res = ops.moe_dispatch_gemm(x, idx, w1, num_experts=4, capacity=x.shape[0] * 2, group=WORLD_ONE)
        return ops.moe_combine(res.out.contiguous(), res.handle, weights, group=WORLD_ONE)

    compiled = torch.compile(fn, fullgraph=True, backend="eager")
    torch._dynamo.reset()
    out = compiled(x, idx, w1, weights)
    assert rel_err(out, moe_reference(x, idx, w1, weights)) < 1e-5


@pytest.mark.xfail(strict=True, raises=NotImplementedError,
                   reason="moe_dispatch_gemm + moe_combine CPU reference kernels not landed "
                          "(issue 14)")
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
def test_cpu_world_one_round_trip(ops, dtype):
    check_moe_round_trip_world_one(ops, "cpu", dtype)


@pytest.mark.xfail(strict=True, raises=NotImplementedError,
                   reason="moe_dispatch_gemm + moe_combine CPU reference kernels not landed "
                          "(issue 14)")
def test_opcheck_cpu_world_one():
    """opcheck on real CPU tensors (on meta tensors it checks nothing: test_opcheck_real.py)."""
    x, idx, w1, weights = moe_inputs("cpu", torch.float32)
    res = torch.ops.mkernel.moe_dispatch_gemm.default(x, idx, w1, 0, 1, 4, x.shape[0] * 2)
    opcheck_or_missing(op(), (res[0].contiguous(), res[2], weights, 0, 1, x.shape[0]))


@requires_cuda
@pytest.mark.xfail(strict=True, raises=NotImplementedError,
                   reason="moe_dispatch_gemm + moe_combine CUDA kernels not landed (issue 14)")
def test_cuda_world_one_round_trip(ops):
    check_moe_round_trip_world_one(ops, "cuda", torch.bfloat16)


def _args(
    d,
    *,
    y=(2, 8, 16),
    handle=(6, 2),
    weights=(6, 2),
    dtype=torch.bfloat16,
    handle_dtype=torch.int64,
    weights_dtype=torch.float32,
    group=1,
    world=2,
    tokens=6,
    y_fn=t,
    handle_fn=t,
    weights_fn=t,
):
    return (
        y_fn(y, d, dtype),
        handle_fn(handle, d, handle_dtype),
        weights_fn(weights, d, weights_dtype),
        group,
        world,
        tokens,
    )


OP = r"mkernel\.moe_combine"
BAD_INPUTS = [
    bad("world_size", ValueError, rf"{OP}: world_size must be >= 1, got 0", world=0),
    bad(
        "group", ValueError, rf"{OP}: group must be an mkernel group handle >= 0 .*got -1", group=-1
    ),
    bad(
        "y_dim",
        RuntimeError,
        rf"{OP}: y must be a 3-D tensor \[E_local, capacity, H\], got 2-D \[8, 16\]",
        y=(8, 16),
    ),
    bad(
        "handle_dim",
        RuntimeError,
        rf"{OP}: handle must be a 2-D tensor \[T, k\], got 3-D \[6, 2, 1\]",
        handle=(6, 2, 1),
    ),
    bad(
        "topk_weights_dim",
        RuntimeError,
        rf"{OP}: topk_weights must be a 2-D tensor \[T, k\], got 1-D \[12\]",
        weights=(12,),
    ),
    bad("y_dtype", RuntimeError, rf"{OP}: y must be bf16 or fp16 .*got int32", dtype=torch.int32),
    bad(
        "handle_dtype",
        RuntimeError,
        rf"{OP}: handle must be int64 \(the handle moe_dispatch_gemm returned\), got int32",
        handle_dtype=torch.int32,
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
        rf"{OP}: num_tokens must equal the token count T of handle \[T, k\] "
        rf"\(num_tokens: 5, handle: \[6, 2\]\)",
        tokens=5,
    ),
    bad(
        "topk_weights_shape",
        RuntimeError,
        rf"{OP}: topk_weights must have the shape of handle \[T, k\] "
        rf"\(handle: \[6, 2\], topk_weights: \[6, 3\]\)",
        weights=(6, 3),
    ),
    bad("y_strided", RuntimeError, rf"{OP}: y must be row-major contiguous", y_fn=strided),
    bad(
        "handle_strided",
        RuntimeError,
        rf"{OP}: handle must be row-major contiguous",
        handle_fn=strided,
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
    with pytest.raises(exc, match=match):
        call_in_mode(mode, op(), lambda d: _args(d, **overrides))


@pytest.mark.parametrize("arg", ["handle", "topk_weights"])
def test_bad_device(arg):
    y, handle, weights, *rest = _args("cpu")
    if arg == "handle":
        handle = handle.to("meta")
    else:
        weights = weights.to("meta")
    with pytest.raises(
        RuntimeError, match=rf"{OP}: {arg} must be on the device of y \(y: cpu, {arg}: meta\)"
    ):
        op()(y, handle, weights, *rest)


def test_fake_cuda_rejects_fp32():
    with (
        fake_mode(),
        pytest.raises(RuntimeError, match=rf"{OP}: y must be bf16 or fp16 on CUDA, got fp32"),
    ):
        op()(*_args("cuda", dtype=torch.float32))
