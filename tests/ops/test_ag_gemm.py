"""mkernel.ag_gemm: x [m, K], w [N, K] -> out [W*m, N] (+ gathered x [W*m, K])."""

from __future__ import annotations

import pytest
import torch

from .helpers import (
    NO_SESSION,
    VALIDATION_MODES,
    assert_bad_input_raises,
    assert_compiled_linear_needs_open_group,
    assert_fake_cuda_rejects_fp32,
    assert_linear_needs_open_group,
    assert_tensor,
    compile_and_run,
    fake_mode,
    group,
    linear_bad_inputs,
    requires_cuda,
    t,
)

# (m, K, N, W): ragged m (not a multiple of any tile), a single row, an empty shard.
SHAPES = [(37, 64, 96, 4), (1, 128, 256, 8), (129, 72, 130, 3), (100, 48, 200, 1), (0, 64, 32, 2)]


def op():
    return torch.ops.mkernel.ag_gemm.default


@pytest.mark.parametrize("device", ["cpu", "cuda"])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("m, k, n, world", SHAPES)
def test_fake_shapes(device, dtype, m, k, n, world):
    with fake_mode():
        x, w = t((m, k), device, dtype), t((n, k), device, dtype)
        out, gathered = op()(x, w, 1, world, True)
        out_only, empty = op()(x, w, 1, world)
    assert_tensor(out, (world * m, n), dtype, device)
    assert_tensor(gathered, (world * m, k), dtype, device)
    assert_tensor(out_only, (world * m, n), dtype, device)
    assert_tensor(empty, (0,), dtype, device)


def test_fake_cpu_accepts_fp32():
    with fake_mode():
        out, _ = op()(t((5, 16), "cpu", torch.float32), t((8, 16), "cpu", torch.float32), 1, 2)
    assert_tensor(out, (10, 8), torch.float32, "cpu")


@pytest.mark.parametrize("backend", ["eager", "aot_eager"])
def test_compile_dynamic(ops, backend):
    g = group(4)

    def fn(x, w):
        out, gathered = ops.ag_gemm(x, w, group=g, return_gathered=True)
        return out, gathered, ops.ag_gemm(x, w, group=g)

    inputs = [(t((m, 64), "meta"), t((96, 64), "meta")) for m in (37, 100, 129)]
    outs, frames = compile_and_run(fn, inputs, backend=backend, dynamic=True)
    assert frames == 1, "ragged m must not recompile under dynamic shapes"
    for (x, _), (out, gathered, out_only) in zip(inputs, outs, strict=True):
        assert_tensor(out, (4 * x.shape[0], 96), torch.bfloat16, "meta")
        assert_tensor(gathered, (4 * x.shape[0], 64), torch.bfloat16, "meta")
        assert_tensor(out_only, (4 * x.shape[0], 96), torch.bfloat16, "meta")


def test_compile_static_shapes(ops):
    g = group(2)
    inputs = [
        (t((m, 48), "meta", torch.float16), t((40, 48), "meta", torch.float16)) for m in (3, 65)
    ]
    outs, frames = compile_and_run(
        lambda x, w: ops.ag_gemm(x, w, group=g), inputs, backend="aot_eager", dynamic=False
    )
    assert frames == 2
    assert_tensor(outs[0], (6, 40), torch.float16, "meta")
    assert_tensor(outs[1], (130, 40), torch.float16, "meta")


def test_compile_traces_then_cpu_kernel_raises(ops):
    assert_compiled_linear_needs_open_group("ag_gemm", ops.ag_gemm)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
def test_cpu_needs_an_open_group(ops, dtype):
    assert_linear_needs_open_group(
        "ag_gemm", ops.ag_gemm, "cpu", dtype, raw_call=lambda x, w: op()(x, w, NO_SESSION, 2, True)
    )


@requires_cuda
def test_cuda_needs_an_open_group(ops):
    assert_linear_needs_open_group("ag_gemm", ops.ag_gemm, "cuda", torch.bfloat16)


@requires_cuda
def test_cuda_rejects_fp32():
    x = torch.randn(8, 64, device="cuda")
    with pytest.raises(RuntimeError, match=r"x must be bf16 or fp16 on CUDA, got fp32"):
        op()(x, torch.randn(32, 64, device="cuda"), 1, 2)


BAD_INPUTS = linear_bad_inputs("ag_gemm", "[m, K]", "[N, K]", "K")


@pytest.mark.parametrize("mode", VALIDATION_MODES)
@pytest.mark.parametrize("make_args, exc, match", BAD_INPUTS)
def test_bad_input(mode, make_args, exc, match):
    assert_bad_input_raises(mode, op(), make_args, exc, match)


def test_bad_device():
    with pytest.raises(
        RuntimeError, match=r"mkernel\.ag_gemm: w must be on the device of x \(x: cpu, w: meta\)"
    ):
        op()(t((8, 64), "cpu"), t((32, 64), "meta"), 1, 2)


def test_fake_cuda_rejects_fp32():
    """The dtype rule of the CUDA kernel already holds while tracing for CUDA."""
    assert_fake_cuda_rejects_fp32(
        op(),
        lambda: (t((8, 64), "cuda", torch.float32), t((32, 64), "cuda", torch.float32), 1, 2),
        r"x must be bf16 or fp16 on CUDA, got fp32",
    )


def test_bad_input_while_compiling(ops):
    g = group(2)
    compiled = torch.compile(
        lambda x, w: ops.ag_gemm(x, w, group=g), fullgraph=True, backend="eager"
    )
    torch._dynamo.reset()
    with pytest.raises(RuntimeError, match=r"w must have the same K as x"):
        compiled(t((8, 64), "meta"), t((32, 48), "meta"))
