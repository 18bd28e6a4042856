"""mkernel.ring_attention: q [b, s, h, d], k/v [b, s_kv, h_kv, d]
-> (out [b, s, h, d], lse [b, h, s] fp32)."""

from __future__ import annotations

import pytest
import torch

from .helpers import (
    VALIDATION_MODES,
    assert_bad_input_raises,
    assert_fake_cuda_rejects_fp32,
    assert_rejects_input_on_other_device,
    assert_tensor,
    bad,
    bad_world_size_and_group,
    compile_and_run,
    fake_mode,
    group,
    opcheck_or_missing,
    requires_cuda,
    strided,
    t,
)
from .references import WORLD_ONE, attention_reference, check_ring_attention_world_one, rel_err

# (b, s, s_kv, h, h_kv, d, W): ragged shards, GQA and MQA, one token, head dims 64/128/80.
SHAPES = [
    (2, 37, 37, 8, 8, 64, 4),
    (1, 129, 129, 16, 4, 128, 8),
    (3, 1, 1, 4, 1, 80, 2),
    (1, 100, 50, 6, 2, 128, 1),
]


def op():
    return torch.ops.mkernel.ring_attention.default


def qkv(device, b, s, s_kv, h, h_kv, d, dtype=torch.bfloat16):
    return (
        t((b, s, h, d), device, dtype),
        t((b, s_kv, h_kv, d), device, dtype),
        t((b, s_kv, h_kv, d), device, dtype),
    )


@pytest.mark.parametrize("device", ["cpu", "cuda"])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("b, s, s_kv, h, h_kv, d, world", SHAPES)
def test_fake_shapes(device, dtype, causal, b, s, s_kv, h, h_kv, d, world):
    with fake_mode():
        out, lse = op()(*qkv(device, b, s, s_kv, h, h_kv, d, dtype), 1, world, causal, 0.125)
    assert_tensor(out, (b, s, h, d), dtype, device)
    assert_tensor(lse, (b, h, s), torch.float32, device)


@pytest.mark.parametrize("backend", ["eager", "aot_eager"])
def test_compile_dynamic(ops, backend):
    g = group(4)

    def fn(q, k, v):
        return ops.ring_attention(q, k, v, causal=True, group=g)

    cases = [qkv("meta", 2, s, s, 8, 2, 64) for s in (37, 100, 129)]
    outs, frames = compile_and_run(fn, cases, backend=backend, dynamic=True)
    assert frames == 1, "a ragged sequence shard must not recompile under dynamic shapes"
    for (q, _, _), (out, lse) in zip(cases, outs, strict=True):
        assert_tensor(out, q.shape, torch.bfloat16, "meta")
        assert_tensor(lse, (2, 8, q.shape[1]), torch.float32, "meta")


def test_compile_world_one_matches_reference(ops):
    """Compiled (fake kernel while tracing), then the CPU kernel at W = 1 against float64."""
    compiled = torch.compile(lambda q, k, v: ops.ring_attention(q, k, v, causal=True, group=WORLD_ONE),
                             fullgraph=True, backend="eager")
    torch._dynamo.reset()
    g = torch.Generator().manual_seed(5)
    q, k, v = (torch.randn(1, 8, 4, 16, generator=g), torch.randn(1, 8, 2, 16, generator=g),
               torch.randn(1, 8, 2, 16, generator=g))
    out, lse = compiled(q, k, v)
    ref_out, ref_lse = attention_reference(q, k, v, causal=True, scale=16 ** -0.5)
    assert rel_err(out, ref_out) < 1e-5 and rel_err(lse, ref_lse) < 1e-5


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
def test_cpu_world_one_matches_reference(ops, dtype, causal):
    check_ring_attention_world_one(ops, "cpu", dtype, causal)


def test_opcheck_cpu_world_one():
    """opcheck on real CPU tensors (on meta tensors it checks nothing: test_opcheck_real.py)."""
    g = torch.Generator().manual_seed(9)
    args = (torch.randn(1, 9, 4, 16, generator=g), torch.randn(1, 9, 2, 16, generator=g),
            torch.randn(1, 9, 2, 16, generator=g), 0, 1, True, 0.25)
    opcheck_or_missing(op(), args)


@requires_cuda
@pytest.mark.parametrize("head_dim", [64, 128])  # the CUDA engine's head dims
@pytest.mark.parametrize("causal", [False, True])
def test_cuda_world_one_matches_reference(ops, causal, head_dim):
    check_ring_attention_world_one(ops, "cuda", torch.bfloat16, causal, head_dim)


@requires_cuda
def test_cuda_rejects_a_head_dim_it_has_no_kernel_for(ops):
    """d = 20 runs on the CPU but has no CUDA kernel (the engine's 64 / 128, torch's FA2 kernel
    for the other multiples of 8 up to 256): a clear error naming q's shape."""
    q = torch.randn(1, 8, 4, 20, device="cuda", dtype=torch.bfloat16)
    k = torch.randn(1, 8, 2, 20, device="cuda", dtype=torch.bfloat16)
    with pytest.raises(ValueError, match=r"multiple of 8 up to 256 .*got q: \[1, 8, 4, 20\]"):
        ops.ring_attention(q, k, k.clone(), causal=False, group=WORLD_ONE)


