"""Every GEMM test starts from its own fixed seed: inputs drawn with the global generator
(torch.randn without generator=) are fresh per test yet the same on every run, so a failure
reproduces. The seed is derived from the test's id, not shared, so no two tests draw the same
operands. The autotuner's plan file lives in a directory of the session's own."""

from __future__ import annotations

import zlib

import pytest
import torch


@pytest.fixture(autouse=True)
def _seed_per_test(request):
    seed = zlib.crc32(request.node.nodeid.encode())
    torch.manual_seed(seed)  # seeds the CPU and every CUDA device's default generator
    yield


@pytest.fixture(autouse=True, scope="session")
def _private_plan_cache(tmp_path_factory):
    """The autotuner's plan file (read on first use, written on every tuning) in a directory of
    this session's own: plans a previous run left in ~/.cache/mkernel would turn the tests that
    tune a new shape into cache hits, which pass without tuning anything, and a test run must
    not write the user's cache. (A child of tests/isolated.py gets a directory of its own.)"""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("MKERNEL_CACHE_DIR", str(tmp_path_factory.mktemp("mkernel-cache")))
        yield
