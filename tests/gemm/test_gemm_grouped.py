"""The grouped (MoE) engine GEMM: per-expert valid rows read on the device."""

from __future__ import annotations

import pytest
import torch

from mkernel.ops import gemm_grouped
from tests.gemm.test_gemm_engine import HOPPER, poison_next_allocation, rel_err


def check(a, b, counts, out, tol):
    for e in range(a.shape[0]):
        rows = int(counts[e])
        if rows == 0:
            continue
        ref = a[e, :rows].double().cpu() @ b[e].double().cpu().T
        assert rel_err(out[e, :rows], ref) < tol, f"expert {e} ({rows} rows)"


def test_cpu_reference():
    g = torch.Generator().manual_seed(3)
    a = torch.randn(3, 40, 24, generator=g)
    b = torch.randn(3, 16, 24, generator=g)
    counts = torch.tensor([40, 0, 17], dtype=torch.int32)
    out = gemm_grouped(a, b, counts)
    check(a, b, counts, out, 1e-6)
    assert (out[1] == 0).all() and (out[2, 17:] == 0).all()
    with pytest.raises(RuntimeError, match="counts"):
        gemm_grouped(a, b, torch.tensor([1, 2], dtype=torch.int32))
    with pytest.raises(RuntimeError, match="outside"):
        gemm_grouped(a, b, torch.tensor([41, 0, 0], dtype=torch.int32))


def test_fake_shapes():
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode():
        out = gemm_grouped(torch.empty(4, 33, 64), torch.empty(4, 80, 64), torch.empty(4, dtype=torch.int32))
    assert tuple(out.shape) == (4, 33, 80)


@pytest.mark.gpu
@pytest.mark.skipif(not HOPPER, reason="needs a Hopper (sm_90) GPU")
@pytest.mark.parametrize("e,c,k,n", [(8, 300, 256, 520), (32, 1024, 512, 256), (3, 1, 64, 64)])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_engine_grouped(e, c, k, n, dtype):
    g = torch.Generator().manual_seed(e * c)
    counts = torch.randint(0, c + 1, (e,), generator=g, dtype=torch.int32)
    counts[0], counts[-1] = c, 0 if e > 1 else c
    a = torch.randn(e, c, k, generator=g).to("cuda", dtype)
    b = torch.randn(e, n, k, generator=g).to("cuda", dtype)
    poison_next_allocation((e, c, n), dtype, "cuda")
    out = gemm_grouped(a, b, counts.cuda())
    torch.cuda.synchronize()
    check(a, b, counts, out, 1e-2)
