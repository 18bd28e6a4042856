"""The small-M (decode) kernel: ``mkernel.gemm`` with config "auto" runs it at
M <= 16, ``torch.ops.mkernel.gemv`` runs one variant (and K split over blocks).
Checked against a float64 reference (cuBLAS DGEMM on the GPU: independent of the
kernel, and cheap enough for many cases) on ragged shapes (K not a multiple of
the kernel's 64-element step, N an odd multiple of 8, so the last block's rows
are clamped), M from 1 to 16, outputs poisoned first, and under CUDA-graph
capture. Per-element errors are bounded too (a wrong column hides in a norm)."""

from __future__ import annotations

import pytest
import torch

import mkernel

from .test_gemm_engine import HOPPER, needs_hopper, poison_next_allocation

REGISTER_VARIANTS = [0, 1, 2, 3, 4, 5, 10, 14, 15]  # gemv_sm90.cu kVariants: register-pipelined
ASYNC_VARIANTS = range(6, 10)  # cp.async: the ones that split K over blocks
VARIANTS = range(16)
ROWS_VARIANTS = range(11, 14)  # row-split: K split over a cluster's blocks (<= 8)
VARIANT_NAMES = ["w2u2r1", "w4u2r1", "w8u2r1", "w16u2r1", "w4u4r1", "w8u2r2",  # gemv_sm90.cu order
                 "w2s6", "w4s4", "w4s8", "w8s4", "w8u1r4", "rows_w8u2", "rows_w16u2", "rows_w8u4", "ks_w8r2", "ks_w16r2"]
DTYPES = [torch.bfloat16, torch.float16]


def operands(m: int, n: int, k: int, dtype, seed: int):
    g = torch.Generator(device="cuda").manual_seed(seed)
    a = torch.randn(m, k, device="cuda", dtype=dtype, generator=g)
    b = torch.randn(n, k, device="cuda", dtype=dtype, generator=g)
    return a, b


def check(out: torch.Tensor, a: torch.Tensor, b: torch.Tensor, what: str = "") -> None:
    """Relative error in norm (< 1e-2) and per element against |a|·|b|ᵀ (< 1e-2:
    bf16 output rounding is 2^-8 of |out| <= |a|·|b|ᵀ)."""
    assert torch.isfinite(out).all(), f"non-finite output (unwritten element?) {what}"
    ref = a.double() @ b.double().T
    err = (out.double() - ref).norm() / ref.norm().clamp_min(1e-30)
    assert err.item() < 1e-2, f"relative error {err.item():.3g} {what}"
    scale = (a.double().abs() @ b.double().abs().T).clamp_min(1e-3)
    worst = ((out.double() - ref).abs() / scale).max().item()
    assert worst < 1e-2, f"element error {worst:.3g} of |a||b| {what}"


def test_gemv_rejects_bad_arguments_on_cpu():
    a, b = torch.randn(17, 16), torch.randn(24, 16)
    with pytest.raises(ValueError, match="1 to 16 rows"):
        torch.ops.mkernel.gemv(a, b)
    with pytest.raises(ValueError, match="variant"):
        torch.ops.mkernel.gemv(a[:2], b, len(VARIANTS))
    with pytest.raises(ValueError, match="splits"):
        torch.ops.mkernel.gemv(a[:2], b, 7, -1)
    ref = a[:3].double() @ b.double().T
    assert ((torch.ops.mkernel.gemv(a[:3], b).double() - ref).norm() / ref.norm()).item() < 1e-6


@needs_hopper
@pytest.mark.gpu
@pytest.mark.parametrize("variant", VARIANTS)
def test_gemv_variant_matches_reference(variant):
    """Every M from 1 to 16 over ragged shapes, both dtypes, in one test per variant."""
    shapes = [(24, 8), (1000, 1000), (136, 72), (1032, 4104)]
    for m in range(1, 17):
        if variant == 3 and m > 8:
            continue  # w16u2r1: one group of A rows only (can_implement says so)
        for n, k in shapes:
            dtype = DTYPES[(m + n) % 2]
            a, b = operands(m, n, k, dtype, seed=m * 131 + n + k)
            ptr = poison_next_allocation((m, n), dtype, "cuda")
            out = torch.ops.mkernel.gemv(a, b, variant)
            assert out.data_ptr() == ptr, "poisoning is not effective"
            check(out, a, b, f"variant {variant} m={m} n={n} k={k} {dtype}")


