"""The fused ops' local GEMMs outside their fused kernels: the backward's data and weight gradients
(``autograd.py``) and the replicated column linear (``nn.py``).

torch.matmul (cuBLAS) unless torch's own half-precision GEMM is wrong on this process's GPU: session
46 measured torch 2.11+cu130 returning wrong values and NaN for 16 of 48 bf16/fp16 GEMMs (nn.Linear's
forward, data and weight gradients) on a third of an H100 under MPS, right on the whole GPU, while
the engine stayed right on every case at every share the fuzz ran. Then these GEMMs run the engine
(``torch.ops.mkernel.gemm``, ``a @ b.T``), at the cost of the operand transposes it needs.

``MKERNEL_LOCAL_GEMM``: ``auto`` (default) decides once per device with :func:`half_gemm_errors`
(torch's half GEMM on known-bad shapes against a float32 product); ``torch`` / ``engine`` force one.
"""

from __future__ import annotations

from typing import Callable

import torch
import torch.nn.functional as F
from torch import Tensor

from . import _env_knobs

HALF = (torch.bfloat16, torch.float16)
# Operands of the forms that broke (the weight gradient g^T x with few reduction rows, as a
# transposed view and contiguous; a square one that came back non-finite). Small: a float64 host
# reference costs ~0.1 s, the float32 device one microseconds.
HALF_GEMM_CASES = ((27, 368, 496), (32, 368, 496), (128, 1024, 1024))
HALF_GEMM_TOL = 2e-2  # bf16 rounding gives ~2e-3 on these; the defect gave 0.22 to 5e16 or NaN

_torch_ok: dict[int, bool] = {}


def half_gemm_errors(device: str | torch.device, matmul: Callable[[Tensor, Tensor], Tensor] = torch.matmul,
                     reference: str = "host") -> dict[str, float]:
    """Relative error (Frobenius; inf if non-finite) of ``matmul`` in bf16 and fp16 on ``device``
    per case, ``"bf16 g^T x [C, F]^T [C, H] view"`` etc., against float64 on the host
    (``reference="host"``) or float32 on ``device`` (``"device"``, TF32 off)."""
    gen = torch.Generator().manual_seed(46)
    errors: dict[str, float] = {}
    for dt, name in ((torch.bfloat16, "bf16"), (torch.float16, "fp16")):
        for c, f, h in HALF_GEMM_CASES:
            g = torch.randn(c, f, generator=gen).to(dt)
            x = torch.randn(c, h, generator=gen).to(dt)
            gd, xd = g.to(device), x.to(device)
            if reference == "host":
                want = g.double().t() @ x.double()
            else:
                tf32 = torch.backends.cuda.matmul.allow_tf32
                torch.backends.cuda.matmul.allow_tf32 = False
                try:
                    want = (gd.float().t() @ xd.float()).double().cpu()
                finally:
                    torch.backends.cuda.matmul.allow_tf32 = tf32
            for form, a in (("view", gd.t()), ("contiguous", gd.t().contiguous())):
                out = matmul(a, xd).double().cpu()
                ok = bool(torch.isfinite(out).all())
                errors[f"{name} g^T x [{c}, {f}]^T [{c}, {h}] {form}"] = (
                    float((out - want).norm() / want.norm()) if ok else float("inf"))
    return errors


def torch_half_gemm_ok(device: torch.device) -> bool:
    """Whether torch's bf16/fp16 matmul is right on ``device`` as this process sees it (cached per
    device; unknown while torch.compile traces or a CUDA graph is captured: then assumed right,
    so make the first call eager: a warm-up step, or this function)."""
    index = device.index if device.index is not None else torch.cuda.current_device()
    if index not in _torch_ok:
        if torch.compiler.is_compiling() or torch.cuda.is_current_stream_capturing():
            return True  # no values to read while tracing or capturing a graph: decide eagerly
        try:
            with torch.cuda.device(index):
                errors = half_gemm_errors(torch.device("cuda", index), reference="device")
        except RuntimeError:  # traced (fake tensors have no values): decide at an eager call
            return True
        _torch_ok[index] = all(v <= HALF_GEMM_TOL for v in errors.values())
        if not _torch_ok[index]:
            import logging

            bad = sum(not v <= HALF_GEMM_TOL for v in errors.values())
            logging.getLogger("mkernel").warning(
                "torch %s's half-precision matmul is wrong on cuda:%d as this process sees it (%d of %d "
                "probe cases past %g; an MPS share?): mkernel's backward GEMMs run its own engine",
                torch.__version__, index, bad, len(errors), HALF_GEMM_TOL)
    return _torch_ok[index]


def use_engine(t: Tensor) -> bool:
    """Whether the local GEMMs on ``t``'s device and dtype run the engine (see the module doc)."""
    mode = (_env_knobs.get("MKERNEL_LOCAL_GEMM") or "auto").strip().lower()
    if mode == "engine":
        return True
    if mode not in ("auto", "torch"):
        raise ValueError(f"MKERNEL_LOCAL_GEMM={mode!r}: expected auto, torch or engine")
    if mode == "torch" or not t.is_cuda or t.dtype not in HALF:
        return False
    return not torch_half_gemm_ok(t.device)


def _pad_last(t: Tensor, to: int) -> Tensor:
    return t if t.shape[-1] == to else F.pad(t, (0, to - t.shape[-1]))


def engine_nt(a: Tensor, b: Tensor) -> Tensor:
    """``a @ b.T`` ([M, K] x [N, K] -> [M, N]) on the engine: K and N zero-padded to multiples of
    8 (TMA's 16-byte rows) and the padding's columns sliced off."""
    m, k = a.shape
    n = b.shape[0]
    if m == 0 or n == 0 or k == 0:
        return a.new_zeros(m, n)
    k8, n8 = -(-k // 8) * 8, -(-n // 8) * 8
    a, b = _pad_last(a, k8).contiguous(), _pad_last(b, k8)
    if n8 != n:
        b = F.pad(b, (0, 0, 0, n8 - n))
    out = torch.ops.mkernel.gemm.default(a, b.contiguous())
    return out[:, :n].contiguous() if n8 != n else out


def linear(x: Tensor, w: Tensor) -> Tensor:
    """``x @ w.T`` for x [..., K], w [N, K] -> [..., N]."""
    if not use_engine(x):
        return x.matmul(w.t())
    return engine_nt(x.reshape(-1, x.shape[-1]), w).reshape(*x.shape[:-1], w.shape[0])


def dgrad(g: Tensor, w: Tensor) -> Tensor:
    """``g @ w`` for g [M, N], w [N, K] -> [M, K] (the data gradient of ``x @ w.T``)."""
    if not use_engine(g):
        return g.matmul(w)
    return engine_nt(g, w.t().contiguous())


def wgrad(g: Tensor, x: Tensor) -> Tensor:
    """``g.T @ x`` for g [M, N], x [M, K] -> [N, K] (the weight gradient of ``x @ w.T``)."""
    if not use_engine(g):
        return g.t().matmul(x)
    return engine_nt(g.t().contiguous(), x.t().contiguous())


def reset() -> None:
    """Forget the cached per-device decisions (tests)."""
    _torch_ok.clear()
