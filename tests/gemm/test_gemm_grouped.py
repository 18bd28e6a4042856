"""The grouped (MoE) engine GEMM: per-expert valid rows read on the device."""

from __future__ import annotations

import pytest
import torch

from mkernel.ops import gemm_grouped
from tests.gemm.checks import check_gemm, poisoned_call
from tests.gemm.test_gemm_engine import HOPPER


def check(a, b, counts, out, tol):
    for e in range(a.shape[0]):
        rows = int(counts[e])
        if rows == 0:
            continue
        check_gemm(out[e, :rows], a[e, :rows], b[e], tol=tol, what=f"expert {e} ({rows} rows): ")


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
    cd = counts.cuda()
    out = poisoned_call(lambda: gemm_grouped(a, b, cd), (e, c, n), dtype)
    check(a, b, counts, out, 1e-2)


# --- packed rows (torch._grouped_mm's layout): a [T, K], offs [E] cumulative ends -------------

def check_packed(a, b, offs, out, tol):
    begin = 0
    for e, end in enumerate(offs.tolist()):
        if end > begin:
            check_gemm(out[begin:end], a[begin:end], b[e], tol=tol,
                       what=f"expert {e} (rows {begin}:{end}): ")
        begin = end


def random_offsets(g, experts: int, tokens: int, skew: float) -> torch.Tensor:
    """Cumulative row ends of a routing: Dirichlet(skew) shares, some experts empty."""
    w = torch.distributions.Dirichlet(torch.full((experts,), skew)).sample()
    counts = (w * tokens).floor().to(torch.int64)
    counts[torch.randperm(experts, generator=g)[: experts // 4]] = 0  # idle experts
    counts[0] += tokens - int(counts.sum()) if int(counts.sum()) <= tokens else 0
    return torch.cumsum(counts, 0).clamp(max=tokens).to(torch.int32)


def test_packed_cpu_reference_and_bad_offsets():
    g = torch.Generator().manual_seed(5)
    a = torch.randn(50, 24, generator=g)
    b = torch.randn(3, 16, 24, generator=g)
    offs = torch.tensor([20, 20, 45], dtype=torch.int32)
    out = gemm_grouped(a, b, offs=offs)
    check_packed(a, b, offs, out, 1e-6)
    assert (out[45:] == 0).all()
    with pytest.raises(RuntimeError, match=r"offs\[1\] = 10 must lie in"):
        gemm_grouped(a, b, offs=torch.tensor([20, 10, 45], dtype=torch.int32))
    with pytest.raises(RuntimeError, match="offs must have E"):
        gemm_grouped(a, b, offs=torch.tensor([20, 45], dtype=torch.int32))
    with pytest.raises(ValueError, match="exactly one of counts"):
        gemm_grouped(a, b)


def test_packed_fake_shapes():
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode():
        out = gemm_grouped(torch.empty(70, 64), torch.empty(4, 80, 64), offs=torch.empty(4, dtype=torch.int32))
    assert tuple(out.shape) == (70, 80)


@pytest.mark.gpu
@pytest.mark.skipif(not HOPPER, reason="needs a Hopper (sm_90) GPU")
@pytest.mark.parametrize("e,t,k,n,skew", [(8, 1000, 256, 520, 0.5), (32, 8192, 512, 2048, 2.0),
                                          (4, 3, 64, 64, 1.0), (64, 5000, 1024, 1024, 0.3)])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_engine_grouped_packed(e, t, k, n, skew, dtype):
    g = torch.Generator().manual_seed(e * t)
    torch.manual_seed(e + t)
    offs = random_offsets(g, e, t - (t // 7), skew)  # the tail rows past offs[-1] belong to no expert
    a = torch.randn(t, k, generator=g).to("cuda", dtype)
    b = torch.randn(e, n, k, generator=g).to("cuda", dtype)
    od = offs.cuda()
    out = poisoned_call(lambda: gemm_grouped(a, b, offs=od), (t, n), dtype)
    check_packed(a, b, offs, out, 1e-2)


@pytest.mark.gpu
@pytest.mark.skipif(not HOPPER, reason="needs a Hopper (sm_90) GPU")
def test_packed_rows_of_one_expert_do_not_leak_into_the_next():
    """Expert boundaries inside a tile: each row must come from its own expert's weights."""
    e, k, n = 5, 128, 256
    offs = torch.tensor([1, 130, 131, 300, 301], dtype=torch.int32)
    a = torch.randn(301, k, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(e, n, k, device="cuda", dtype=torch.bfloat16)
    b[2] = 0  # expert 2's single row must come out exactly zero
    od = offs.cuda()
    out = poisoned_call(lambda: gemm_grouped(a, b, offs=od), (301, n), torch.bfloat16)
    assert (out[130] == 0).all()
    check_packed(a, b, offs, out, 1e-2)


# --- the packed plan: every hooked config, and the autotuner over them ------------------------

PACKED_CONFIGS = ("coop_128x256_c2x1", "coop_128x128_c2x1", "ping_128x128_c1x2", "coop_128x256_c1x2",
                  "coop_256x128_c1x2")


def test_packed_plan_arguments_on_cpu():
    a, b = torch.randn(10, 16), torch.randn(2, 8, 16)
    offs = torch.tensor([4, 10], dtype=torch.int32)
    from mkernel.ops import gemm_grouped_plan

    assert gemm_grouped_plan(a, b, offs) == "host reference"
    with pytest.raises(ValueError, match="swizzle and raster need an explicit config"):
        gemm_grouped(a, b, offs=offs, swizzle=4)
    with pytest.raises(ValueError, match="packed layout"):
        gemm_grouped(a.view(2, 5, 16), b, torch.tensor([5, 5], dtype=torch.int32), config="ping_128x128_c1x2")


@pytest.mark.gpu
@pytest.mark.skipif(not HOPPER, reason="needs a Hopper (sm_90) GPU")
@pytest.mark.parametrize("config", PACKED_CONFIGS)
@pytest.mark.parametrize("swizzle,raster", [(8, "n"), (1, "m")])
@pytest.mark.parametrize("e,t,k,n,skew", [(8, 1000, 256, 520, 0.5), (16, 3001, 512, 2048, 2.0)])
def test_packed_every_config_and_tile_order(config, swizzle, raster, e, t, k, n, skew):
    g = torch.Generator().manual_seed(e * t + swizzle)
    offs = random_offsets(g, e, t - 5, skew)
    a = torch.randn(t, k, generator=g).to("cuda", torch.bfloat16)
    b = torch.randn(e, n, k, generator=g).to("cuda", torch.bfloat16)
    od = offs.cuda()
    out = poisoned_call(lambda: gemm_grouped(a, b, offs=od, config=config, swizzle=swizzle, raster=raster),
                        (t, n), torch.bfloat16)
    check_packed(a, b, offs, out, 1e-2)


@pytest.mark.gpu
@pytest.mark.skipif(not HOPPER, reason="needs a Hopper (sm_90) GPU")
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_packed_tuned_plan_is_cached_and_bitwise_equal_to_every_candidate(dtype):
    """The tuner's premise: every candidate sums K in one order, so its choice never changes
    the bits. The plan is tuned once per (E, T, N, K) and kept for other routings."""
    from mkernel.ops import gemm_grouped_plan

    e, t, k, n = 12, 2100 + 8 * (dtype == torch.float16), 520, 1032
    g = torch.Generator().manual_seed(t)
    offs = random_offsets(g, e, t, 1.0).cuda()
    a = torch.randn(t, k, generator=g).to("cuda", dtype)
    b = torch.randn(e, n, k, generator=g).to("cuda", dtype)
    plan = gemm_grouped_plan(a, b, offs)
    assert plan.endswith("(tuned)") and plan.split("/")[0] in PACKED_CONFIGS, plan
    tuned = poisoned_call(lambda: gemm_grouped(a, b, offs=offs), (t, n), dtype)
    check_packed(a, b, offs.cpu(), tuned, 1e-2)
    for config in PACKED_CONFIGS:
        for swizzle, raster in ((8, "n"), (1, "m"), (4, "n")):
            other = gemm_grouped(a, b, offs=offs, config=config, swizzle=swizzle, raster=raster)
            valid = int(offs[-1])
            assert torch.equal(other[:valid], tuned[:valid]), (config, swizzle, raster)
    offs2 = random_offsets(g, e, t, 0.3).cuda()  # another routing: same plan, no new tuning
    assert gemm_grouped_plan(a, b, offs2) == plan
    check_packed(a, b, offs2.cpu(), gemm_grouped(a, b, offs=offs2), 1e-2)


@pytest.mark.gpu
@pytest.mark.skipif(not HOPPER, reason="needs a Hopper (sm_90) GPU")
def test_packed_bad_config_named():
    a = torch.randn(64, 64, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(2, 64, 64, device="cuda", dtype=torch.bfloat16)
    offs = torch.tensor([30, 64], dtype=torch.int32, device="cuda")
    with pytest.raises(ValueError, match="ping_64x128_c1x1 has no packed grouped kernel"):
        gemm_grouped(a, b, offs=offs, config="ping_64x128_c1x1")
    # A hooked config without a packed kernel: refused by name before any launch.
    with pytest.raises(ValueError, match="coop_256x128_c2x1 has no packed grouped kernel"):
        gemm_grouped(a, b, offs=offs, config="coop_256x128_c2x1")


# A child process per malformed call: the device-side check traps, which ends the child's CUDA
# context (csrc/kernels/gemm/grouped_offs_check.h).
_CHILD = """
import sys, torch
sys.path.insert(0, {root!r})
from mkernel.ops import gemm_grouped
a = torch.randn(3, 40, 64, device="cuda", dtype=torch.bfloat16)
b = torch.randn(3, 32, 64, device="cuda", dtype=torch.bfloat16)
case = {case!r}
if case == "counts":
    gemm_grouped(a, b, torch.tensor([40, 41, 0], dtype=torch.int32, device="cuda"))
elif case == "negative":
    gemm_grouped(a, b, torch.tensor([3, -1, 0], dtype=torch.int32, device="cuda"))
elif case == "offs_past":
    gemm_grouped(a[0], b, offs=torch.tensor([10, 20, 41], dtype=torch.int32, device="cuda"))
elif case == "offs_down":
    gemm_grouped(a[0], b, offs=torch.tensor([10, 5, 40], dtype=torch.int32, device="cuda"))
else:  # a valid call: the child must live
    gemm_grouped(a[0], b, offs=torch.tensor([10, 10, 40], dtype=torch.int32, device="cuda"))
    gemm_grouped(a, b, torch.tensor([40, 0, 7], dtype=torch.int32, device="cuda"))
torch.cuda.synchronize()
print("CHILD-OK")
"""


@pytest.mark.gpu
@pytest.mark.skipif(not HOPPER, reason="needs a Hopper (sm_90) GPU")
@pytest.mark.parametrize("case, message", [
    ("counts", r"mkernel\.gemm_grouped: counts\[1\] = 41 is outside \[0, 40\]"),
    ("negative", r"mkernel\.gemm_grouped: counts\[1\] = -1 is outside \[0, 40\]"),
    ("offs_past", r"mkernel\.gemm_grouped_packed: offs\[2\] = 41 is past a's rows"),
    ("offs_down", r"mkernel\.gemm_grouped_packed: offs\[1\] = 5 is below the entry before it"),
    ("valid", None),
])
def test_row_bounds_on_the_gpu_are_checked_on_the_device(case, message):
    """counts / offs live on the GPU (no host read): a bad entry stops the call on the device
    with a message naming it (then the context is lost, as with PyTorch's index asserts), never
    rows computed from it in silence; valid ones (equal ends, empty experts) pass."""
    import re
    import subprocess
    import sys

    from tests.isolated import ROOT, trap_safe_env

    with trap_safe_env() as env:
        r = subprocess.run([sys.executable, "-c", _CHILD.format(root=str(ROOT), case=case)],
                           env=env, cwd=ROOT, capture_output=True, text=True, timeout=120)
    out = r.stdout + r.stderr
    if message is None:
        assert r.returncode == 0 and "CHILD-OK" in out, out[-3000:]
    else:
        assert r.returncode != 0 and "CHILD-OK" not in out, out[-3000:]
        assert re.search(message, out), out[-3000:]
