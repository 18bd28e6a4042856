"""The CPU reference kernel of mkernel.attention (fp32, host) against a direct float64
softmax; the op's schema, fake kernel and autograd (opcheck); gradients vs torch autograd."""

from __future__ import annotations

import pytest
import torch

import mkernel

from .reference import attention_ref, lse_ref

SHAPES = [  # (b, s, s_kv, h, h_kv, d)
    (1, 1, 1, 1, 1, 64),
    (2, 17, 17, 4, 4, 64),
    (1, 33, 70, 8, 2, 32),   # s < s_kv, GQA
    (1, 70, 33, 6, 1, 16),   # s > s_kv (causal: leading rows see no key), MQA
    (2, 129, 129, 2, 2, 128),
]


def _rel(a: torch.Tensor, b: torch.Tensor) -> float:
    return ((a.double() - b.double()).norm() / b.double().norm().clamp_min(1e-30)).item()


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("shape", SHAPES)
def test_cpu_reference_matches_float64(shape, causal) -> None:
    b, s, s_kv, h, h_kv, d = shape
    gen = torch.Generator().manual_seed(hash((shape, causal)) % 2**31)
    q = torch.randn(b, s, h, d, generator=gen)
    k = torch.randn(b, s_kv, h_kv, d, generator=gen)
    v = torch.randn(b, s_kv, h_kv, d, generator=gen)
    out, lse = mkernel.attention(q, k, v, causal=causal)
    ref_out, ref_lse = attention_ref(q, k, v, causal)
    assert out.shape == (b, s, h, d) and out.dtype == torch.float32
    assert lse.shape == (b, h, s) and lse.dtype == torch.float32
    assert _rel(out, ref_out) < 1e-5
    finite = torch.isfinite(ref_lse)
    assert torch.equal(torch.isfinite(lse), finite)
    assert torch.allclose(lse[finite].double(), ref_lse[finite], rtol=1e-5, atol=1e-5)
    assert torch.all(out.double()[~finite.permute(0, 2, 1)] == 0)


def test_cpu_reference_scale_and_dtypes() -> None:
    gen = torch.Generator().manual_seed(7)
    q = torch.randn(1, 9, 2, 64, generator=gen).bfloat16()
    k = torch.randn(1, 11, 2, 64, generator=gen).bfloat16()
    v = torch.randn(1, 11, 2, 64, generator=gen).bfloat16()
    out, lse = mkernel.attention(q, k, v, softmax_scale=0.3)
    ref_out, ref_lse = attention_ref(q, k, v, False, 0.3)
    assert out.dtype == torch.bfloat16
    assert _rel(out, ref_out) < 1e-2
    assert torch.allclose(lse.double(), ref_lse, rtol=1e-5, atol=1e-5)


def test_bad_inputs_name_the_argument() -> None:
    q = torch.randn(1, 8, 4, 64)
    with pytest.raises(RuntimeError, match="multiple of k's head count"):
        mkernel.attention(q, torch.randn(1, 8, 3, 64), torch.randn(1, 8, 3, 64))
    with pytest.raises(RuntimeError, match="v must have the shape of k"):
        mkernel.attention(q, torch.randn(1, 8, 4, 64), torch.randn(1, 9, 4, 64))
    with pytest.raises(ValueError, match="softmax_scale"):
        mkernel.attention(q, q, q, softmax_scale=-1.0)


def test_opcheck() -> None:
    gen = torch.Generator().manual_seed(3)
    q = torch.randn(1, 5, 4, 16, generator=gen, requires_grad=True)
    k = torch.randn(1, 7, 2, 16, generator=gen, requires_grad=True)
    v = torch.randn(1, 7, 2, 16, generator=gen, requires_grad=True)
    torch.library.opcheck(torch.ops.mkernel.attention.default, (q, k, v, True, None, 0, 0))


