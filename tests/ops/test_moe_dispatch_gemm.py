"""mkernel.moe_dispatch_gemm: x [T, H], topk_idx [T, k], w1 [E_local, F, H]
-> (out [E_local, capacity, F], counts [E_local] int32, handle [T, k] int64)."""

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

# (T, H, k, F, num_experts, capacity, W): ragged T, one token, no tokens, a world of one.
SHAPES = [
    (37, 64, 2, 96, 8, 20, 4),
    (1, 128, 1, 256, 16, 1, 8),
    (129, 72, 4, 130, 6, 77, 3),
    (100, 48, 8, 200, 8, 100, 1),
    (0, 64, 2, 32, 4, 8, 2),
]


def op():
    return torch.ops.mkernel.moe_dispatch_gemm.default


def inputs(
    device, tokens, h, k, f, num_experts, world, dtype=torch.bfloat16, idx_dtype=torch.int64
):
    return (
        t((tokens, h), device, dtype),
        t((tokens, k), device, idx_dtype),
        t((num_experts // world, f, h), device, dtype),
    )


@pytest.mark.parametrize("device", ["cpu", "cuda"])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("idx_dtype", [torch.int64, torch.int32])
@pytest.mark.parametrize("tokens, h, k, f, num_experts, capacity, world", SHAPES)
def test_fake_shapes(device, dtype, idx_dtype, tokens, h, k, f, num_experts, capacity, world):
    with fake_mode():
        x, idx, w1 = inputs(device, tokens, h, k, f, num_experts, world, dtype, idx_dtype)
        out, counts, handle = op()(x, idx, w1, 1, world, num_experts, capacity)
    e_local = num_experts // world
    assert_tensor(out, (e_local, capacity, f), dtype, device)
    assert_tensor(counts, (e_local,), torch.int32, device)
    assert_tensor(handle, (tokens, k), torch.int64, device)


@pytest.mark.parametrize("backend", ["eager", "aot_eager"])
def test_compile_dynamic(ops, backend):
    g = group(4)

    def fn(x, idx, w1):
        res = ops.moe_dispatch_gemm(x, idx, w1, num_experts=8, capacity=24, group=g)
        return res.out, res.counts, res.handle

    cases = [inputs("meta", n, 64, 2, 96, 8, 4) for n in (37, 100, 129)]
    outs, frames = compile_and_run(fn, cases, backend=backend, dynamic=True)
    assert frames == 1, "a ragged token count must not recompile under dynamic shapes"
    for (x, _, _), (out, counts, handle) in zip(cases, outs, strict=True):
        assert_tensor(out, (2, 24, 96), torch.bfloat16, "meta")
        assert_tensor(counts, (2,), torch.int32, "meta")
        assert_tensor(handle, (x.shape[0], 2), torch.int64, "meta")


def test_wrapper_returns_named_tuple(ops):
    res = ops.moe_dispatch_gemm(
        *inputs("meta", 5, 16, 2, 8, 4, 2), num_experts=4, capacity=3, group=group(2)
    )
    assert isinstance(res, ops.MoeDispatchOutput)
    out, counts, handle = res
    assert res.out is out and res.counts is counts and res.handle is handle
    assert_tensor(out, (2, 3, 8), torch.bfloat16, "meta")


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
    x, idx, w1, _ = moe_inputs("cpu", torch.float32)
    opcheck_or_missing(op(), (x, idx, w1, 0, 1, 4, x.shape[0] * 2))


@requires_cuda
@pytest.mark.xfail(strict=True, raises=NotImplementedError,
                   reason="moe_dispatch_gemm + moe_combine CUDA kernels not landed (issue 14)")
def test_cuda_world_one_round_trip(ops):
    check_moe_round_trip_world_one(ops, "cuda", torch.bfloat16)


def _args(
    d,
    *,
    x=(6, 16),
    idx=(6, 2),
    w1=(2, 8, 16),
    dtype=torch.bfloat16,
    idx_dtype=torch.int64,
    w1_dtype=None,
    group=1,
    world=2,
    experts=4,
    capacity=8,
    x_fn=t,
    idx_fn=t,
    w1_fn=t,
):
    return (
        x_fn(x, d, dtype),
        idx_fn(idx, d, idx_dtype),
        w1_fn(w1, d, w1_dtype or dtype),
        group,
        world,
        experts,
        capacity,
    )


OP = r"mkernel\.moe_dispatch_gemm"
BAD_INPUTS = [
    bad("world_size", ValueError, rf"{OP}: world_size must be >= 1, got 0", world=0),
    bad(
        "group", ValueError, rf"{OP}: group must be an mkernel group handle >= 0 .*got -3", group=-3
    ),
    bad("num_experts", ValueError, rf"{OP}: num_experts must be >= 1, got 0", experts=0),
    bad(
        "num_experts_divisible",
        ValueError,
        rf"{OP}: num_experts must be divisible by world_size .*got num_experts 5 and world_size 2",
        experts=5,
    ),
    bad(
        "capacity",
        ValueError,
        rf"{OP}: capacity \(token slots per local expert\) must be >= 1, got 0",
        capacity=0,
    ),
    bad(
        "x_dim",
        RuntimeError,
        rf"{OP}: x must be a 2-D tensor \[T, H\], got 3-D \[6, 16, 1\]",
        x=(6, 16, 1),
    ),
    bad(
        "topk_idx_dim",
        RuntimeError,
        rf"{OP}: topk_idx must be a 2-D tensor \[T, k\], got 1-D \[6\]",
        idx=(6,),
    ),
    bad(
        "w1_dim",
        RuntimeError,
        rf"{OP}: w1 must be a 3-D tensor \[E_local, F, H\], got 2-D \[8, 16\]",
        w1=(8, 16),
    ),
    bad("x_dtype", RuntimeError, rf"{OP}: x must be bf16 or fp16 .*got int64", dtype=torch.int64),
    bad(
        "topk_idx_dtype",
        RuntimeError,
        rf"{OP}: topk_idx must be int64 or int32 \(expert ids\), got fp32",
        idx_dtype=torch.float32,
    ),
    bad(
        "w1_dtype",
        RuntimeError,
        rf"{OP}: w1 must have the dtype of x \(x: bf16, w1: fp16\)",
        w1_dtype=torch.float16,
    ),
    bad(
        "topk_idx_tokens",
        RuntimeError,
        rf"{OP}: topk_idx must have one row per token of x \(x: \[6, 16\], topk_idx: \[5, 2\]\)",
        idx=(5, 2),
    ),
    bad(
        "topk_idx_k0",
        RuntimeError,
        rf"{OP}: topk_idx must choose k >= 1 experts per token",
        idx=(6, 0),
    ),
    bad(
        "topk_idx_k_too_big",
        RuntimeError,
        rf"{OP}: topk_idx must choose k <= num_experts experts per token "
        rf"\(num_experts 4, topk_idx: \[6, 5\]\)",
        idx=(6, 5),
    ),
    bad(
        "w1_experts",
        RuntimeError,
        rf"{OP}: w1 must hold E_local = num_experts / world_size = 2 experts in dim 0 "
        rf".*w1: \[3, 8, 16\]",
        w1=(3, 8, 16),
    ),
    bad(
        "w1_hidden",
        RuntimeError,
        rf"{OP}: w1 must have the same H as x \(x: \[6, 16\], w1: \[2, 8, 32\]\)",
        w1=(2, 8, 32),
    ),
    bad("x_strided", RuntimeError, rf"{OP}: x must be row-major contiguous", x_fn=strided),
    bad(
        "topk_idx_strided",
        RuntimeError,
        rf"{OP}: topk_idx must be row-major contiguous",
        idx_fn=strided,
    ),
    bad("w1_strided", RuntimeError, rf"{OP}: w1 must be row-major contiguous", w1_fn=strided),
]


@pytest.mark.parametrize("mode", VALIDATION_MODES)
@pytest.mark.parametrize("overrides, exc, match", BAD_INPUTS)
def test_bad_input(mode, overrides, exc, match):
    with pytest.raises(exc, match=match):
        call_in_mode(mode, op(), lambda d: _args(d, **overrides))


@pytest.mark.parametrize("arg", ["topk_idx", "w1"])
def test_bad_device(arg):
    def make(d):
        x, idx, w1, *rest = _args("cpu")
        if arg == "topk_idx":
            idx = idx.to("meta")
        else:
            w1 = w1.to("meta")
        return (x, idx, w1, *rest)

    with pytest.raises(
        RuntimeError, match=rf"{OP}: {arg} must be on the device of x \(x: cpu, {arg}: meta\)"
    ):
        op()(*make("cpu"))


def test_fake_cuda_rejects_fp32():
    with (
        fake_mode(),
        pytest.raises(RuntimeError, match=rf"{OP}: x must be bf16 or fp16 on CUDA, got fp32"),
    ):
        op()(*_args("cuda", dtype=torch.float32))
