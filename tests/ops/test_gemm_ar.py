"""mkernel.gemm_ar: x [M, k], w [N, k] -> allreduce(x @ w.T) [M, N]."""

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
    linear_bad_inputs,
    requires_cuda,
    t,
)

# (M, k, N, W): ragged M (no multiple of W or of a tile), one row, world of one, no rows at all.
SHAPES = [(37, 64, 96, 4), (1, 128, 256, 8), (129, 72, 130, 3), (100, 48, 200, 1), (0, 64, 32, 2)]


def op():
    return torch.ops.mkernel.gemm_ar.default


@pytest.mark.parametrize("device", ["cpu", "cuda"])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("m, k, n, world", SHAPES)
def test_fake_shapes(device, dtype, m, k, n, world):
    with fake_mode():
        out = op()(t((m, k), device, dtype), t((n, k), device, dtype), 1, world)
    assert_tensor(out, (m, n), dtype, device)


@pytest.mark.parametrize("backend", ["eager", "aot_eager"])
def test_compile_dynamic(ops, backend):
    assert_linear_compiles_once(ops.gemm_ar, (37, 100, 129), lambda m: m, backend)


def test_compile_traces_then_cpu_kernel_raises(ops):
    assert_compiled_linear_needs_open_group("gemm_ar", ops.gemm_ar)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
def test_cpu_needs_an_open_group(ops, dtype):
    assert_linear_needs_open_group(
        "gemm_ar", ops.gemm_ar, "cpu", dtype, raw_call=lambda x, w: op()(x, w, NO_SESSION, 2)
    )


@requires_cuda
def test_cuda_needs_an_open_group(ops):
    assert_linear_needs_open_group("gemm_ar", ops.gemm_ar, "cuda", torch.bfloat16)


BAD_INPUTS = linear_bad_inputs("gemm_ar", "[M, k]", "[N, k]", "k")


@pytest.mark.parametrize("mode", VALIDATION_MODES)
@pytest.mark.parametrize("make_args, exc, match", BAD_INPUTS)
def test_bad_input(mode, make_args, exc, match):
    assert_bad_input_raises(mode, op(), make_args, exc, match)


def test_bad_device():
    with pytest.raises(RuntimeError, match=r"mkernel\.gemm_ar: w must be on the device of x"):
        op()(t((8, 64), "cpu"), t((32, 64), "meta"), 1, 2)


def test_fake_cuda_rejects_fp32():
    assert_fake_cuda_rejects_fp32(
        op(),
        lambda: (t((8, 64), "cuda", torch.float32), t((32, 64), "cuda", torch.float32), 1, 2),
        r"mkernel\.gemm_ar: x must be bf16 or fp16 on CUDA, got fp32",
    )