@needs_hopper
@pytest.mark.gpu
@pytest.mark.parametrize("variant", ASYNC_VARIANTS)
def test_gemv_split_k_matches_reference(variant):
    for splits in (2, 3, 7):
        for m in (1, 7, 12):
            for n, k in [(24, 1000), (1000, 4104), (136, 72)]:
                dtype = DTYPES[(splits + m) % 2]
                a, b = operands(m, n, k, dtype, seed=splits * 17 + m + n + k)
                ptr = poison_next_allocation((m, n), dtype, "cuda")
                out = torch.ops.mkernel.gemv(a, b, variant, splits)
                assert out.data_ptr() == ptr, "poisoning is not effective"
                what = f"variant {variant} splits={splits} m={m} n={n} k={k}"
                check(out, a, b, what)
                # slices are added in a fixed order: the same bits again
                assert torch.equal(out, torch.ops.mkernel.gemv(a, b, variant, splits)), what


@needs_hopper
@pytest.mark.gpu
@pytest.mark.parametrize("variant", ROWS_VARIANTS)
def test_gemv_rows_split_k_matches_reference(variant):
    """Row-split variants: K split over the blocks of a cluster (1 to 8; slices of uneven step
    counts, a slice past a short K), partials added through distributed shared memory in rank
    order: right, and the same bits again."""
    for splits in (1, 2, 3, 5, 8):
        for m in (1, 8, 9, 16):
            for n, k in [(24, 1000), (1000, 4104), (136, 72), (4104, 8200)]:
                dtype = DTYPES[(splits + m + n) % 2]
                a, b = operands(m, n, k, dtype, seed=splits * 19 + m + n + k)
                if splits == 1 and m > 8 and k > 6000:  # 16 rows x 8200 of A: > 227 KB of smem
                    with pytest.raises(ValueError, match="too long for the row-split"):
                        torch.ops.mkernel.gemv(a, b, variant, splits)
                    continue
                ptr = poison_next_allocation((m, n), dtype, "cuda")
                out = torch.ops.mkernel.gemv(a, b, variant, splits)
                assert out.data_ptr() == ptr, "poisoning is not effective"
                what = f"variant {VARIANT_NAMES[variant]} splits={splits} m={m} n={n} k={k} {dtype}"
                check(out, a, b, what)
                assert torch.equal(out, torch.ops.mkernel.gemv(a, b, variant, splits)), what
    a, b = operands(16, 64, 256, torch.bfloat16, seed=2)
    with pytest.raises(ValueError, match="at most 8 blocks"):
        torch.ops.mkernel.gemv(a, b, variant, 9)


@needs_hopper
@pytest.mark.gpu
def test_gemv_split_k_workspace_comes_back_to_zero():
    """Shapes and split counts alternate on one stream's workspace, with the engine's own
    split-K (same ticket area) in between: a ticket left non-zero would make a tile's
    partials be summed before they are all there."""
    cases = [(3, 1032, 8192, 5), (8, 24, 2048, 3), (1, 4104, 1024, 2), (16, 520, 3000, 4)]
    for rep in range(3):
        for m, n, k, splits in cases:
            a, b = operands(m, n, k, torch.bfloat16, seed=rep * 7 + n)
            check(torch.ops.mkernel.gemv(a, b, 7, splits), a, b, f"rep {rep} {(m, n, k, splits)}")
        a, b = operands(130, 520, 1000, torch.bfloat16, seed=rep)
        check(mkernel.gemm(a, b, config="coop_128x128_c2x1", splits=3), a, b, "engine split-K")


