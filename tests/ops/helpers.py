"""Shared helpers of the op-layer tests: inputs on real, meta and fake devices, compile counting,
and the checks several op test files run alike (bad inputs, devices, groups that are not open)."""

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
# A group handle that is no open mkernel session in this process.
NO_SESSION = 987654321

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


def bad_world_size_and_group(op_regex: str, bad_group: int = -1) -> list:
    """The first two bad-input cases of an op taking `group` and `world` overrides (see `bad`):
    world_size 0 (id "world_size") and the negative group handle bad_group (id "group")."""
    return [
        bad("world_size", ValueError, rf"{op_regex}: world_size must be >= 1, got 0", world=0),
        bad(
            "group",
            ValueError,
            rf"{op_regex}: group must be an mkernel group handle >= 0 .*got {bad_group}",
            group=bad_group,
        ),
    ]


def assert_bad_input_raises(
    mode: str,
    op: Callable[..., Any],
    make_args: Callable[[str], tuple],
    exc: type[Exception],
    match: str,
) -> None:
    """op on make_args(device), called in mode (one of VALIDATION_MODES), raises exc matching
    match."""
    with pytest.raises(exc, match=match):
        call_in_mode(mode, op, make_args)


def assert_fake_cuda_rejects_fp32(
    op: Callable[..., Any], make_args: Callable[[], tuple], match: str
) -> None:
    """Under FakeTensorMode, op on the fp32 CUDA arguments make_args() builds (inside the mode)
    raises RuntimeError matching match: the CUDA kernel's dtype rule already holds while tracing."""
    with fake_mode(), pytest.raises(RuntimeError, match=match):
        op(*make_args())


def assert_rejects_input_on_other_device(
    op: Callable[..., Any], args: tuple, names: Sequence[str], arg: str, op_regex: str
) -> None:
    """Moves the tensor argument named arg to the meta device and checks op(*args) refuses it.

    args are valid CPU arguments whose leading tensors are named by names (names[0]: the tensor
    whose device the others must share); the error names both devices.
    """
    i = names.index(arg)
    moved = (*args[:i], args[i].to("meta"), *args[i + 1 :])
    first = names[0]
    with pytest.raises(
        RuntimeError,
        match=rf"{op_regex}: {arg} must be on the device of {first} \({first}: cpu, {arg}: meta\)",
    ):
        op(*moved)


def no_open_group_error(op_name: str) -> str:
    """The regex of the error mkernel.<op_name> raises for the group handle NO_SESSION."""
    return (
        rf"mkernel\.{op_name}: (group {NO_SESSION} is not an open mkernel group"
        r"|the mkernel core is not loaded)"
    )


def assert_linear_needs_open_group(
    op_name: str,
    linear: Callable[..., Any],
    device: str,
    dtype: torch.dtype,
    raw_call: Callable[[torch.Tensor, torch.Tensor], Any] | None = None,
) -> None:
    """At world size > 1 the CPU reference kernel moves data through the group's data paths
    (tests/host/ runs it across processes) and the CUDA kernel runs over the group's symmetric
    memory (tests/gpu runs it across ranks against a reference): a handle that is no open group
    is a clear error.

    x [8, 64], w [32, 64] (random, of dtype on device): raw_call(x, w) (the op itself called with
    NO_SESSION, if given), then the wrapper linear(x, w, group=<NO_SESSION, W = 2>), each raise
    the op's no-open-group error.
    """
    x = torch.randn(8, 64, dtype=dtype, device=device)
    w = torch.randn(32, 64, dtype=dtype, device=device)
    if raw_call is not None:
        with pytest.raises((ValueError, RuntimeError), match=no_open_group_error(op_name)):
            raw_call(x, w)
    with pytest.raises((ValueError, RuntimeError), match=no_open_group_error(op_name)):
        linear(x, w, group=group(2, handle=NO_SESSION))


def assert_compiled_linear_needs_open_group(op_name: str, linear: Callable[..., Any]) -> None:
    """torch.compile of linear(x, w, group=<NO_SESSION, W = 2>) traces (the fake kernel
    succeeds); running it on CPU tensors calls the CPU kernel, which needs an open group and
    raises the op's no-open-group error."""
    g = group(2, handle=NO_SESSION)
    compiled = torch.compile(lambda x, w: linear(x, w, group=g), fullgraph=True, backend="eager")
    torch._dynamo.reset()
    with pytest.raises((ValueError, RuntimeError), match=no_open_group_error(op_name)):
        compiled(torch.randn(8, 64), torch.randn(32, 64))


def assert_linear_compiles_once(
    linear: Callable[..., Any],
    rows: Sequence[int],
    out_rows: Callable[[int], int],
    backend: str,
) -> None:
    """torch.compile(dynamic=True) of linear(x [M, 64], w [96, 64], group=<W = 4>) over each M
    in rows (meta, bf16): one frame (ragged M does not recompile), out [out_rows(M), 96] each."""
    g = group(4)
    inputs = [(t((m, 64), "meta"), t((96, 64), "meta")) for m in rows]
    outs, frames = compile_and_run(
        lambda x, w: linear(x, w, group=g), inputs, backend=backend, dynamic=True
    )
    assert frames == 1, "ragged M must not recompile under dynamic shapes"
    for (x, _), out in zip(inputs, outs, strict=True):
        assert_tensor(out, (out_rows(x.shape[0]), 96), torch.bfloat16, "meta")