@pytest.mark.parametrize("causal", [False, True])
def test_cpu_gradients_match_autograd(causal) -> None:
    gen = torch.Generator().manual_seed(11)
    shape_q, shape_kv = (2, 13, 4, 32), (2, 19, 2, 32)
    q = torch.randn(*shape_q, generator=gen, dtype=torch.float64).float().requires_grad_()
    k = torch.randn(*shape_kv, generator=gen, dtype=torch.float64).float().requires_grad_()
    v = torch.randn(*shape_kv, generator=gen, dtype=torch.float64).float().requires_grad_()
    dout = torch.randn(*shape_q, generator=gen)
    out, _ = mkernel.attention(q, k, v, causal=causal)
    grads = torch.autograd.grad(out, (q, k, v), dout)
    q64, k64, v64 = (x.detach().double().requires_grad_() for x in (q, k, v))
    ref, _ = attention_ref(q64, k64, v64, causal)
    ref_grads = torch.autograd.grad(ref, (q64, k64, v64), dout.double())
    for g, r in zip(grads, ref_grads):
        assert _rel(g, r) < 1e-5


@pytest.mark.parametrize("setting", ["auto", "torch", "flash"])
def test_backward_choice_on_the_cpu_is_the_math_backward(setting, monkeypatch) -> None:
    """CPU tensors differentiate through the fp32 math backward whatever the CUDA backward
    setting (mkernel.ops.ATTENTION_BACKWARD picks among CUDA kernels only)."""
    monkeypatch.setattr(mkernel.ops, "ATTENTION_BACKWARD", setting)
    q = torch.randn(1, 8, 4, 64, dtype=torch.bfloat16)
    k = torch.randn(1, 8, 2, 64, dtype=torch.bfloat16)
    for causal in (False, True):
        assert mkernel.ops._attention_backward_choice(q, k, k, causal) == "math"


def test_backward_choice_is_worked_out_once_per_key(monkeypatch) -> None:
    """The choice is cached whole: the same problem asks the uncached choice once; another
    shape, stride, causal flag, setting (module or environment) or torch flag asks anew; an
    unhashable (symbolic) size bypasses the cache."""
    calls = []
    real = mkernel.ops._attention_backward_choice_uncached

    def counting(q, k, v, causal):
        calls.append((tuple(q.shape), causal))
        return real(q, k, v, causal)

    monkeypatch.setattr(mkernel.ops, "_attention_backward_choice_uncached", counting)
    mkernel.ops._BACKWARD_CHOICES.clear()
    q = torch.randn(1, 8, 4, 64, dtype=torch.bfloat16)
    k = torch.randn(1, 8, 2, 64, dtype=torch.bfloat16)
    choose = mkernel.ops._attention_backward_choice
    assert choose(q, k, k, True) == "math" and choose(q, k, k, True) == "math"
    assert len(calls) == 1
    choose(q.transpose(1, 2).contiguous().transpose(1, 2), k, k, True)  # other strides
    choose(q[:, :7], k, k, True)  # another shape
    choose(q, k, k, False)  # not causal
    assert len(calls) == 4
    monkeypatch.setattr(mkernel.ops, "ATTENTION_BACKWARD", "flash")
    choose(q, k, k, True)
    monkeypatch.setenv("MKERNEL_ATTN_BWD", "torch")
    choose(q, k, k, True)
    assert len(calls) == 6
    choose(q, k, k, True)
    assert len(calls) == 6

    class Unhashable(tuple):
        __hash__ = None  # type: ignore[assignment]

    class Symbolic:  # stands for a tensor whose sizes are symbolic (torch.compile)
        shape = Unhashable(q.shape)
        is_cuda, dtype, device = False, q.dtype, q.device

        def stride(self):
            return q.stride()

    assert choose(Symbolic(), k, k, True) == "math"  # type: ignore[arg-type]
    assert len(calls) == 7 and len(mkernel.ops._BACKWARD_CHOICES) == 6