def test_gemv_rejects_split_k_on_register_variants():
    if not HOPPER:
        pytest.skip("needs a Hopper (sm_90) GPU: the check is the kernel's")
    a, b = operands(2, 64, 256, torch.bfloat16, seed=1)
    with pytest.raises(ValueError, match="only the cp.async GEMV variants split K"):
        torch.ops.mkernel.gemv(a, b, 1, 2)


@needs_hopper
@pytest.mark.gpu
@pytest.mark.parametrize("dtype", DTYPES)
def test_auto_runs_gemv_at_small_m_with_same_bits(dtype):
    """Up to 8 rows auto runs the GEMV's by-shape plan; from 9 to 16 the small-M tuner's choice
    (a GEMV variant, the swapped GEMM or the engine: test_gemm_swap.py), the same bits again."""
    for m, (n, k) in [(1, (3000, 2056)), (3, (3000, 2056)), (8, (1280, 8192)), (16, (3000, 2056))]:
        a, b = operands(m, n, k, dtype, seed=7 + m)
        plan = mkernel.gemm_plan(a, b)
        assert plan.startswith("gemv/") or m > 8, plan
        ptr = poison_next_allocation((m, n), dtype, "cuda")
        out = mkernel.gemm(a, b)
        assert out.data_ptr() == ptr
        check(out, a, b, f"auto m={m} plan {plan}")
        if m <= 8:
            assert torch.equal(out, torch.ops.mkernel.gemv(a, b))  # the by-shape plan
        elif plan.startswith("gemv/"):  # the tuned variant, named by gemm_plan
            name, _, splits = plan.split()[0][5:].partition("/k")
            variant = VARIANT_NAMES.index(name)
            assert torch.equal(out, torch.ops.mkernel.gemv(a, b, variant, int(splits or 1))), plan
        assert torch.equal(out, mkernel.gemm(a, b))  # reproducible
        # an explicit config keeps the tile engine
        check(mkernel.gemm(a, b, config="ping_64x128_c1x1"), a, b, "explicit config")
    a17 = torch.randn(17, 2056, device="cuda", dtype=dtype)
    b = torch.randn(1000, 2056, device="cuda", dtype=dtype)
    assert not mkernel.gemm_plan(a17, b).startswith("gemv/")


@needs_hopper
@pytest.mark.gpu
def test_gemv_on_decode_shapes():
    for n, k in [(8192, 8192), (1280, 8192), (8192, 1024)]:
        for m in (4, 16):
            a, b = operands(m, n, k, torch.bfloat16, seed=n + k + m)
            for v in VARIANTS:
                if v == 3 and m > 8:
                    continue
                check(torch.ops.mkernel.gemv(a, b, v), a, b, f"variant {v} {(m, n, k)}")
            check(mkernel.gemm(a, b), a, b, f"auto {(m, n, k)} {mkernel.gemm_plan(a, b)}")


@needs_hopper
@pytest.mark.gpu
@pytest.mark.parametrize("m,n", [(1, 1032), (5, 1032), (13, 1032), (2, 264)])
def test_gemv_under_cuda_graph_capture(m, n):
    """(2, 264) plans a K split: its workspace is set up outside capture by the first call."""
    k = 3080
    a, b = operands(m, n, k, torch.bfloat16, seed=m)
    stream = torch.cuda.Stream()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.stream(stream):
        mkernel.gemm(a, b)  # load the kernel (and size the workspace) outside capture
        stream.synchronize()
        with torch.cuda.graph(graph, stream=stream):
            out = mkernel.gemm(a, b)
    for seed in (1, 2):  # new inputs between replays; the output buffer is reused
        a.copy_(torch.randn(a.shape, generator=torch.Generator().manual_seed(seed)).to(a))
        b.copy_(torch.randn(b.shape, generator=torch.Generator().manual_seed(seed + 9)).to(b))
        out.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        check(out, a, b, f"graph replay {seed}")