@requires_cuda
@pytest.mark.parametrize("causal", [False, True])
def test_cuda_world_one_other_head_dims_match_reference(ops, causal):
    """At world size 1 the ring is the attention op, whose head dims other than 64 / 128 run
    torch's FA2 kernel: d = 16 and 96 against the reference."""
    for head_dim in (16, 96):
        check_ring_attention_world_one(ops, "cuda", torch.bfloat16, causal, head_dim)


def _args(
    d,
    *,
    q=(2, 8, 4, 16),
    k=(2, 8, 2, 16),
    v=None,
    dtype=torch.bfloat16,
    k_dtype=None,
    v_dtype=None,
    group=1,
    world=2,
    causal=False,
    scale=None,
    q_fn=t,
    k_fn=t,
    v_fn=t,
):
    return (
        q_fn(q, d, dtype),
        k_fn(k, d, k_dtype or dtype),
        v_fn(v or k, d, v_dtype or dtype),
        group,
        world,
        causal,
        scale,
    )


OP = r"mkernel\.ring_attention"
BAD_INPUTS = [
    *bad_world_size_and_group(OP),
    bad(
        "softmax_scale_zero",
        ValueError,
        rf"{OP}: softmax_scale must be a finite number > 0",
        scale=0.0,
    ),
    bad(
        "softmax_scale_nan",
        ValueError,
        rf"{OP}: softmax_scale must be a finite number > 0",
        scale=float("nan"),
    ),
    bad(
        "q_dim",
        RuntimeError,
        rf"{OP}: q must be a 4-D tensor \[b, s, h, d\], got 3-D \[8, 4, 16\]",
        q=(8, 4, 16),
    ),
    bad(
        "k_dim",
        RuntimeError,
        rf"{OP}: k must be a 4-D tensor \[b, s_kv, h_kv, d\], got 3-D \[2, 8, 32\]",
        k=(2, 8, 32),
        v=(2, 8, 2, 16),
    ),
    bad(
        "v_dim",
        RuntimeError,
        rf"{OP}: v must be a 4-D tensor \[b, s_kv, h_kv, d\], got 3-D \[2, 8, 32\]",
        v=(2, 8, 32),
    ),
    bad("q_dtype", RuntimeError, rf"{OP}: q must be bf16 or fp16 .*got fp64", dtype=torch.float64),
    bad(
        "k_dtype",
        RuntimeError,
        rf"{OP}: k must have the dtype of q \(q: bf16, k: fp16\)",
        k_dtype=torch.float16,
    ),
    bad(
        "v_dtype",
        RuntimeError,
        rf"{OP}: v must have the dtype of q \(q: bf16, v: fp32\)",
        v_dtype=torch.float32,
    ),
    bad(
        "batch",
        RuntimeError,
        rf"{OP}: k must have the batch size b of q \(q: \[2, 8, 4, 16\], k: \[3, 8, 2, 16\]\)",
        k=(3, 8, 2, 16),
    ),
    bad(
        "head_dim",
        RuntimeError,
        rf"{OP}: k must have the head dim d of q \(q: \[2, 8, 4, 16\], k: \[2, 8, 2, 32\]\)",
        k=(2, 8, 2, 32),
    ),
    bad(
        "no_kv_heads",
        RuntimeError,
        rf"{OP}: k must have at least one head \(h_kv >= 1\)",
        k=(2, 8, 0, 16),
    ),
    bad(
        "gqa",
        RuntimeError,
        rf"{OP}: q's head count h must be a multiple of k's head count h_kv .*"
        rf"\(q: \[2, 8, 4, 16\], k: \[2, 8, 3, 16\]\)",
        k=(2, 8, 3, 16),
    ),
    bad(
        "v_shape",
        RuntimeError,
        rf"{OP}: v must have the shape of k \(k: \[2, 8, 2, 16\], v: \[2, 9, 2, 16\]\)",
        v=(2, 9, 2, 16),
    ),
    bad("q_strided", RuntimeError, rf"{OP}: q must be row-major contiguous", q_fn=strided),
    bad("k_strided", RuntimeError, rf"{OP}: k must be row-major contiguous", k_fn=strided),
    bad("v_strided", RuntimeError, rf"{OP}: v must be row-major contiguous", v_fn=strided),
]


@pytest.mark.parametrize("mode", VALIDATION_MODES)
@pytest.mark.parametrize("overrides, exc, match", BAD_INPUTS)
def test_bad_input(mode, overrides, exc, match):
    assert_bad_input_raises(mode, op(), lambda d: _args(d, **overrides), exc, match)


@pytest.mark.parametrize("arg", ["k", "v"])
def test_bad_device(arg):
    assert_rejects_input_on_other_device(op(), _args("cpu"), ("q", "k", "v"), arg, OP)


def test_fake_cuda_rejects_fp32():
    assert_fake_cuda_rejects_fp32(
        op(),
        lambda: _args("cuda", dtype=torch.float32),
        rf"{OP}: q must be bf16 or fp16 on CUDA, got fp32",
    )