@pytest.mark.parametrize("split", [1, 40, 99])
def test_merge_of_kv_blocks_equals_full_attention(split) -> None:
    """attention(q, [k1; k2]) == merge(attention(q, k1), attention(q, k2)) (the ring step)."""
    gen = torch.Generator().manual_seed(split)
    q = torch.randn(2, 31, 4, 32, generator=gen)
    k = torch.randn(2, 100, 2, 32, generator=gen)
    v = torch.randn(2, 100, 2, 32, generator=gen)
    out1, lse1 = mkernel.attention(q, k[:, :split].contiguous(), v[:, :split].contiguous())
    out2, lse2 = mkernel.attention(q, k[:, split:].contiguous(), v[:, split:].contiguous())
    acc, acc_lse = out1.clone(), lse1.clone()
    mkernel.ops.attention_merge_(acc, acc_lse, out2, lse2)
    ref, ref_lse = attention_ref(q, k, v, False)
    assert _rel(acc, ref) < 1e-5
    assert torch.allclose(acc_lse.double(), ref_lse, rtol=1e-5, atol=1e-5)


def test_merge_into_empty_rows() -> None:
    """A running result with lse = -inf everywhere (no block yet) takes the partial as is."""
    gen = torch.Generator().manual_seed(1)
    part = torch.randn(1, 5, 2, 8, generator=gen)
    part_lse = torch.randn(1, 2, 5, generator=gen)
    acc = torch.zeros(1, 5, 2, 8)
    acc_lse = torch.full((1, 2, 5), float("-inf"))
    mkernel.ops.attention_merge_(acc, acc_lse, part, part_lse)
    assert torch.allclose(acc, part) and torch.allclose(acc_lse, part_lse)


def test_torch_compile_fullgraph() -> None:
    """The op traces (fake kernel) and runs under torch.compile without graph breaks."""
    gen = torch.Generator().manual_seed(2)
    q = torch.randn(1, 12, 4, 16, generator=gen)
    k = torch.randn(1, 12, 2, 16, generator=gen)
    v = torch.randn(1, 12, 2, 16, generator=gen)

    def f(q, k, v):
        out, lse = mkernel.attention(q, k, v, causal=True)
        return out * 2, lse

    got = torch.compile(f, fullgraph=True, backend="aot_eager")(q, k, v)
    want = f(q, k, v)
    assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])


@pytest.mark.parametrize("causal", [False, True])
def test_empty_batch_gives_empty_results(causal) -> None:
    """b = 0: empty out [0, s, h, d] and lse [0, h, s], empty gradients (the CUDA path the same,
    tests/attention/test_attention_engine.py)."""
    q = torch.randn(0, 5, 4, 16, requires_grad=True)
    k = torch.randn(0, 7, 2, 16, requires_grad=True)
    v = torch.randn(0, 7, 2, 16, requires_grad=True)
    out, lse = mkernel.attention(q, k, v, causal=causal)
    assert out.shape == (0, 5, 4, 16) and lse.shape == (0, 4, 5)
    dq, dk, dv = torch.autograd.grad(out, (q, k, v), torch.ones_like(out))
    assert dq.shape == q.shape and dk.shape == k.shape and dv.shape == v.shape


