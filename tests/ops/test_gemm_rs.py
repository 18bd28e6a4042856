"""mkernel.gemm_rs: x [M, k], w [N, k] -> reduce_scatter(x @ w.T) [M/W, N]."""

from __future__ import annotations

import pytest
import torch

from .helpers import (
    VALIDATION_MODES,
    assert_tensor,
    call_in_mode,
    compile_and_run,
    fake_mode,
    group,
    linear_bad_inputs,
    requires_cuda,
    t,
)

# (M, k, N, W): M a multiple of W but of no tile size; world of one; no rows at all.
SHAPES = [(36, 64, 96, 4), (8, 128, 256, 8), (129, 72, 130, 3), (100, 48, 200, 1), (0, 64, 32, 2)]


# A group handle that is no open mkernel session in this process.
NO_SESSION = 987654321
NEEDS_GROUP = (
    rf"mkernel\.gemm_rs: (group {NO_SESSION} is not an open mkernel group"
    r"|the mkernel core is not loaded)"
)


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
    g = group(4)
    inputs = [(t((m, 64), "meta"), t((96, 64), "meta")) for m in (36, 100, 132)]
    outs, frames = compile_and_run(
        lambda x, w: ops.gemm_rs(x, w, group=g), inputs, backend=backend, dynamic=True
    )
    assert frames == 1, "ragged M must not recompile under dynamic shapes"
    for (x, _), out in zip(inputs, outs, strict=True):
        assert_tensor(out, (x.shape[0] // 4, 96), torch.bfloat16, "meta")


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
    """Tracing (fake kernel) succeeds; running calls the CPU kernel, which needs an open group."""
    g = group(2, handle=NO_SESSION)
    compiled = torch.compile(
        lambda x, w: ops.gemm_rs(x, w, group=g), fullgraph=True, backend="eager"
    )
    torch._dynamo.reset()
    with pytest.raises((ValueError, RuntimeError), match=NEEDS_GROUP):
        compiled(torch.randn(8, 64), torch.randn(32, 64))


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
def test_cpu_needs_an_open_group(ops, dtype):
    """At world_size > 1 the CPU reference kernel moves data through the group's data paths
    (tests/host/ runs it across processes); a handle that is no open group is an error."""
    x, w = torch.randn(8, 64, dtype=dtype), torch.randn(32, 64, dtype=dtype)
    with pytest.raises((ValueError, RuntimeError), match=NEEDS_GROUP):
        op()(x, w, NO_SESSION, 2)
    with pytest.raises((ValueError, RuntimeError), match=NEEDS_GROUP):
        ops.gemm_rs(x, w, group=group(2, handle=NO_SESSION))


@requires_cuda
def test_cuda_needs_an_open_group(ops):
    """At world size > 1 the CUDA kernel runs over the group's symmetric memory (tests/gpu runs
    it across ranks against a reference); a handle that is no open group is a clear error."""
    x = torch.randn(8, 64, dtype=torch.bfloat16, device="cuda")
    w = torch.randn(32, 64, dtype=torch.bfloat16, device="cuda")
    with pytest.raises((ValueError, RuntimeError), match=NEEDS_GROUP):
        ops.gemm_rs(x, w, group=group(2, handle=NO_SESSION))


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
    with pytest.raises(exc, match=match):
        call_in_mode(mode, op(), make_args)


def test_bad_device():
    with pytest.raises(RuntimeError, match=r"mkernel\.gemm_rs: w must be on the device of x"):
        op()(t((8, 64), "cpu"), t((32, 64), "meta"), 1, 2)


def test_fake_cuda_rejects_fp32():
    with (
        fake_mode(),
        pytest.raises(
            RuntimeError, match=r"mkernel\.gemm_rs: x must be bf16 or fp16 on CUDA, got fp32"
        ),
    ):
        op()(t((8, 64), "cuda", torch.float32), t((32, 64), "cuda", torch.float32), 1, 2)
