"""The checks of tests/gemm/checks.py can fail: a tile that dropped one k-block is rejected by
the per-tile check even where the norm check lets it through, and torch's own output passes."""

from __future__ import annotations

import pytest
import torch

from tests.gemm.checks import (
    assert_poisoned,
    assert_tiles_close,
    check_gemm,
    drop_k_block,
    poison_next_allocation,
    reference,
    rel_err,
    tile_amax,
)


def operands(m, n, k, dtype, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(m, k, generator=g).to(dtype), torch.randn(n, k, generator=g).to(dtype)


def test_tile_amax_covers_ragged_edges():
    x = torch.zeros(130, 70)
    x[129, 69] = -3.0
    x[0, 64] = 2.0
    amax = tile_amax(x, (64, 64))
    assert amax.shape == (3, 2)
    assert amax[2, 1] == 3.0 and amax[0, 1] == 2.0 and amax.sum() == 5.0


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_torch_own_output_passes(dtype):
    a, b = operands(300, 264, 512, dtype)
    check_gemm(torch.matmul(a, b.T), a, b)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_one_tile_without_one_k_block_fails_although_the_norm_passes(dtype):
    """2048 x 1024 output, K = 2048 (32 k-blocks of 64): one 64 x 64 tile summing 31 of them
    moves the relative norm error by < 1e-2, so the norm check alone would pass it."""
    m, n, k = 2048, 1024, 2048
    a, b = operands(m, n, k, dtype, seed=1)
    ref = reference(a, b)
    good = ref.to(dtype)  # correctly rounded: what an exact kernel would store
    lowp = torch.matmul(a, b.T)
    assert_tiles_close(good, ref, lowp)
    bad = drop_k_block(a, b, good, slice(640, 704), slice(320, 384), k_block=5)
    assert rel_err(bad, ref) < 1e-2, "the norm check would have caught it: pick a larger output"
    with pytest.raises(pytest.fail.Exception, match=r"1 of 512 tiles .* rows 640:704, cols 320:384"):
        assert_tiles_close(bad, ref, lowp)


def test_unwritten_tile_fails():
    a, b = operands(100, 80, 64, torch.bfloat16)
    out = torch.matmul(a, b.T)
    out[64:, :64] = float("nan")
    with pytest.raises(AssertionError, match="non-finite"):
        check_gemm(out, a, b)


def test_poisoning_must_be_proven():
    ptr = poison_next_allocation((64, 64), torch.float32, "cpu")
    other = torch.empty(64, 64)
    if other.data_ptr() != ptr:  # the CPU allocator need not hand the block back
        with pytest.raises(AssertionError, match="poisoned block"):
            assert_poisoned(other, ptr)
    with pytest.raises(AssertionError, match="poisoned block"):
        assert_poisoned(other, ptr + 1)