@pytest.mark.parametrize("loss", ["out+lse", "lse"])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("shape", SHAPES[1:])
def test_cpu_gradients_through_lse(shape, causal, loss) -> None:
    """A loss that reads lse (merging partial attentions in torch, as ring-attention recipes
    do): dq / dk against float64 autograd, dv from out's term only; rows that see no key weigh
    nothing (their lse is -inf)."""
    b, s, s_kv, h, h_kv, d = shape
    gen = torch.Generator().manual_seed(hash((shape, causal, loss)) % 2**31)
    q = torch.randn(b, s, h, d, generator=gen).requires_grad_()
    k = torch.randn(b, s_kv, h_kv, d, generator=gen).requires_grad_()
    v = torch.randn(b, s_kv, h_kv, d, generator=gen).requires_grad_()
    dout = torch.randn(b, s, h, d, generator=gen) if loss == "out+lse" else None
    dlse = torch.randn(b, h, s, generator=gen)
    out, lse = mkernel.attention(q, k, v, causal=causal)
    dlse = dlse.masked_fill(torch.isneginf(lse.detach()), 0.0)
    total = (lse * dlse).sum() + (0 if dout is None else (out * dout).sum())
    grads = torch.autograd.grad(total, (q, k, v), allow_unused=True)
    q64, k64, v64 = (x.detach().double().requires_grad_() for x in (q, k, v))
    ref_total = (lse_ref(q64, k64, causal) * dlse.double()).sum()
    if dout is not None:
        ref_total = ref_total + (attention_ref(q64, k64, v64, causal)[0] * dout.double()).sum()
    ref_grads = torch.autograd.grad(ref_total, (q64, k64, v64), allow_unused=True)
    for name, g, r in zip("qkv", grads, ref_grads):
        if r is None:  # lse alone: v gets no gradient
            assert g is None or torch.count_nonzero(g) == 0, name
            continue
        assert _rel(g, r) < 1e-5, (name, _rel(g, r))


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("shape", SHAPES[1:])
def test_lse_gradient_through_the_kernels_route(shape, causal) -> None:
    """The route CUDA takes for lse's gradient (ops._attention_lse_backward: dq from a forward
    with v := k, dk from the dV of a backward fed dO := dlse·q), run here on the CPU ops: the
    same dq / dk as float64 autograd of lse."""
    b, s, s_kv, h, h_kv, d = shape
    gen = torch.Generator().manual_seed(hash((shape, causal, "route")) % 2**31)
    q = torch.randn(b, s, h, d, generator=gen)
    k = torch.randn(b, s_kv, h_kv, d, generator=gen)
    v = torch.randn(b, s_kv, h_kv, d, generator=gen)
    out, lse = mkernel.attention(q, k, v, causal=causal)
    dlse = torch.randn(b, h, s, generator=gen).masked_fill(torch.isneginf(lse), 0.0)
    dq, dk = mkernel.ops._attention_lse_backward(dlse, q, k, v, out, lse, causal, d ** -0.5)
    q64, k64 = (x.double().requires_grad_() for x in (q, k))
    ref_dq, ref_dk = torch.autograd.grad((lse_ref(q64, k64, causal) * dlse.double()).sum(), (q64, k64))
    assert dq.dtype == dk.dtype == torch.float32
    assert _rel(dq, ref_dq) < 1e-5 and _rel(dk, ref_dk) < 1e-5


@pytest.mark.parametrize("loss", ["out", "out+lse"])
def test_eager_autograd_is_the_registered_one(loss) -> None:
    """mkernel.attention's eager autograd (ops._AttentionFunction, the lighter host path) and the
    op's registration (a direct torch.ops call, as traced code runs it) give the same outputs and
    gradients bit for bit."""
    gen = torch.Generator().manual_seed(23)
    q = torch.randn(2, 9, 4, 16, generator=gen)
    k = torch.randn(2, 11, 2, 16, generator=gen)
    v = torch.randn(2, 11, 2, 16, generator=gen)
    dout, dlse = torch.randn(2, 9, 4, 16, generator=gen), torch.randn(2, 4, 9, generator=gen)
    results = []
    for call in (lambda *a: mkernel.attention(*a, causal=True),
                 lambda *a: torch.ops.mkernel.attention.default(*a, True, None, 0, 0)):
        leaves = [x.clone().requires_grad_() for x in (q, k, v)]
        out, lse = call(*leaves)
        assert out.grad_fn is not None and lse.grad_fn is not None
        total = (out * dout).sum() + ((lse * dlse).sum() if loss == "out+lse" else 0)
        results.append([out.detach(), lse.detach(), *torch.autograd.grad(total, leaves)])
    assert type(mkernel.attention(*[x.requires_grad_() for x in (q, k, v)])[0].grad_fn).__name__.startswith(
        "_AttentionFunction")
    for a, b in zip(*results):
        assert torch.equal(a, b)
