"""The swapped-operand GEMM (``torch.ops.mkernel.gemm_swap``: D = A·Bᵀ computed as (B·Aᵀ)ᵀ with
A's rows on the MMA's N) and the small-M routing of ``mkernel.gemm`` (config "auto" runs what
the small-M tuner measured fastest at 9 <= M <= 512: the engine's plan, a swapped variant or,
up to 16 rows, a GEMV variant).

Every variant at M in {1, 9, 16, 17, 64, 333} (and a token tile's edges) over ragged N and K
(N an odd multiple of 8, K not a multiple of the 64-deep k-block), both dtypes, outputs
poisoned first and proven reused, against a float64 reference (cuBLAS DGEMM on the GPU:
independent of the kernel), per element too (a wrong column hides in a norm)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

import mkernel

from .checks import assert_tiles_close, poisoned_call
from .test_gemm_engine import needs_hopper

# A dev build (setup.py, MKERNEL_DEV_BUILD=1) leaves the variants out: the tests that pin one skip.
needs_variants = pytest.mark.skipif(
    (Path(mkernel.__file__).parent / "_dev_build").exists(),
    reason="a dev build (MKERNEL_DEV_BUILD=1) has no swapped-operand GEMM variants")

VARIANTS = ["swap_128x176_c2x1", "swap_128x176_streamk", "swap_128x64_streamk",
            "swap_128x128_streamk", "swap_128x176_c2x2", "swap_128x192_c2x1",
            "swap_64x64_ping", "swap_64x16_ping", "swap_128x16_streamk", "swap_128x112_streamk",
            "swap_64x176_ping", "swap_256x176_streamk", "swap_256x176_k2", "swap_128x176_sk",
            "swap_256x176_k4", "swap_64x16k256_ping", "swap_128x176_k2", "swap_128x176_tk",
            "swap_128x112_tk", "swap_128x112k128_tk",
            "swap_256x112_tk", "swap_128x336_wide",
            "swap_128x176_c1x2", "swap_64x176_c4x2",
            "swap_128x168", "swap_128x168_c1x2", "swap_128x168_c2x1", "swap_64x168_c4x2",
            "swap_64x168_c1x2", "swap_128x176_ds", "swap_64x176_c4x2_ds",
            "swap_128x168_c1x2_h", "swap_64x168_c4x2_h"]  # gemm_swap_dispatch.cu order
GEMV_NAMES = ["w2u2r1", "w4u2r1", "w8u2r1", "w16u2r1", "w4u4r1", "w8u2r2",  # gemv_sm90.cu order
              "w2s6", "w4s4", "w4s8", "w8s4", "w8u1r4", "rows_w8u2", "rows_w16u2", "rows_w8u4", "ks_w8r2", "ks_w16r2"]
DTYPES = [torch.bfloat16, torch.float16]
MS = [1, 9, 16, 17, 64, 65, 176, 177, 333]
SHAPES = [(1032, 1000), (136, 72), (3576, 4104)]  # (N, K): ragged N and K


def operands(m: int, n: int, k: int, dtype, seed: int):
    g = torch.Generator(device="cuda").manual_seed(seed)
    a = torch.randn(m, k, device="cuda", dtype=dtype, generator=g)
    b = torch.randn(n, k, device="cuda", dtype=dtype, generator=g)
    return a, b


def check(out: torch.Tensor, a: torch.Tensor, b: torch.Tensor, what: str = "") -> None:
    """Relative error in norm (< 1e-2) and per element against |a|·|b|ᵀ (< 1e-2)."""
    assert torch.isfinite(out).all(), f"non-finite output (unwritten element?) {what}"
    ref = a.double() @ b.double().T
    err = (out.double() - ref).norm() / ref.norm().clamp_min(1e-30)
    assert err.item() < 1e-2, f"relative error {err.item():.3g} {what}"
    scale = (a.double().abs() @ b.double().abs().T).clamp_min(1e-3)
    worst = ((out.double() - ref).abs() / scale).max().item()
    assert worst < 1e-2, f"element error {worst:.3g} of |a||b| {what}"


def test_gemm_swap_rejects_bad_arguments_on_cpu():
    a, b = torch.randn(17, 16), torch.randn(24, 16)
    with pytest.raises(ValueError, match="variant"):
        torch.ops.mkernel.gemm_swap(a, b, len(VARIANTS))
    with pytest.raises(ValueError, match="variant"):
        torch.ops.mkernel.gemm_swap(a, b, -1)
    with pytest.raises(RuntimeError, match="same K"):
        torch.ops.mkernel.gemm_swap(a, torch.randn(24, 8), 0)
    ref = a.double() @ b.double().T
    out = torch.ops.mkernel.gemm_swap(a, b, 0)
    assert ((out.double() - ref).norm() / ref.norm()).item() < 1e-6


@needs_variants
@needs_hopper
@pytest.mark.gpu
@pytest.mark.parametrize("variant", range(len(VARIANTS)))
def test_gemm_swap_variant_matches_reference(variant):
    for m in MS:
        for n, k in SHAPES:
            dtype = DTYPES[(m + n + variant) % 2]
            a, b = operands(m, n, k, dtype, seed=m * 131 + n + k + variant)
            out = poisoned_call(lambda: torch.ops.mkernel.gemm_swap(a, b, variant), (m, n), dtype)
            what = f"{VARIANTS[variant]} m={m} n={n} k={k} {dtype}"
            check(out, a, b, what)
            # stream-K adds its partials in a fixed order: the same bits again
            assert torch.equal(out, torch.ops.mkernel.gemm_swap(a, b, variant)), what


@needs_variants
@needs_hopper
@pytest.mark.gpu
@pytest.mark.parametrize("variant", [11, 12, 13, 14, 16])
def test_gemm_swap_decode_shape_split_k_ways(variant):
    """Session 10's stream-K / split-K variants at a decode shape (333 x 3584 x 8192: 28 tiles of
    256x176, 128 k-blocks each, shared by ~4.7 stream-K units or 2/4 split-K ranges), where the
    ragged shapes above give each tile only a few k-blocks; session 11's swap_128x176_k2 (56
    tiles of 128x176 in two K halves of 64 k-blocks)."""
    m, n, k = 333, 3584, 8192
    dtype = DTYPES[variant % 2]
    a, b = operands(m, n, k, dtype, seed=1000 + variant)
    out = poisoned_call(lambda: torch.ops.mkernel.gemm_swap(a, b, variant), (m, n), dtype)
    what = f"{VARIANTS[variant]} m={m} n={n} k={k} {dtype}"
    check(out, a, b, what)
    assert torch.equal(out, torch.ops.mkernel.gemm_swap(a, b, variant)), what


@needs_variants
@needs_hopper
@pytest.mark.gpu
@pytest.mark.parametrize("variant", [17, 18, 19, 20, 21])
def test_gemm_swap_ticketed_at_decode_shapes(variant):
    """Session 12's ticketed variants (groups of CTAs, one per token tile, each group an equal
    range of the weight blocks' k-blocks; split tiles summed through tickets in slice order) at
    the decode shapes, where a tile is shared by 2-4 groups (3584 weight rows: 28 or 14 weight
    blocks for 66 or 44 groups; 8192: 64 or 32), and session 13's swap_128x336_wide (one token
    tile, so one CTA per group: 132 groups, a 3584-row tile shared by 4-6 CTAs), at
    ragged token counts (333, 317, 177: partial token tiles), both dtypes: right against the
    float64 reference, the same bits again (the slice order does not depend on which CTA comes
    last), and the tickets left at zero (the next call, of another shape, on the same scratch)."""
    # (the float64 references cost ~90 GFLOP per variant: K = 4104 where 8192 is not needed; at
    # 8192 weight rows 65 k-blocks per tile still put every tile on two CTAs or more)
    for m, n, k, dtype in ((333, 3584, 8192, torch.bfloat16), (317, 8192, 4104, torch.float16),
                           (177, 3584, 4104, torch.bfloat16)):
        a, b = operands(m, n, k, dtype, seed=1200 + variant + m + n)
        out = poisoned_call(lambda: torch.ops.mkernel.gemm_swap(a, b, variant), (m, n), dtype)
        what = f"{VARIANTS[variant]} m={m} n={n} k={k} {dtype}"
        check(out, a, b, what)
        assert torch.equal(out, torch.ops.mkernel.gemm_swap(a, b, variant)), what


@needs_hopper
@pytest.mark.gpu
@pytest.mark.parametrize("dtype", DTYPES)
def test_auto_at_small_m_is_correct_reproducible_and_named(dtype):
    """mkernel.gemm (config auto) at the issue's decode row counts and around the GEMV's edge:
    whatever the tuners picked (GEMV, engine tiles or a swapped variant), the result is right,
    the same bits call after call, and gemm_plan names what ran."""
    for m in (1, 9, 16, 17, 64, 333):
        for n, k in [(1032, 1000), (3576, 4104)]:
            a, b = operands(m, n, k, dtype, seed=7 * m + n)
            out = poisoned_call(lambda: mkernel.gemm(a, b), (m, n), dtype)
            plan = mkernel.gemm_plan(a, b)
            check(out, a, b, f"auto m={m} n={n} k={k} plan {plan}")
            assert torch.equal(out, mkernel.gemm(a, b)), plan
            if m <= 8:
                assert plan.startswith("gemv/"), plan  # by shape
            elif plan.startswith("gemv/"):  # 9..16 rows: a GEMV variant the tuner measured
                assert m <= 16, plan
                name, _, splits = plan.split()[0][5:].partition("/k")
                v = GEMV_NAMES.index(name)
                assert torch.equal(out, torch.ops.mkernel.gemv(a, b, v, int(splits or 1))), plan
            elif plan.startswith("swap_"):
                v = VARIANTS.index(plan.split()[0])
                assert torch.equal(out, torch.ops.mkernel.gemm_swap(a, b, v)), plan
            elif plan.startswith("split:"):  # MKERNEL_GEMM_SMALLM_S11=1: the hooked kernel split-K
                cfg, _, splits = plan.split()[0][6:].partition("/k")
                assert torch.equal(out, mkernel.gemm(a, b, config=cfg, splits=int(splits))), plan


@needs_hopper
@pytest.mark.gpu
@pytest.mark.parametrize("dtype", DTYPES)
def test_auto_runs_a_split_k_small_m_plan_from_the_table(dtype):
    """A small-M choice of session 11's split kind ("split:coop_128x256_c1x2/k3": the engine's
    hooked 128x256 tile, tokens on M, K split three ways: 3 x 14 tiles x 3 = 126 CTAs at
    333 x 3584 x 8192), as another rank or an earlier process would hand it over: auto runs
    exactly that kernel (the same bits as the explicit call), right against the reference,
    gemm_plan names it, and the next calls (the in-memory fast lookup) run it again."""
    m, n, k = 333, 3584, 8192
    a, b = operands(m, n, k, dtype, seed=11 + (dtype == torch.float16))
    mkernel.gemm_plan(a, b)  # the shape's small-M key is in the table now (tuned or read)
    doc = json.loads(torch.ops.mkernel.gemm_plans_export())
    suffix = f"|{'bf16' if dtype == torch.bfloat16 else 'fp16'}|e0|m512|n{n}|k{k}|small"
    # (a plan file may hold this shape for other device signatures too: all of them are set)
    before = {key: plan for key, plan in doc["plans"].items() if key.endswith(suffix)}
    assert before, (suffix, sorted(doc["plans"]))
    forced = "split:coop_128x256_c1x2/k3"

    def load(plans: dict[str, str]) -> None:
        torch.ops.mkernel.gemm_plans_import(json.dumps({"format": doc["format"], "plans": plans}))

    load({key: forced for key in before})
    try:
        out = poisoned_call(lambda: mkernel.gemm(a, b), (m, n), dtype)
        plan = mkernel.gemm_plan(a, b)
        assert plan.split()[0] == forced, plan
        check(out, a, b, f"auto with {plan} {dtype}")
        explicit = mkernel.gemm(a, b, config="coop_128x256_c1x2", splits=3)
        assert torch.equal(out, explicit), plan
        for _ in range(2):  # the fast lookup's calls, each into a fresh (poisoned) output
            again = poisoned_call(lambda: mkernel.gemm(a, b), (m, n), dtype)
            assert torch.equal(again, out), plan
    finally:
        load(before)
    assert mkernel.gemm_plan(a, b).split()[0] in before.values()


@needs_variants
@needs_hopper
@pytest.mark.gpu
@pytest.mark.parametrize("dtype", DTYPES, ids=["bf16", "fp16"])
@pytest.mark.parametrize("n", [8192, 3584], ids=["n8192", "n3584"])
@pytest.mark.parametrize("variant", [22, 23], ids=["v22", "v23"])
def test_gemm_swap_cublas_structure_at_decode_shapes(variant, n, dtype):
    """gemm14's copies of cuBLAS's 333-token kernels' structure (one tile per CTA; 128x176 in
    1x2 clusters, 5 stages; 64x176 in 4x2 clusters, 7 stages, non-persistent) at the decode
    weights (N x 8192): 333 and 317 tokens (two token tiles, the second partial), 177 (one row
    in the second: the cluster along the tokens multicasts to a nearly empty tile) and 169 (one
    token tile: the cluster's second CTA along the tokens has no tile): right against the
    float64 reference in a poisoned output, and the same bits again."""
    k = 8192
    for m in (333, 317, 177, 169):
        a, b = operands(m, n, k, dtype, seed=2000 + variant * 7 + m + n)
        out = poisoned_call(lambda: torch.ops.mkernel.gemm_swap(a, b, variant), (m, n), dtype)
        what = f"{VARIANTS[variant]} m={m} n={n} k={k} {dtype}"
        check(out, a, b, what)
        assert torch.equal(out, torch.ops.mkernel.gemm_swap(a, b, variant)), what


# gemm15: the 168-wide token tiles (333 tokens in 336), the register-stored-epilogue controls and
# two 168-wide variants with TMA cache hints
S15_VARIANTS = [24, 25, 26, 27, 28, 29, 30, 31, 32]


@needs_variants
@needs_hopper
@pytest.mark.gpu
@pytest.mark.parametrize("dtype", DTYPES, ids=["bf16", "fp16"])
@pytest.mark.parametrize("nk", [(8192, 8192), (3584, 8192), (8192, 3584)],
                         ids=["n8192k8192", "n3584k8192", "n8192k3584"])
@pytest.mark.parametrize("variant", S15_VARIANTS, ids=[f"v{v}" for v in S15_VARIANTS])
def test_gemm_swap_168_at_decode_shapes(variant, nk, dtype):
    """gemm15's 168-wide token tiles (CUTLASS's mainloop with each stage's TMA layout built 2-D:
    21 eight-row swizzle atoms; the epilogue stored from the registers) and the 176-wide control
    at the decode weights: 333 and 320 tokens (two token tiles, the second partial), 337 (three:
    one row in the third, a 1x2 cluster's second CTA without a tile), 169 (one row in the
    second). Each output poisoned first; against the float64 reference in norm, per element and
    per 64x64 tile (within 2x torch's own error on the tile: a tile that lost a k-block or a
    multicast slice is far outside it while its norm share is not); the same bits again."""
    n, k = nk
    for m in (333, 320, 337, 169):
        a, b = operands(m, n, k, dtype, seed=3000 + m + n + k + (dtype == torch.float16))
        out = poisoned_call(lambda: torch.ops.mkernel.gemm_swap(a, b, variant), (m, n), dtype)
        what = f"{VARIANTS[variant]} m={m} n={n} k={k} {dtype}"
        check(out, a, b, what)
        assert_tiles_close(out, a.double() @ b.double().T, torch.nn.functional.linear(a, b),
                           what=what + ": ")
        assert torch.equal(out, torch.ops.mkernel.gemm_swap(a, b, variant)), what


@needs_variants
@needs_hopper
@pytest.mark.gpu
def test_gemm_swap_under_graph_capture():
    """Stream-K's workspace set-up (a memset on the stream) and the kernel replay with new inputs."""
    m, n, k = 40, 3576, 2056
    a, b = operands(m, n, k, torch.bfloat16, seed=3)
    stream = torch.cuda.Stream()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.stream(stream):
        for v in range(len(VARIANTS)):
            torch.ops.mkernel.gemm_swap(a, b, v)  # load the kernels outside capture
        stream.synchronize()
        with torch.cuda.graph(graph, stream=stream):
            outs = [torch.ops.mkernel.gemm_swap(a, b, v) for v in range(len(VARIANTS))]
    for rep in range(2):
        a.copy_(torch.randn_like(a))
        graph.replay()
        torch.cuda.synchronize()
        for v, out in enumerate(outs):
            check(out, a, b, f"graph replay {rep} {VARIANTS[v]}")
