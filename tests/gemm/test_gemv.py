"""The small-M (decode) kernel: ``mkernel.gemm`` with config "auto" runs it at
M <= 8, ``torch.ops.mkernel.gemv`` runs one variant. Checked against a float64
reference on ragged shapes (K not a multiple of the kernel's 64-element step,
N an odd multiple of 8, so the last block's rows are clamped), every M of
1..8 class, outputs poisoned first, and under CUDA-graph capture."""

from __future__ import annotations

import pytest
import torch

import mkernel

from .test_gemm_engine import needs_hopper, poison_next_allocation, reference, rel_err

VARIANTS = range(10)  # gemv_sm90.cu kVariants: 0-5 register-pipelined, 6-9 cp.async
DTYPES = [torch.bfloat16, torch.float16]


def operands(m: int, n: int, k: int, dtype, seed: int):
    g = torch.Generator(device="cuda").manual_seed(seed)
    a = torch.randn(m, k, device="cuda", dtype=dtype, generator=g)
    b = torch.randn(n, k, device="cuda", dtype=dtype, generator=g)
    return a, b


def test_gemv_rejects_bad_arguments_on_cpu():
    a, b = torch.randn(9, 16), torch.randn(24, 16)
    with pytest.raises(ValueError, match="1 to 8 rows"):
        torch.ops.mkernel.gemv(a, b)
    with pytest.raises(ValueError, match="variant"):
        torch.ops.mkernel.gemv(a[:2], b, len(VARIANTS))
    assert rel_err(torch.ops.mkernel.gemv(a[:3], b), reference(a[:3], b)) < 1e-6


@needs_hopper
@pytest.mark.gpu
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("n,k", [(24, 8), (1000, 1000), (8200, 4104), (136, 72)])
@pytest.mark.parametrize("m", [1, 2, 3, 7, 8])
@pytest.mark.parametrize("variant", VARIANTS)
def test_gemv_variant_matches_reference(variant, m, n, k, dtype):
    a, b = operands(m, n, k, dtype, seed=m * 131 + n + k)
    ptr = poison_next_allocation((m, n), dtype, "cuda")
    out = torch.ops.mkernel.gemv(a, b, variant)
    assert out.data_ptr() == ptr, "poisoning is not effective"
    assert rel_err(out, reference(a, b)) < 1e-2
    # per-element bound too (a wrong column would hide in the norm of a wide output)
    ref = reference(a, b)
    scale = (a.double().abs().cpu() @ b.double().abs().cpu().T).clamp_min(1e-3)
    assert ((out.double().cpu() - ref).abs() / scale).max().item() < 1e-2


@needs_hopper
@pytest.mark.gpu
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("m", [1, 3, 8])
def test_auto_runs_gemv_at_small_m_with_same_bits(m, dtype):
    n, k = 3000, 2056
    a, b = operands(m, n, k, dtype, seed=7 + m)
    plan = mkernel.gemm_plan(a, b)
    assert plan.startswith("gemv/"), plan
    ptr = poison_next_allocation((m, n), dtype, "cuda")
    out = mkernel.gemm(a, b)
    assert out.data_ptr() == ptr
    assert rel_err(out, reference(a, b)) < 1e-2
    assert torch.equal(out, torch.ops.mkernel.gemv(a, b))  # the by-shape variant
    assert torch.equal(out, mkernel.gemm(a, b))  # reproducible
    # an explicit config keeps the tile engine; past 8 rows auto does too
    assert rel_err(mkernel.gemm(a, b, config="ping_64x128_c1x1"), reference(a, b)) < 1e-2
    a9 = torch.randn(9, k, device="cuda", dtype=dtype)
    assert not mkernel.gemm_plan(a9, b).startswith("gemv/")


@needs_hopper
@pytest.mark.gpu
@pytest.mark.parametrize("n,k", [(8192, 8192), (10240, 8192), (8192, 1024)])
def test_gemv_on_decode_shapes(n, k):
    a, b = operands(4, n, k, torch.bfloat16, seed=n + k)
    outs = [torch.ops.mkernel.gemv(a, b, v) for v in VARIANTS]
    for v, out in zip(VARIANTS, outs):
        assert rel_err(out, reference(a, b)) < 1e-2, f"variant {v}"


@needs_hopper
@pytest.mark.gpu
@pytest.mark.parametrize("m", [1, 5])
def test_gemv_under_cuda_graph_capture(m):
    n, k = 1032, 3080
    a, b = operands(m, n, k, torch.bfloat16, seed=m)
    stream = torch.cuda.Stream()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.stream(stream):
        mkernel.gemm(a, b)  # load the kernel outside capture
        stream.synchronize()
        with torch.cuda.graph(graph, stream=stream):
            out = mkernel.gemm(a, b)
    for seed in (1, 2):  # new inputs between replays; the output buffer is reused
        a.copy_(torch.randn(a.shape, generator=torch.Generator().manual_seed(seed)).to(a))
        b.copy_(torch.randn(b.shape, generator=torch.Generator().manual_seed(seed + 9)).to(b))
        out.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        assert rel_err(out, reference(a, b)) < 1e-2
