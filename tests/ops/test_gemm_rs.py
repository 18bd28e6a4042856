"""mkernel.gemm_rs: x [M, k], w [N, k] -> reduce_scatter(x @ w.T) [M/W, N]."""

from __future__ import annotations

import pytest
import torch

from .helpers import (
    NO_SESSION,
    VALIDATION_MODES,
    assert_bad_input_raises,
    assert_compiled_linear_needs_open_group,
    assert_fake_cuda_rejects_fp32,
    assert_linear_compiles_once,
    assert_linear_needs_open_group,
    assert_tensor,
    fake_mode,
    group,
    linear_bad_inputs,
    requires_cuda,
    t,
)

# (M, k, N, W): M a multiple of W but of no tile size; world of one; no rows at all.
SHAPES = [(36, 64, 96, 4), (8, 128, 256, 8), (129, 72, 130, 3), (100, 48, 200, 1), (0, 64, 32, 2)]


def op():
    return torch.ops.mkernel.gemm_rs.default


@pytest.mark.parametrize("device", ["cpu", "cuda"])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("m, k, n, world", SHAPES)
def test_fake_shapes(device, dtype, m, k, n, world):
    with fake_mode():
        out = op()(t((m, k), device, dtype), t((n, k), device, dtype), 1, world)
    assert_tensor(out, (m // world, n), dtype, device)


@pytest.mark.parametrize("backend", ["eager", "aot_eager"])
def test_compile_dynamic(ops, backend):
    assert_linear_compiles_once(ops.gemm_rs, (36, 100, 132), lambda m: m // 4, backend)


def test_compile_dynamic_rejects_indivisible_m(ops):
    """M % W == 0 is guarded, so an indivisible M retraces and gets the op's error."""
    g = group(4)
    compiled = torch.compile(
        lambda x, w: ops.gemm_rs(x, w, group=g), fullgraph=True, backend="eager", dynamic=True
    )
    torch._dynamo.reset()
    assert compiled(t((36, 64), "meta"), t((96, 64), "meta")).shape == (9, 96)
    with pytest.raises(RuntimeError, match=r"M must be divisible by world_size"):
        compiled(t((37, 64), "meta"), t((96, 64), "meta"))


def test_compile_traces_then_cpu_kernel_raises(ops):
    assert_compiled_linear_needs_open_group("gemm_rs", ops.gemm_rs)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
def test_cpu_needs_an_open_group(ops, dtype):
    assert_linear_needs_open_group(
        "gemm_rs", ops.gemm_rs, "cpu", dtype, raw_call=lambda x, w: op()(x, w, NO_SESSION, 2)
    )


@requires_cuda
def test_cuda_needs_an_open_group(ops):
    assert_linear_needs_open_group("gemm_rs", ops.gemm_rs, "cuda", torch.bfloat16)


BAD_INPUTS = linear_bad_inputs("gemm_rs", "[M, k]", "[N, k]", "k") + [
    pytest.param(
        lambda d: (t((10, 64), d), t((32, 64), d), 1, 4),
        RuntimeError,
        r"mkernel\.gemm_rs: x's row count M must be divisible by world_size .*"
        r"\(x: \[10, 64\], world_size: 4\)",
        id="m_not_divisible",
    ),
]


@pytest.mark.parametrize("mode", VALIDATION_MODES)
@pytest.mark.parametrize("make_args, exc, match", BAD_INPUTS)
def test_bad_input(mode, make_args, exc, match):
    assert_bad_input_raises(mode, op(), make_args, exc, match)


def test_bad_device():
    with pytest.raises(RuntimeError, match=r"mkernel\.gemm_rs: w must be on the device of x"):
        op()(t((8, 64), "cpu"), t((32, 64), "meta"), 1, 2)


def test_fake_cuda_rejects_fp32():
    assert_fake_cuda_rejects_fp32(
        op(),
        lambda: (t((8, 64), "cuda", torch.float32), t((32, 64), "cuda", torch.float32), 1, 2),
        r"mkernel\.gemm_rs: x must be bf16 or fp16 on CUDA, got fp32",
    )
