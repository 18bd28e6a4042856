"""moe_dispatch_gemm / moe_combine / MoEMLP with CUDA tensors at W = 2 ranks on one GPU under MPS:
the checks of tests/host/moe_rank_checks.py (values, routes, counts, gradients against a float64
reference from every rank's inputs) with TEST_DEVICE=cuda. Until the fused multi-rank kernel
lands, W > 1 on CUDA moves the rows through the host reference data path and runs the grouped
GEMMs on the GPU."""

from __future__ import annotations

import pytest

from tests.gpu.conftest import check_ranks, needs_gpu, rank_env
from tests.host.test_moe_host import RANK_MAIN
from tests.launch import run_ranks

pytestmark = needs_gpu


@pytest.mark.parametrize("world", [2])
def test_moe_cuda_ranks_match_reference(mps, world):
    res = run_ranks(RANK_MAIN, world, timeout=150,
                    env=rank_env(mps, world, TEST_SUITE="matrix,repeat", TEST_DEVICE="cuda",
                                 MKERNEL_OP_TIMEOUT="30"))
    cases = check_ranks(res)
    assert len(cases) == world * 8, len(cases)
    assert max(c["err"] / c["bound"] for c in cases) <= 1
