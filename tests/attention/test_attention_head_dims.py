"""mkernel.attention on CUDA with head dims the engine is not built for (it has d = 64 and 128):
the other multiples of 8 up to 256 run torch's FlashAttention-2 kernel under the op's own
conventions — bottom-right causal, lse natural-log [b, h, s] fp32, a row that sees no key gets
out 0 and lse -inf — and stay differentiable (the backward takes d <= 256). GPU: forward and
gradients against float64 on ragged lengths, GQA, s != s_kv, the allocator poisoned first. CPU:
the validator's rule under FakeTensorMode (the op's fake kernel refuses what the CUDA kernel
would)."""

from __future__ import annotations

import warnings

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode

import mkernel

from .reference import attention_ref

needs_gpu = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")

CASES = [  # (b, s, s_kv, h, h_kv, d, causal)
    (2, 77, 77, 4, 4, 32, True),
    (1, 130, 257, 8, 2, 96, True),      # s < s_kv, GQA
    (1, 300, 100, 4, 4, 96, True),      # s > s_kv: the first 200 rows see no key
    (2, 65, 65, 2, 1, 256, False),      # MQA
    (1, 200, 333, 4, 2, 256, True),
    (1, 96, 96, 4, 4, 80, False),
]


def _rel(x: torch.Tensor, ref: torch.Tensor) -> float:
    return ((x.double() - ref).norm() / ref.norm().clamp_min(1e-12)).item()


def _poison() -> None:
    x = torch.empty(64 << 20, dtype=torch.uint8, device="cuda")
    x.fill_(0xFF)
    del x


@needs_gpu
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("case", CASES)
def test_other_head_dims_match_float64(case, dtype) -> None:
    b, s, s_kv, h, h_kv, d, causal = case
    gen = torch.Generator(device="cuda").manual_seed(d + s)
    q = torch.randn(b, s, h, d, device="cuda", dtype=dtype, generator=gen).requires_grad_()
    k = torch.randn(b, s_kv, h_kv, d, device="cuda", dtype=dtype, generator=gen).requires_grad_()
    v = torch.randn(b, s_kv, h_kv, d, device="cuda", dtype=dtype, generator=gen).requires_grad_()
    dout = torch.randn(b, s, h, d, device="cuda", dtype=dtype, generator=gen)
    _poison()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the one-time "runs torch's FlashAttention-2" notice
        out, lse = mkernel.attention(q, k, v, causal=causal)
    q64, k64, v64 = (x.detach().double().requires_grad_() for x in (q, k, v))
    ref, ref_lse = attention_ref(q64, k64, v64, causal)
    assert out.shape == q.shape and out.dtype == dtype and lse.shape == (b, h, s)
    assert _rel(out, ref.detach()) < 2e-2, "out"
    seen = torch.isfinite(ref_lse)
    assert torch.equal(torch.isneginf(lse), ~seen), "rows that see no key: lse -inf, the others finite"
    assert torch.all(out.transpose(1, 2)[~seen] == 0), "rows that see no key: out 0"
    assert _rel(lse[seen], ref_lse[seen].detach()) < 1e-4, "lse"
    grads = torch.autograd.grad(out, (q, k, v), dout)
    ref_grads = torch.autograd.grad(ref, (q64, k64, v64), dout.double())
    for name, g, r in zip("qkv", grads, ref_grads):
        assert torch.isfinite(g).all(), f"d{name} not finite"
        assert _rel(g, r) < 3e-2, f"d{name}"


@needs_gpu
def test_other_head_dims_refuse_a_tile_choice() -> None:
    q = torch.randn(1, 64, 2, 96, device="cuda", dtype=torch.bfloat16)
    with pytest.raises(ValueError, match="leave them 0"):
        torch.ops.mkernel.attention.default(q, q, q, False, None, 128, 128)


@pytest.mark.parametrize("d,ok", [(16, True), (96, True), (256, True), (20, False), (264, False)])
def test_cuda_head_dim_rule_under_fake_tensors(d: int, ok: bool) -> None:
    """The fake (Meta) kernel applies the CUDA rule: multiples of 8 up to 256."""
    with FakeTensorMode():
        q = torch.empty(1, 8, 2, d, device="cuda", dtype=torch.bfloat16)
        if ok:
            out, lse = torch.ops.mkernel.attention.default(q, q, q, True)
            assert out.shape == q.shape and lse.shape == (1, 2, 8)
        else:
            with pytest.raises(RuntimeError, match=rf"multiple of 8 up to 256 .*got q: \[1, 8, 2, {d}\]"):
                torch.ops.mkernel.attention.default(q, q, q, True)
