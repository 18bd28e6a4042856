"""The engine's hooks, driven through mkernel.gemm_hooked on one GPU:
(a) the producer waits for A blocks released one at a time by a copy engine on
another stream; (b) per-tile done flags; (c) a custom M order; (d) fewer SMs;
and a wait that never completes times out with a report instead of hanging."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest
import torch

from tests.gemm.test_gemm_engine import HOPPER, poison_next_allocation, reference, rel_err

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not HOPPER, reason="needs a Hopper (sm_90) GPU")]

HOOKED = {"coop_128x128_c2x1": 1, "coop_128x256_c2x1": 0, "coop_256x128_c1x2": 7,
          "ping_128x128_c1x2": 5}  # ping-pong consumers: register stores, tile_stored signal


def hooked(a, b, *, a_ready=None, rows_per_flag=1, a_ready_value=1, tile_done=None, tile_done_value=1,
           m_order=None, config=-1, sm_count=0, timeout_s=10.0, splits=0):
    return torch.ops.mkernel.gemm_hooked(a, b, a_ready, rows_per_flag, a_ready_value, tile_done,
                                         tile_done_value, m_order, config, sm_count, 0, 0, timeout_s,
                                         splits)


@pytest.mark.parametrize("config", list(HOOKED))
@pytest.mark.parametrize("m,n,k", [(1, 256, 64), (300, 520, 264), (2048, 1024, 1024)])
def test_hooked_kernel_without_hooks(config, m, n, k):
    a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(n, k, device="cuda", dtype=torch.bfloat16)
    ptr = poison_next_allocation((m, n), torch.bfloat16, "cuda")
    out = hooked(a, b, config=HOOKED[config])
    assert out.data_ptr() == ptr
    assert rel_err(out, reference(a, b)) < 1e-2


@pytest.mark.parametrize("config", ["coop_128x128_c2x1", "coop_128x256_c2x1", "ping_128x128_c1x2"])
def test_waits_for_a_blocks_released_one_at_a_time(config):
    cfg = HOOKED[config]
    m, n, k, rows = 1024, 1024, 512, 128
    nflags = m // rows
    tiles_m, tiles_n, units_m, block_m, _ = torch.ops.mkernel.gemm_tile_counts(cfg, m, n)
    a_src = torch.randn(m, k, dtype=torch.bfloat16).pin_memory()
    b = torch.randn(n, k, device="cuda", dtype=torch.bfloat16)
    a = torch.full((m, k), float("nan"), device="cuda", dtype=torch.bfloat16)  # not arrived yet
    a_ready = torch.zeros(nflags, device="cuda", dtype=torch.int64)
    done = torch.zeros(tiles_m * tiles_n, device="cuda", dtype=torch.int64)
    one = torch.ones(1, dtype=torch.int64).pin_memory()
    done_host = torch.zeros_like(done, device="cpu").pin_memory()
    side = torch.cuda.Stream()
    out = hooked(a, b, a_ready=a_ready, rows_per_flag=rows, a_ready_value=1, tile_done=done,
                 tile_done_value=7, config=cfg, timeout_s=30.0)
    released = nflags // 2
    with torch.cuda.stream(side):  # copy engines: they run beside the persistent kernel
        for i in range(released):
            time.sleep(0.02)
            a[i * rows:(i + 1) * rows].copy_(a_src[i * rows:(i + 1) * rows], non_blocking=True)
            a_ready[i:i + 1].copy_(one, non_blocking=True)
        time.sleep(0.3)  # the released tiles finish; the others must still be waiting
        done_host.copy_(done, non_blocking=True)
        side.synchronize()
        partial = done_host.view(tiles_m, tiles_n).clone()
        for i in range(released, nflags):
            a[i * rows:(i + 1) * rows].copy_(a_src[i * rows:(i + 1) * rows], non_blocking=True)
            a_ready[i:i + 1].copy_(one, non_blocking=True)
    torch.cuda.synchronize()
    rows_released = released * rows
    for tm in range(tiles_m):
        first_row = tm * block_m
        if first_row + block_m <= rows_released:
            assert (partial[tm] == 7).all(), f"tile row {tm} had its rows but did not finish: {partial[tm]}"
        elif first_row >= rows_released:
            assert (partial[tm] == 0).all(), f"tile row {tm} finished before its A rows arrived"
    assert (done.view(tiles_m, tiles_n) == 7).all()
    assert rel_err(out, reference(a_src, b)) < 1e-2


@pytest.mark.parametrize("config", ["coop_128x128_c2x1", "ping_128x128_c1x2"])
def test_custom_m_order_and_few_sms(config):
    cfg = HOOKED[config]
    m, n, k = 1500, 768, 256
    _, _, units_m, _, _ = torch.ops.mkernel.gemm_tile_counts(cfg, m, n)
    order = torch.randperm(units_m, dtype=torch.int32).cuda()
    a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(n, k, device="cuda", dtype=torch.bfloat16)
    for sms in (2, 10, 0):
        poison_next_allocation((m, n), torch.bfloat16, "cuda")
        out = hooked(a, b, m_order=order, config=cfg, sm_count=sms)
        assert rel_err(out, reference(a, b)) < 1e-2


def test_bad_hook_arguments_named():
    a = torch.randn(256, 64, device="cuda", dtype=torch.bfloat16)
    with pytest.raises(RuntimeError, match="a_ready needs 2 flags"):
        hooked(a, a, a_ready=torch.zeros(1, device="cuda", dtype=torch.int64), rows_per_flag=128, config=1)
    with pytest.raises(RuntimeError, match="a_ready must be int64"):
        hooked(a, a, a_ready=torch.zeros(4, device="cuda", dtype=torch.int32), config=1)
    with pytest.raises(RuntimeError, match="m_order must hold"):
        hooked(a, a, m_order=torch.zeros(5, device="cuda", dtype=torch.int32), config=1)
    with pytest.raises(RuntimeError, match="no hooked kernel"):
        hooked(a, a, config=3)
    deep = torch.randn(256, 512, device="cuda", dtype=torch.bfloat16)  # 8 k-blocks: 2 slices fit
    with pytest.raises(RuntimeError, match="ping-pong hooked kernel runs without split-K"):
        hooked(deep, deep, config=HOOKED["ping_128x128_c1x2"], splits=2)


@pytest.mark.parametrize("m,n,k", [(1, 264, 64), (333, 1032, 520)])
def test_ping_pong_tile_done_after_every_tile_and_odd_tile_counts(m, n, k):
    """Ping-pong consumers take a CTA's tiles in turn: with few SMs each CTA gets an odd or
    even number of tiles; every tile must be stored and signalled exactly once."""
    cfg = HOOKED["ping_128x128_c1x2"]
    tiles_m, tiles_n, _, _, _ = torch.ops.mkernel.gemm_tile_counts(cfg, m, n)
    a = torch.randn(m, k, device="cuda", dtype=torch.float16)
    b = torch.randn(n, k, device="cuda", dtype=torch.float16)
    for sms in (2, 6, 0):
        done = torch.zeros(tiles_m * tiles_n, device="cuda", dtype=torch.int64)
        poison_next_allocation((m, n), torch.float16, "cuda")
        out = hooked(a, b, tile_done=done, tile_done_value=sms + 3, config=cfg, sm_count=sms)
        assert rel_err(out, reference(a, b)) < 1e-2
        assert (done == sms + 3).all(), done.view(tiles_m, tiles_n)


TIMEOUT = """
import torch, mkernel
a = torch.randn(512, 128, device="cuda", dtype=torch.bfloat16)
flags = torch.zeros(4, device="cuda", dtype=torch.int64)
torch.ops.mkernel.gemm_hooked(a, a, flags, 128, 5, None, 1, None, 1, 0, 0, 0, 0.5)
try:
    torch.cuda.synchronize()
except Exception as e:
    print("FAILED:", type(e).__name__)
print("DIAG:", torch.ops.mkernel.wait_diagnostic())
"""


def test_a_wait_that_never_completes_times_out_with_a_report():
    r = subprocess.run([sys.executable, "-c", TIMEOUT], capture_output=True, text=True, timeout=120)
    assert "FAILED:" in r.stdout, r.stdout + r.stderr
    diag = r.stdout.split("DIAG:", 1)[1]
    assert "mkernel.gemm_hooked" in diag and "A-rows flag" in diag, diag
    assert "wants >= 5" in diag and "saw 0" in diag, diag
