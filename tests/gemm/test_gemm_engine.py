"""The Hopper GEMM engine (world size 1) against a float64 reference.

CPU: the host reference path. GPU (Hopper only): every shipped tile config,
bf16 and fp16, ragged M, with the output memory poisoned before the run (and
the output proven to be that memory) so an unwritten tile fails, and every tile
checked against torch's own error on it (tests/gemm/checks.py) so a tile that
lost part of its sum fails.
"""

from __future__ import annotations

import pytest
import torch

import mkernel
from mkernel.ops import GEMM_CONFIGS
from tests.gemm.checks import (  # noqa: F401  (re-exported: other test files import them here)
    check_gemm,
    poison_next_allocation,
    poisoned_call,
    reference,
    rel_err,
)

HOPPER = torch.cuda.is_available() and torch.cuda.get_device_capability() == (9, 0)
needs_hopper = pytest.mark.skipif(not HOPPER, reason="needs a Hopper (sm_90) GPU")


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("m,n,k", [(1, 8, 8), (37, 96, 64), (130, 264, 136)])
def test_cpu_reference_and_world_one_ops(m, n, k, dtype):
    g = torch.Generator().manual_seed(m * 7 + n)
    a = torch.randn(m, k, generator=g).to(dtype)
    b = torch.randn(n, k, generator=g).to(dtype)
    ref = reference(a, b)
    tol = 1e-5 if dtype == torch.float32 else 1e-2
    assert rel_err(mkernel.gemm(a, b), ref) < tol
    check_gemm(mkernel.gemm(a, b), a, b, tol=tol)
    from types import SimpleNamespace

    one = SimpleNamespace(handle=0, world_size=1)
    out, gathered = mkernel.ag_gemm(a, b, group=one, return_gathered=True)
    assert rel_err(out, ref) < tol and torch.equal(gathered, a) and gathered.data_ptr() != a.data_ptr()
    assert rel_err(mkernel.gemm_rs(a, b, group=one), ref) < tol
    assert rel_err(mkernel.gemm_ar(a, b, group=one), ref) < tol


def test_bad_config_named():
    a = torch.randn(4, 8)
    with pytest.raises(ValueError, match="config"):
        torch.ops.mkernel.gemm(a, a, -7, 0)
    with pytest.raises(ValueError, match="sm_count"):
        torch.ops.mkernel.gemm(a, a, -1, -1)
    with pytest.raises(ValueError, match="swizzle"):
        torch.ops.mkernel.gemm(a, a, -1, 0, 3, 0)
    with pytest.raises(ValueError, match="raster"):
        torch.ops.mkernel.gemm(a, a, -1, 0, 0, 5)


SHAPES = [(1, 256, 128), (7, 520, 264), (129, 1032, 512), (1000, 776, 1048), (4099, 2048, 1024)]


@needs_hopper
@pytest.mark.gpu
@pytest.mark.parametrize("config", list(GEMM_CONFIGS))
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("m,n,k", SHAPES)
def test_engine_matches_reference(config, dtype, m, n, k):
    g = torch.Generator(device="cuda").manual_seed(1000 * m + n + k)
    a = torch.randn(m, k, device="cuda", dtype=dtype, generator=g)
    b = torch.randn(n, k, device="cuda", dtype=dtype, generator=g)
    out = poisoned_call(lambda: mkernel.gemm(a, b, config=config), (m, n), dtype)
    check_gemm(out, a, b)


@needs_hopper
@pytest.mark.gpu
@pytest.mark.parametrize("sm_count", [1, 7, 66])
def test_engine_on_fewer_sms(sm_count):
    """(d) the persistent grid on a given number of SMs (co-resident with comm roles)."""
    a = torch.randn(777, 512, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(1024, 512, device="cuda", dtype=torch.bfloat16)
    out = poisoned_call(lambda: mkernel.gemm(a, b, sm_count=sm_count), (777, 1024), torch.bfloat16)
    check_gemm(out, a, b)


@needs_hopper
@pytest.mark.gpu
@pytest.mark.parametrize("swizzle", [1, 2, 8])
@pytest.mark.parametrize("raster", ["m", "n"])
def test_tile_orders(swizzle, raster):
    a = torch.randn(1500, 1024, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(2056, 1024, device="cuda", dtype=torch.bfloat16)
    out = poisoned_call(lambda: mkernel.gemm(a, b, swizzle=swizzle, raster=raster), (1500, 2056),
                        torch.bfloat16)
    check_gemm(out, a, b)


@needs_hopper
@pytest.mark.gpu
def test_world_one_ops_use_engine():
    from types import SimpleNamespace

    one = SimpleNamespace(handle=0, world_size=1)
    a = torch.randn(333, 256, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(512, 256, device="cuda", dtype=torch.bfloat16)
    for op in (mkernel.ag_gemm, mkernel.gemm_rs, mkernel.gemm_ar):
        out = poisoned_call(lambda op=op: op(a, b, group=one), (333, 512), torch.bfloat16)
        check_gemm(out, a, b, what=f"{op.__name__}: ")


@needs_hopper
@pytest.mark.gpu
def test_engine_rejects_misaligned_k():
    a = torch.randn(16, 12, device="cuda", dtype=torch.bfloat16)
    with pytest.raises(RuntimeError, match="multiples of 8"):
        mkernel.gemm(a, a)


@pytest.mark.skipif(not HOPPER or torch.cuda.device_count() < 2, reason="needs two Hopper GPUs")
@pytest.mark.gpu
def test_operands_on_another_device_than_current():
    """The ops launch on their operands' device, whatever the caller's current device is."""
    torch.cuda.set_device(0)
    a = torch.randn(300, 256, device="cuda:1", dtype=torch.bfloat16)
    b = torch.randn(520, 256, device="cuda:1", dtype=torch.bfloat16)
    out = poisoned_call(lambda: mkernel.gemm(a, b), (300, 520), torch.bfloat16, "cuda:1")
    assert out.device == a.device and torch.cuda.current_device() == 0
    check_gemm(out, a, b)
    assert mkernel.gemm_plan(a, b).endswith(" (tuned)")
    explicit = mkernel.gemm(a, b, config="coop_128x128_c2x1", splits=2)  # the hooked kernel
    check_gemm(explicit, a, b)
