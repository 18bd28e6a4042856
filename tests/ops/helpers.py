"""Shared helpers of the op-layer tests: inputs on real, meta and fake devices, compile counting."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
from types import SimpleNamespace
from typing import Any

import pytest
import torch
from torch._dynamo.testing import CompileCounterWithBackend
from torch._subclasses.fake_tensor import FakeTensorMode

GROUP_HANDLE = 1

# The test_utils of torch.library.opcheck that need no autograd. Beware: opcheck skips every
# check whose inputs are meta or fake tensors (it checks nothing there); call it on real tensors
# (tests/ops/test_opcheck_real.py, opcheck_or_missing below).
OPCHECK_UTILS = ("test_schema", "test_faketensor", "test_aot_dispatch_dynamic")

# Where a bad input must be caught, with the same error: the CPU reference kernel (eagerly, on
# real tensors), the Meta kernel on meta tensors, and the Meta kernel under FakeTensorMode.
VALIDATION_MODES = ("cpu", "meta", "fake")

requires_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


def group(world_size: int, handle: int = GROUP_HANDLE) -> SimpleNamespace:
    """A stand-in for the mkernel context that mkernel.init() returns."""
    return SimpleNamespace(handle=handle, world_size=world_size)


def t(shape: Sequence[int], device: str | torch.device, dtype: torch.dtype = torch.bfloat16):
    """An uninitialised tensor (its values never matter to these tests)."""
    return torch.empty(tuple(shape), dtype=dtype, device=device)


def strided(shape: Sequence[int], device: str | torch.device, dtype=torch.bfloat16):
    """A tensor of `shape` that is not row-major contiguous (a transposed view)."""
    return t(tuple(reversed(shape)), device, dtype).permute(*reversed(range(len(shape))))


def call_in_mode(mode: str, op: Callable[..., Any], make_args: Callable[[str], tuple]) -> Any:
    """Build op's arguments on mode's device (make_args(device)) and call op there."""
    if mode == "fake":
        with FakeTensorMode():
            return op(*make_args("cpu"))
    return op(*make_args({"cpu": "cpu", "meta": "meta"}[mode]))


def fake_mode() -> contextlib.AbstractContextManager:
    return FakeTensorMode()


def assert_tensor(out: torch.Tensor, shape: Sequence[int], dtype: torch.dtype, device) -> None:
    assert tuple(out.shape) == tuple(shape), f"shape {tuple(out.shape)}, expected {tuple(shape)}"
    assert out.dtype == dtype, f"dtype {out.dtype}, expected {dtype}"
    expected = torch.device(device)
    assert out.device.type == expected.type and expected.index in (None, out.device.index), (
        f"device {out.device}, expected {expected}"
    )
    assert out.is_contiguous()


def compile_and_run(fn: Callable, inputs: Sequence[tuple], *, backend: str, dynamic: bool):
    """Runs torch.compile(fn, fullgraph=True) on each input tuple; returns (outputs, frames)."""
    torch._dynamo.reset()
    counter = CompileCounterWithBackend(backend)
    compiled = torch.compile(fn, fullgraph=True, backend=counter, dynamic=dynamic)
    outs = [compiled(*args) for args in inputs]
    return outs, counter.frame_count


def linear_bad_inputs(op: str, x_layout: str, w_layout: str, k_name: str) -> list:
    """Bad inputs of a GEMM op taking (x [rows, K], w [N, K], group, world_size), one per check.

    Each case is pytest.param(make_args(device) -> args, exception type, message regex, id=...).
    """
    o = rf"mkernel\.{op}"
    xl, wl = (layout.replace("[", r"\[").replace("]", r"\]") for layout in (x_layout, w_layout))
    cases = [
        (
            "world_size",
            lambda d: (t((8, 64), d), t((32, 64), d), 1, 0),
            ValueError,
            rf"{o}: world_size must be >= 1, got 0",
        ),
        (
            "group",
            lambda d: (t((8, 64), d), t((32, 64), d), -1, 2),
            ValueError,
            rf"{o}: group must be an mkernel group handle >= 0 .*got -1",
        ),
        (
            "x_dim",
            lambda d: (t((2, 8, 64), d), t((32, 64), d), 1, 2),
            RuntimeError,
            rf"{o}: x must be a 2-D tensor {xl}, got 3-D \[2, 8, 64\]",
        ),
        (
            "w_dim",
            lambda d: (t((8, 64), d), t((64,), d), 1, 2),
            RuntimeError,
            rf"{o}: w must be a 2-D tensor {wl}, got 1-D \[64\]",
        ),
        (
            "x_dtype",
            lambda d: (t((8, 64), d, torch.int32), t((32, 64), d, torch.int32), 1, 2),
            RuntimeError,
            rf"{o}: x must be bf16 or fp16 \(or fp32 .*\), got int32",
        ),
        (
            "w_dtype",
            lambda d: (t((8, 64), d), t((32, 64), d, torch.float16), 1, 2),
            RuntimeError,
            rf"{o}: w must have the dtype of x \(x: bf16, w: fp16\)",
        ),
        (
            "k_mismatch",
            lambda d: (t((8, 64), d), t((32, 48), d), 1, 2),
            RuntimeError,
            rf"{o}: w must have the same {k_name} as x \(x: \[8, 64\], w: \[32, 48\]\)",
        ),
        (
            "x_strided",
            lambda d: (strided((8, 64), d), t((32, 64), d), 1, 2),
            RuntimeError,
            rf"{o}: x must be row-major contiguous .*sizes \[8, 64\] with strides \[1, 8\]",
        ),
        (
            "w_strided",
            lambda d: (t((8, 64), d), strided((32, 64), d), 1, 2),
            RuntimeError,
            rf"{o}: w must be row-major contiguous",
        ),
    ]
    return [pytest.param(*case[1:], id=case[0]) for case in cases]


def bad(case_id: str, exc: type[Exception], match: str, **overrides: Any):
    """One bad-input case: the overrides of the valid arguments, the error type and its regex."""
    return pytest.param(overrides, exc, match, id=case_id)


def opcheck_or_missing(op, args, test_utils=None) -> None:
    """torch.library.opcheck on real tensors; an op whose kernel "has not landed yet" raises
    NotImplementedError (for a strict xfail naming the issue), any other failure OpCheckError."""
    from torch.testing._internal.optests.generate_tests import OpCheckError

    kwargs = {} if test_utils is None else {"test_utils": test_utils}
    try:
        torch.library.opcheck(op, args, **kwargs)
    except OpCheckError as e:
        if "has not landed yet" in str(e):
            raise NotImplementedError(str(e)) from e
        raise
