"""The CUDA kernels read their inputs by TMA and 16-byte vector loads: an input whose data starts
off a 16-byte boundary (a contiguous view at an odd element offset, e.g. a slice of a flat
parameter buffer) gets a ValueError naming the argument (validation::check_aligned16) instead
of faulting inside the kernel. Every op at world size 1 (no group needed), one process: the
misaligned input is refused, the same values at an aligned address give the reference result
(so the check cannot pass by refusing everything)."""

from __future__ import annotations

import pytest
import torch

import mkernel  # noqa: F401  (registers torch.ops.mkernel)

needs_gpu = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


def _misaligned(t: torch.Tensor) -> torch.Tensor:
    """A contiguous copy of t whose data starts one element (2 bytes) past a 16-byte boundary."""
    flat = torch.empty(t.numel() + 8, dtype=t.dtype, device=t.device)
    out = flat[1:1 + t.numel()].view(t.shape)
    out.copy_(t)
    assert out.is_contiguous() and out.data_ptr() % 16 != 0
    return out


def _rel(x: torch.Tensor, ref: torch.Tensor) -> float:
    return ((x.float() - ref.float()).norm() / ref.float().norm().clamp_min(1e-30)).item()


def _linear_ops():
    ops = torch.ops.mkernel
    return {
        "ag_gemm": lambda x, w: ops.ag_gemm.default(x, w, 0, 1, False)[0],
        "gemm_rs": lambda x, w: ops.gemm_rs.default(x, w, 0, 1),
        "gemm_ar": lambda x, w: ops.gemm_ar.default(x, w, 0, 1),
        "gemm": lambda x, w: ops.gemm.default(x, w),
    }


@needs_gpu
@pytest.mark.parametrize("op", ["ag_gemm", "gemm_rs", "gemm_ar", "gemm"])
def test_linear_ops_refuse_a_misaligned_operand(op: str) -> None:
    gen = torch.Generator(device="cuda").manual_seed(3)
    x = torch.randn(96, 128, device="cuda", dtype=torch.bfloat16, generator=gen)
    w = torch.randn(64, 128, device="cuda", dtype=torch.bfloat16, generator=gen)
    call = _linear_ops()[op]
    ref = x.double() @ w.double().T
    assert _rel(call(x, w), ref) < 1e-2
    first, second = ("a", "b") if op == "gemm" else ("x", "w")
    with pytest.raises(ValueError, match=f"{first} must start at a 16-byte aligned address"):
        call(_misaligned(x), w)
    with pytest.raises(ValueError, match=f"{second} must start at a 16-byte aligned address"):
        call(x, _misaligned(w))


@needs_gpu
@pytest.mark.parametrize("op", ["attention", "ring_attention"])
@pytest.mark.parametrize("arg", [0, 1, 2])
def test_attention_refuses_a_misaligned_input(op: str, arg: int) -> None:
    gen = torch.Generator(device="cuda").manual_seed(4 + arg)
    qkv = [torch.randn(1, 192, 4, 64, device="cuda", dtype=torch.bfloat16, generator=gen)
           for _ in range(3)]
    if op == "attention":
        call = lambda q, k, v: torch.ops.mkernel.attention.default(q, k, v, True)  # noqa: E731
    else:
        call = lambda q, k, v: torch.ops.mkernel.ring_attention.default(q, k, v, 0, 1, True)  # noqa: E731
    out, _ = call(*qkv)
    ref = torch.nn.functional.scaled_dot_product_attention(
        *(t.double().transpose(1, 2) for t in qkv), is_causal=True).transpose(1, 2)
    assert _rel(out, ref) < 2e-2
    bad = list(qkv)
    bad[arg] = _misaligned(qkv[arg])
    with pytest.raises(ValueError, match=f"{'qkv'[arg]} must start at a 16-byte aligned address"):
        call(*bad)


@needs_gpu
@pytest.mark.parametrize("op", ["all_gather", "all_reduce"])
def test_collectives_refuse_a_misaligned_input(op: str) -> None:
    x = torch.randn(40, 24, device="cuda", dtype=torch.bfloat16)
    call = getattr(torch.ops.mkernel, op).default
    assert torch.equal(call(x, 0, 1), x)
    with pytest.raises(ValueError, match="x must start at a 16-byte aligned address"):
        call(_misaligned(x), 0, 1)


@needs_gpu
def test_moe_dispatch_refuses_a_misaligned_input() -> None:
    gen = torch.Generator(device="cuda").manual_seed(6)
    t, h, f, experts = 32, 64, 48, 4
    x = torch.randn(t, h, device="cuda", dtype=torch.bfloat16, generator=gen)
    idx = torch.randint(0, experts, (t, 2), device="cuda", generator=gen)
    w1 = torch.randn(experts, f, h, device="cuda", dtype=torch.bfloat16, generator=gen)
    dispatch = torch.ops.mkernel.moe_dispatch_gemm.default
    dispatch(x, idx, w1, 0, 1, experts)  # aligned: runs
    with pytest.raises(ValueError, match="x must start at a 16-byte aligned address"):
        dispatch(_misaligned(x), idx, w1, 0, 1, experts)
    with pytest.raises(ValueError, match="w1 must start at a 16-byte aligned address"):
        dispatch(x, idx, _misaligned(w1), 0, 1, experts)
