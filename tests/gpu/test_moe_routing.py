"""The MoE routing kernels (csrc/kernels/moe/moe_routing.cu, the default) against
the ATen routing of moe_dispatch_gemm's W > 1 path (csrc/moe_ep.cpp route_on_device,
MKERNEL_MOE_ROUTING=aten) and an
independent Python loop: expert, pos, cnt and slot must be equal entry for entry (the dispatch
kernel derives every row's place from them, so equal arrays mean a bit-identical layout).
One process, no group: the private op mkernel._moe_route computes the arrays alone."""

from __future__ import annotations

import pytest
import torch

import mkernel  # noqa: F401  (loads the extension)
from tests.gpu.conftest import needs_gpu

pytestmark = needs_gpu


def python_routing(idx: torch.Tensor, E: int, W: int):
    """The arrays by a plain loop over (token, choice) in order (small cases only)."""
    T, k = idx.shape
    El = E // W
    flat = idx.reshape(-1).tolist()
    expert, pos, cnt = [], [], [0] * (E + 1)
    for x in flat:
        b = x if 0 <= x < E else E
        expert.append(x if b < E else -1)
        pos.append(cnt[b])
        cnt[b] += 1
    slot, sent = [], [0] * W
    for t in range(T):
        dests = {x // El for x in flat[t * k:(t + 1) * k] if 0 <= x < E}
        for d in range(W):
            slot.append(sent[d] if d in dests else -1)
            sent[d] += d in dests
    as_t = lambda v: torch.tensor(v, dtype=torch.int32)  # noqa: E731
    return as_t(expert), as_t(pos), as_t(cnt[:E]), as_t(slot).view(T, W)


def make_idx(T, k, E, dtype, mode, gen):
    if mode == "uniform":
        idx = torch.stack([torch.randperm(E, generator=gen)[:k] for _ in range(T)]) if T else \
            torch.empty(0, k, dtype=torch.long)
    elif mode == "skewed":  # repeats within a token allowed, a few hot experts
        idx = (torch.rand(T, k, generator=gen) ** 4 * E).long()
    else:  # "invalid": some ids out of range on both sides
        idx = torch.randint(-3, E + 3, (T, k), generator=gen)
    return idx.to(dtype).cuda()


CASES = [  # T, k, E, W
    (0, 8, 256, 2), (1, 1, 8, 2), (5, 2, 8, 4), (127, 8, 64, 2), (128, 8, 64, 2),
    (129, 8, 256, 4), (1000, 4, 32, 8), (8192, 8, 256, 2), (8192, 8, 256, 4),
    (40000, 2, 8, 2), (70001, 8, 2048, 32), (300, 8, 2048, 32),
]


@pytest.mark.parametrize("mode", ["uniform", "skewed", "invalid"])
@pytest.mark.parametrize("dtype", [torch.int64, torch.int32])
@pytest.mark.parametrize("T,k,E,W", CASES)
def test_routing_kernel_equals_aten(T, k, E, W, dtype, mode):
    if mode == "uniform" and k > E:
        pytest.skip("k > E")
    gen = torch.Generator().manual_seed(T * 7919 + k * 31 + E + W)
    idx = make_idx(T, k, E, dtype, mode, gen)
    aten = torch.ops.mkernel._moe_route(idx, E, W, False)
    # Poison: the kernel path's buffer comes from the caching allocator; fill the pool first.
    torch.full((4 * T * k + 4 * E + 4 * T * W + 65536,), -7, dtype=torch.int32, device="cuda")
    kern = torch.ops.mkernel._moe_route(idx, E, W, True)
    names = ("expert", "pos", "cnt", "slot")
    for name, a, b in zip(names, aten, kern):
        assert a.shape == b.shape and a.dtype == b.dtype == torch.int32, (name, a.shape, b.shape)
        # (pos of an out-of-range id is never read; both paths rank them last all the same)
        assert torch.equal(a.cpu(), b.cpu()), (name, (a != b).nonzero()[:5])
    if T * k <= 20000:
        for name, ref, b in zip(names, python_routing(idx.cpu().long(), E, W), kern):
            assert torch.equal(ref, b.cpu()), (name, (ref != b.cpu()).nonzero()[:5])
    again = torch.ops.mkernel._moe_route(idx, E, W, True)
    assert all(torch.equal(a, b) for a, b in zip(kern, again))
