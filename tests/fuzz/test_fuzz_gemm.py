"""Differential fuzz of the GEMM engine: mkernel.gemm (auto, and pinned configs with the tile
order, split-K and SM-count options a caller may pass) and mkernel.gemm_grouped (packed and
capacity-padded, empty experts, skewed counts), on problems drawn from a seed (problems.py),
against a float64 reference. Outputs poisoned first (the caching allocator's free blocks filled
with NaN). Criteria (tests/gemm/checks.py): relative error < 1e-2 and every 64x64 tile within
2x torch's own error in the same dtype plus one ulp of the tile's largest value.

A pinned option the engine does not take must be refused with a ValueError naming it: such a
problem is reported as an expected failure (xfail) with the message, never as a pass."""

from __future__ import annotations

import pytest
import torch

import mkernel
from mkernel.ops import GEMM_CONFIGS
from tests.gemm.checks import assert_tiles_close, rel_err

from .conftest import DEVICE, SEED, poison as _poison
from .problems import fuzz_count, gemm_problems, grouped_problems

DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}
PROBLEMS = gemm_problems(SEED, fuzz_count(DEVICE, 64, 8), DEVICE, list(GEMM_CONFIGS))
GROUPED = grouped_problems(SEED, fuzz_count(DEVICE, 32, 6), DEVICE)


def _randn(gen: torch.Generator, *shape: int, dtype: torch.dtype, scale: float = 1.0) -> torch.Tensor:
    return (torch.randn(*shape, device=DEVICE, generator=gen) * scale).to(dtype)


def _check(out: torch.Tensor, ref: torch.Tensor, lowp: torch.Tensor, what: str) -> None:
    assert out.shape == ref.shape, f"{what}shape {tuple(out.shape)} != {tuple(ref.shape)}"
    if out.numel() == 0:
        return
    err = rel_err(out, ref)
    if ref.norm() > 0:
        assert err < 1e-2, f"{what}relative error {err:.3g}"
    assert_tiles_close(out, ref, lowp, what=what)


@pytest.mark.parametrize("idx", range(len(PROBLEMS)), ids=[p.id for p in PROBLEMS])
def test_gemm_fuzz(idx: int) -> None:
    p = PROBLEMS[idx]
    dt = DTYPES[p.dtype]
    gen = torch.Generator(device=DEVICE).manual_seed(SEED * 100_003 + idx)
    a = _randn(gen, p.m, p.k, dtype=dt)
    b = _randn(gen, p.n, p.k, dtype=dt, scale=p.k ** -0.5)
    kwargs = {}
    if p.config != "auto":
        kwargs = dict(config=p.config, swizzle=p.swizzle, raster=p.raster, splits=p.splits,
                      sm_count=p.sm_count)
    _poison()
    try:
        out = mkernel.gemm(a, b, **kwargs)
    except ValueError as e:
        if not kwargs:
            raise  # the default path takes every valid shape
        assert "mkernel" in str(e), f"an unclear refusal: {e}"
        pytest.xfail(f"refused: {e}")
    assert out.dtype == dt
    ref = a.double() @ b.double().T
    _check(out, ref, a @ b.T, f"gemm {p.id}: ")
    if DEVICE == "cuda" and not kwargs:
        # The same call again (the plan now cached, not tuned): the same bits.
        _poison()
        again = mkernel.gemm(a, b)
        assert torch.equal(again, out), "a second call of the cached plan changed the result"


@pytest.mark.parametrize("idx", range(len(GROUPED)), ids=[p.id for p in GROUPED])
def test_gemm_grouped_fuzz(idx: int) -> None:
    p = GROUPED[idx]
    dt = DTYPES[p.dtype]
    gen = torch.Generator(device=DEVICE).manual_seed(SEED * 100_019 + idx)
    e, total = len(p.counts), sum(p.counts)
    w = _randn(gen, e, p.n, p.k, dtype=dt, scale=p.k ** -0.5)
    counts = torch.tensor(p.counts, dtype=torch.int32, device=DEVICE)
    if p.packed:
        a = _randn(gen, total, p.k, dtype=dt)
        offs = torch.cumsum(counts, 0, dtype=torch.int32)
        kwargs = {} if p.config == "auto" else {"config": p.config}
        _poison()
        out = mkernel.gemm_grouped(a, w, offs=offs, **kwargs)
        assert out.shape == (total, p.n) and out.dtype == dt
        start = 0
        for ex, c in enumerate(p.counts):
            rows = slice(start, start + c)
            ref = a[rows].double() @ w[ex].double().T
            _check(out[rows], ref, a[rows] @ w[ex].T, f"expert {ex} ({c} rows): ")
            start += c
    else:
        a = _randn(gen, e, p.capacity, p.k, dtype=dt)
        _poison()
        out = mkernel.gemm_grouped(a, w, counts)
        assert out.shape == (e, p.capacity, p.n) and out.dtype == dt
        for ex, c in enumerate(p.counts):
            ref = a[ex, :c].double() @ w[ex].double().T
            _check(out[ex, :c], ref, a[ex, :c] @ w[ex].T, f"expert {ex} ({c} rows): ")
