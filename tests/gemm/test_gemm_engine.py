"""The Hopper GEMM engine (world size 1) against a float64 reference.

CPU: the host reference path. GPU (Hopper only): every shipped tile config,
bf16 and fp16, ragged M, with the output memory poisoned before the run so an
unwritten tile fails.
"""

from __future__ import annotations

import pytest
import torch

import mkernel
from mkernel.ops import GEMM_CONFIGS

HOPPER = torch.cuda.is_available() and torch.cuda.get_device_capability() == (9, 0)
needs_hopper = pytest.mark.skipif(not HOPPER, reason="needs a Hopper (sm_90) GPU")


def rel_err(out: torch.Tensor, ref: torch.Tensor) -> float:
    out64, ref64 = out.double().cpu(), ref.double().cpu()
    assert torch.isfinite(out64).all(), "non-finite output (unwritten tile?)"
    return ((out64 - ref64).norm() / ref64.norm().clamp_min(1e-30)).item()


def reference(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """a @ b.T in float64 on the CPU (independent of the engine and of cuBLAS)."""
    return a.double().cpu() @ b.double().cpu().T


def poison_next_allocation(shape, dtype, device) -> int:
    """Fill a block of exactly the output's size with NaN and free it: the
    caching allocator hands the same block to the op's output next."""
    t = torch.full(shape, float("nan"), dtype=dtype, device=device)
    ptr = t.data_ptr()
    del t
    return ptr


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("m,n,k", [(1, 8, 8), (37, 96, 64), (130, 264, 136)])
def test_cpu_reference_and_world_one_ops(m, n, k, dtype):
    g = torch.Generator().manual_seed(m * 7 + n)
    a = torch.randn(m, k, generator=g).to(dtype)
    b = torch.randn(n, k, generator=g).to(dtype)
    ref = reference(a, b)
    tol = 1e-5 if dtype == torch.float32 else 1e-2
    assert rel_err(mkernel.gemm(a, b), ref) < tol
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
    poisoned = poison_next_allocation((m, n), dtype, "cuda")
    out = mkernel.gemm(a, b, config=config)
    torch.cuda.synchronize()
    if out.data_ptr() != poisoned:
        pytest.fail("the output did not reuse the poisoned block: poisoning is not effective")
    assert rel_err(out, reference(a, b)) < 1e-2


@needs_hopper
@pytest.mark.gpu
@pytest.mark.parametrize("sm_count", [1, 7, 66])
def test_engine_on_fewer_sms(sm_count):
    """(d) the persistent grid on a given number of SMs (co-resident with comm roles)."""
    a = torch.randn(777, 512, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(1024, 512, device="cuda", dtype=torch.bfloat16)
    poison_next_allocation((777, 1024), torch.bfloat16, "cuda")
    out = mkernel.gemm(a, b, sm_count=sm_count)
    assert rel_err(out, reference(a, b)) < 1e-2


@needs_hopper
@pytest.mark.gpu
@pytest.mark.parametrize("swizzle", [1, 2, 8])
@pytest.mark.parametrize("raster", ["m", "n"])
def test_tile_orders(swizzle, raster):
    a = torch.randn(1500, 1024, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(2056, 1024, device="cuda", dtype=torch.bfloat16)
    poison_next_allocation((1500, 2056), torch.bfloat16, "cuda")
    assert rel_err(mkernel.gemm(a, b, swizzle=swizzle, raster=raster), reference(a, b)) < 1e-2


@needs_hopper
@pytest.mark.gpu
def test_world_one_ops_use_engine():
    from types import SimpleNamespace

    one = SimpleNamespace(handle=0, world_size=1)
    a = torch.randn(333, 256, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(512, 256, device="cuda", dtype=torch.bfloat16)
    ref = reference(a, b)
    for out in (mkernel.ag_gemm(a, b, group=one), mkernel.gemm_rs(a, b, group=one),
                mkernel.gemm_ar(a, b, group=one)):
        assert rel_err(out, ref) < 1e-2


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
    poison_next_allocation((300, 520), torch.bfloat16, "cuda:1")
    out = mkernel.gemm(a, b)
    assert out.device == a.device and torch.cuda.current_device() == 0
    assert rel_err(out, reference(a, b)) < 1e-2
    assert mkernel.gemm_plan(a, b).endswith(" (tuned)")
    explicit = mkernel.gemm(a, b, config="coop_128x128_c2x1", splits=2)  # the hooked kernel
    assert rel_err(explicit, reference(a, b)) < 1e-2
