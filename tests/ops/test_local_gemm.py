"""mkernel._local_gemm: the fused ops' local backward GEMMs on torch.matmul or on the engine
(``MKERNEL_LOCAL_GEMM``), against float64. The engine path exists for GPU shares where torch's
half-precision GEMM is wrong (session 46: a third of an H100 under MPS); on CPU it runs the
engine's reference kernel, so the routing and padding are checked here too."""

from __future__ import annotations

import pytest
import torch

from mkernel import _local_gemm as lg

WORLD_ONE = 0  # the group handle the ops take at world size 1
HOPPER = torch.cuda.is_available() and torch.cuda.get_device_capability() == (9, 0)
DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.skipif(not HOPPER, reason="needs a Hopper GPU"))]


def rel(got: torch.Tensor, want: torch.Tensor) -> float:
    return float((got.double() - want).norm() / want.norm().clamp_min(1e-30))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("m, n, k", [(37, 96, 64), (1, 20, 13), (9, 7, 300), (130, 8, 8)])
def test_engine_nt_matches_float64(ops, device, m, n, k):
    """a @ b.T on the engine with K and N padded to multiples of 8 and sliced back."""
    if device == "cpu" and not hasattr(torch.ops.mkernel, "gemm"):
        pytest.skip("the extension has no gemm op")
    g = torch.Generator().manual_seed(m * 1000 + n + k)
    a = torch.randn(m, k, generator=g).to(device, torch.bfloat16)
    b = torch.randn(n, k, generator=g).to(device, torch.bfloat16)
    out = lg.engine_nt(a, b)
    assert out.shape == (m, n) and out.dtype == torch.bfloat16 and out.is_contiguous()
    assert rel(out.cpu(), a.double().cpu() @ b.double().cpu().t()) < 1e-2


def test_empty_operands(ops):
    assert lg.engine_nt(torch.randn(0, 8), torch.randn(5, 8)).shape == (0, 5)
    assert lg.engine_nt(torch.randn(3, 0), torch.randn(5, 0)).abs().sum() == 0


def test_modes(monkeypatch):
    t = torch.zeros(2, 2, dtype=torch.bfloat16)
    monkeypatch.delenv("MKERNEL_LOCAL_GEMM", raising=False)
    assert not lg.use_engine(t)  # auto on CPU: torch
    monkeypatch.setenv("MKERNEL_LOCAL_GEMM", "engine")
    assert lg.use_engine(t)
    monkeypatch.setenv("MKERNEL_LOCAL_GEMM", "torch")
    assert not lg.use_engine(t)
    monkeypatch.setenv("MKERNEL_LOCAL_GEMM", "cublas")
    with pytest.raises(ValueError, match="MKERNEL_LOCAL_GEMM"):
        lg.use_engine(t)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("mode", ["torch", "engine"])
@pytest.mark.parametrize("name", ["ag_gemm", "gemm_rs", "gemm_ar"])
def test_linear_op_gradients_match_float64(ops, monkeypatch, device, mode, name):
    """dx = G @ w and dw = G^T x of each fused linear op at world size one, in bf16, against
    float64: the backward's local GEMMs on torch and on the engine."""
    monkeypatch.setenv("MKERNEL_LOCAL_GEMM", mode)
    m, k, n = 37, 64, 96
    g = torch.Generator().manual_seed(len(name) * 7 + (mode == "engine"))
    x = torch.randn(m, k, generator=g).to(device, torch.bfloat16).requires_grad_(True)
    w = torch.randn(n, k, generator=g).to(device, torch.bfloat16).requires_grad_(True)
    grad = torch.randn(m, n, generator=g)
    op = getattr(torch.ops.mkernel, name).default
    out = op(x, w, WORLD_ONE, 1, False)[0] if name == "ag_gemm" else op(x, w, WORLD_ONE, 1)
    (out.float() * grad.to(device)).sum().backward()
    gd, xd, wd = grad.double(), x.detach().double().cpu(), w.detach().double().cpu()
    assert rel(x.grad.cpu(), gd @ wd) < 1e-2
    assert rel(w.grad.cpu(), gd.t() @ xd) < 1e-2


@pytest.mark.skipif(not HOPPER, reason="needs a Hopper GPU")
def test_auto_decision_agrees_with_the_float64_probe():
    """auto's decision (torch's half GEMM against a float32 product on the GPU) is the doctor's
    verdict (against float64 on the host) on this process's share: run it whole and at a third."""
    lg.reset()
    device = torch.device("cuda", torch.cuda.current_device())
    errors = lg.half_gemm_errors(device)
    assert lg.torch_half_gemm_ok(device) == all(v <= lg.HALF_GEMM_TOL for v in errors.values()), errors


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("mode", ["torch", "engine"])
def test_replicated_column_linear_matches_float64(ops, monkeypatch, device, mode):
    """mkernel.nn.ColumnParallelLinear without sequence parallelism (its forward and weight
    gradient through _local_gemm, dx through gemm_ar) at world size one, bf16, ragged sizes,
    against float64."""
    from types import SimpleNamespace

    from mkernel.nn import ColumnParallelLinear

    monkeypatch.setenv("MKERNEL_LOCAL_GEMM", mode)
    g = torch.Generator().manual_seed(47 + (mode == "engine"))
    t, k, n = 19, 72, 40
    layer = ColumnParallelLinear(k, n, bias=False, group=SimpleNamespace(handle=WORLD_ONE, world_size=1),
                                 params_dtype=torch.bfloat16, device=device)
    with torch.no_grad():
        layer.weight.copy_(torch.randn(n, k, generator=g))
    x = torch.randn(t, k, generator=g).to(device, torch.bfloat16).requires_grad_(True)
    grad = torch.randn(t, n, generator=g)
    y = layer(x)[0]
    wd, xd, gd = layer.weight.detach().double().cpu(), x.detach().double().cpu(), grad.double()
    assert rel(y.detach().cpu(), xd @ wd.t()) < 1e-2
    (y.float() * grad.to(device)).sum().backward()
    assert rel(x.grad.cpu(), gd @ wd) < 1e-2
    assert rel(layer.weight.grad.cpu(), gd.t() @ xd) < 1e-2
