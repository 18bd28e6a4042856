"""The engine's hooks, driven through mkernel.gemm_hooked on one GPU:
(a) the producer waits for A blocks released one at a time by a copy engine on
another stream; (b) per-tile done flags, and a tile's data visible to another
stream once its flag is; (c) a custom M order; (d) fewer SMs; and a wait that
never completes times out with a report instead of hanging.

Ordering between the kernel and the host is driven by the flags themselves
(the host reads them through a copy engine while the kernel runs), never by
sleeping and hoping the GPU got somewhere meanwhile. A test whose kernel waits
on flags released from outside runs in a child process (tests/isolated.py): if
the release never came, the kernel's bounded wait traps, and a trap kills the
CUDA context of the process it runs in, not the suite's."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest
import torch

from mkernel.ops import GEMM_CONFIGS
from tests.gemm.checks import (
    assert_poisoned,
    check_gemm,
    poison_next_allocation,
    poisoned_call,
)
from tests.gemm.driver_ops import Driver
from tests.gemm.test_gemm_engine import HOPPER
from tests.isolated import isolated, trap_safe_env

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not HOPPER, reason="needs a Hopper (sm_90) GPU")]

# Hooked configs under test, name -> id (ids from the generated table, never written here);
# ping_128x128_c1x2 has ping-pong consumers: register stores, tile_stored signal.
HOOKED = {c: GEMM_CONFIGS[c] for c in ("coop_128x128_c2x1", "coop_128x256_c2x1", "coop_256x128_c1x2",
                                        "ping_128x128_c1x2")}


def hooked(a, b, *, a_ready=None, rows_per_flag=1, a_ready_value=1, tile_done=None, tile_done_value=1,
           m_order=None, config=-1, sm_count=0, timeout_s=10.0, splits=0):
    return torch.ops.mkernel.gemm_hooked(a, b, a_ready, rows_per_flag, a_ready_value, tile_done,
                                         tile_done_value, m_order, config, sm_count, 0, 0, timeout_s,
                                         splits)


def read_flags(flags: torch.Tensor, stream: torch.cuda.Stream, host: torch.Tensor | None = None):
    """The flags as they are now, read by a copy engine on `stream` (the kernel may be running)
    into `host` (pinned; allocate it before launching the kernel). Returns a copy."""
    if host is None:
        host = torch.empty(flags.shape, dtype=flags.dtype).pin_memory()
    with torch.cuda.stream(stream):
        host.copy_(flags, non_blocking=True)
    stream.synchronize()
    return host.clone()


def wait_for_flags(flags: torch.Tensor, which: torch.Tensor, value: int, stream: torch.cuda.Stream,
                   host: torch.Tensor, timeout_s: float = 20.0) -> tuple[torch.Tensor, str]:
    """Polls until flags[which] all equal `value`, at most timeout_s. Returns the last snapshot
    and "" when they did, else a message naming the flags that did not (the caller releases the
    kernel before failing: a kernel left waiting ends in a timeout that poisons the context)."""
    deadline = time.monotonic() + timeout_s
    while True:
        snap = read_flags(flags, stream, host)
        if (snap[which] == value).all():
            return snap, ""
        if time.monotonic() > deadline:
            missing = which.nonzero().flatten()[snap[which] != value].tolist()
            return snap, (f"waited {timeout_s:.0f} s for tile_done flags {missing[:16]} to reach "
                          f"{value}; they hold {snap[missing[:16]].tolist()}")


def synchronize_or_report(what: str, event: torch.cuda.Event | None = None) -> None:
    """torch.cuda.synchronize() (or only `event`'s), and if a kernel trapped, fail with the device
    wait's record (which flag, the value wanted and seen), not a bare "unspecified launch
    failure"."""
    try:
        if event is None:
            torch.cuda.synchronize()
        else:
            event.synchronize()
    except RuntimeError as e:
        pytest.fail(f"{what}: {e}\nwait record: {torch.ops.mkernel.wait_diagnostic() or '(none)'}",
                    pytrace=False)


@pytest.mark.parametrize("config", list(HOOKED))
@pytest.mark.parametrize("m,n,k", [(1, 256, 64), (300, 520, 264), (2048, 1024, 1024)])
def test_hooked_kernel_without_hooks(config, m, n, k):
    a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(n, k, device="cuda", dtype=torch.bfloat16)
    out = poisoned_call(lambda: hooked(a, b, config=HOOKED[config]), (m, n), torch.bfloat16)
    check_gemm(out, a, b)


@isolated(timeout_s=90.0)  # gated on flags: a release that never comes ends in a trap
@pytest.mark.parametrize("config", ["coop_128x128_c2x1", "coop_128x256_c2x1", "ping_128x128_c1x2"])
def test_waits_for_a_blocks_released_one_at_a_time(config):
    """Half of A's row blocks are released; once every tile whose rows all arrived has raised its
    flag, no tile with a missing row may have (its A rows are NaN: it would also fail the final
    check). Then the rest is released and the whole output checked."""
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
    done_host = torch.zeros(done.shape, dtype=torch.int64).pin_memory()
    side = torch.cuda.Stream()
    torch.cuda.synchronize()
    ptr = poison_next_allocation((m, n), torch.bfloat16, "cuda")
    out = hooked(a, b, a_ready=a_ready, rows_per_flag=rows, a_ready_value=1, tile_done=done,
                 tile_done_value=7, config=cfg, timeout_s=30.0)
    released = nflags // 2
    rows_released = released * rows
    first_rows = torch.arange(tiles_m).repeat_interleave(tiles_n) * block_m
    complete = first_rows + block_m <= rows_released  # tiles whose A rows have all arrived
    missing = first_rows >= rows_released  # tiles none of whose A rows has arrived
    with torch.cuda.stream(side):  # copy engines: they run beside the persistent kernel
        for i in range(released):
            a[i * rows:(i + 1) * rows].copy_(a_src[i * rows:(i + 1) * rows], non_blocking=True)
            a_ready[i:i + 1].copy_(one, non_blocking=True)
    partial, timed_out = wait_for_flags(done, complete, 7, side, done_host)
    with torch.cuda.stream(side):
        for i in range(released, nflags):
            a[i * rows:(i + 1) * rows].copy_(a_src[i * rows:(i + 1) * rows], non_blocking=True)
            a_ready[i:i + 1].copy_(one, non_blocking=True)
    synchronize_or_report("the GEMM waiting on its A rows")
    assert_poisoned(out, ptr)  # checked once the kernel is released: a failed assert
    # with the kernel still waiting on its A rows would end in a timeout that poisons the context
    assert not timed_out, timed_out
    early = missing.nonzero().flatten()[partial[missing] != 0].tolist()
    assert not early, f"tiles {early} finished before their A rows arrived"
    assert (done.view(tiles_m, tiles_n) == 7).all()
    check_gemm(out, a_src, b)


@isolated(timeout_s=90.0)  # gated on a flag: a bug that never releases it ends in a trap
@pytest.mark.parametrize("config", ["coop_128x128_c2x1", "coop_128x256_c2x1", "ping_128x128_c1x2"])
def test_tile_data_is_visible_when_its_tile_done_flag_is(config):
    """What a consumer of tile_done (the fused ops' communication roles) relies on: once another
    stream sees a tile's flag, the tile's data is in memory. A watcher stream waits on each tile's
    flag (cuStreamWaitValue64) and at once copies the tile out of the output with a copy engine
    (cuMemcpy2DAsync). Every copy must equal the final tile bit for bit: a flag raised before the
    tile's stores reached memory lets the copy catch the NaN-poisoned output.

    The race is arranged so that it cannot deadlock: the GEMM (4 SMs: a fraction of a ms) waits on
    one A-rows flag in pinned host memory, which the CPU sets with a plain store once the whole
    watcher is queued. So no tile can finish before its wait is queued, and no stream stands
    between the release and the kernel. (Device run s6run1: the release was queued on a third
    stream after the watcher's work, the kernel never saw it and trapped after its 30 s bound.)
    Every first call (driver entry points, the GEMM's module) is made once before the race."""
    drv = Driver()
    cfg = HOOKED[config]
    m, n, k, value = 1000, 1000, 2048, 9  # ragged: the last row and column of tiles are partial
    tiles_m, tiles_n, _, block_m, block_n = torch.ops.mkernel.gemm_tile_counts(cfg, m, n)
    tiles = tiles_m * tiles_n
    a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(n, k, device="cuda", dtype=torch.bfloat16)
    gate_host, gate = drv.host_flags(1)
    done = torch.zeros(tiles, device="cuda", dtype=torch.int64)
    # tile t's copy lands at tile t's place
    copies = torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16)
    watcher = torch.cuda.Stream()
    copied = [torch.cuda.Event(enable_timing=True) for _ in range(tiles)]
    gemm_end = torch.cuda.Event(enable_timing=True)

    def tile(t):
        tm, tn = divmod(t, tiles_n)
        rows = slice(tm * block_m, min((tm + 1) * block_m, m))
        return rows, slice(tn * block_n, min((tn + 1) * block_n, n))

    # Warm-up, out of the race: the gate read from host memory (wants >= 0: open), the flags'
    # wait and the tile copy on the watcher.
    warm = hooked(a, b, a_ready=gate, rows_per_flag=m, a_ready_value=0, tile_done=done,
                  tile_done_value=1, config=cfg, sm_count=4, timeout_s=30.0)
    torch.cuda.synchronize()
    r, c = tile(0)
    assert drv.wait_geq(watcher, done[0:1], 1) == 0
    assert drv.copy_2d(watcher, copies[r, c], warm[r, c]) == 0
    watcher.synchronize()
    assert torch.equal(copies[r, c], warm[r, c])
    del warm
    done.zero_()
    copies.fill_(float("nan"))
    torch.cuda.synchronize()

    ptr = poison_next_allocation((m, n), torch.bfloat16, "cuda")
    out = hooked(a, b, a_ready=gate, rows_per_flag=m, a_ready_value=1, tile_done=done,
                 tile_done_value=value, config=cfg, sm_count=4, timeout_s=30.0)
    failed_call = ""
    try:
        for t in range(tiles):
            r, c = tile(t)
            rc = drv.wait_geq(watcher, done[t:t + 1], value)
            rc = rc or drv.copy_2d(watcher, copies[r, c], out[r, c])
            if rc != 0:
                failed_call = f"queuing tile {t}'s wait or copy failed: CUresult {rc}"
                break
            copied[t].record(watcher)
        gemm_end.record()  # behind the GEMM on its stream (the gate still holds it)
    finally:
        gate_host[0] = 1  # the CPU's store opens the gate, whatever happened above
    synchronize_or_report("the gated GEMM", gemm_end)  # not the device: the watcher may be stuck
    unset = (done.cpu() != value).nonzero().flatten().tolist()
    if unset:  # release the watcher before failing, or it would wait forever
        done.fill_(value)
        torch.cuda.synchronize()
        pytest.fail(f"tile_done flags {unset[:16]} never reached {value}")
    watcher.synchronize()
    assert not failed_call, failed_call
    assert_poisoned(out, ptr)
    check_gemm(out, a, b)
    for t in range(tiles):
        r, c = tile(t)
        got = copies[r, c]
        assert torch.equal(got, out[r, c]), (
            f"tile {t} (rows {r.start}:{r.stop}, cols {c.start}:{c.stop}) copied when its flag was "
            f"seen differs from its final data ({int(got.isnan().sum())} NaN): flag before data")
    raced = sum(copied[t].elapsed_time(gemm_end) > 0 for t in range(tiles))
    assert raced > 0, "no tile was copied before the GEMM ended: the race under test never ran"


@pytest.mark.parametrize("config", ["coop_128x128_c2x1", "ping_128x128_c1x2"])
def test_custom_m_order_and_few_sms(config):
    cfg = HOOKED[config]
    m, n, k = 1500, 768, 256
    _, _, units_m, _, _ = torch.ops.mkernel.gemm_tile_counts(cfg, m, n)
    order = torch.randperm(units_m, dtype=torch.int32).cuda()
    a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(n, k, device="cuda", dtype=torch.bfloat16)
    for sms in (2, 10, 0):
        out = poisoned_call(lambda: hooked(a, b, m_order=order, config=cfg, sm_count=sms), (m, n),
                            torch.bfloat16)
        check_gemm(out, a, b, what=f"{sms} SMs: ")


def test_bad_hook_arguments_named():
    a = torch.randn(256, 64, device="cuda", dtype=torch.bfloat16)
    coop = HOOKED["coop_128x128_c2x1"]
    with pytest.raises(RuntimeError, match="a_ready needs 2 flags"):
        hooked(a, a, a_ready=torch.zeros(1, device="cuda", dtype=torch.int64), rows_per_flag=128, config=coop)
    with pytest.raises(RuntimeError, match="a_ready must be int64"):
        hooked(a, a, a_ready=torch.zeros(4, device="cuda", dtype=torch.int32), config=coop)
    with pytest.raises(RuntimeError, match="m_order must hold"):
        hooked(a, a, m_order=torch.zeros(5, device="cuda", dtype=torch.int32), config=coop)
    with pytest.raises(RuntimeError, match="no hooked kernel"):
        hooked(a, a, config=GEMM_CONFIGS["ping_64x256_c1x1"])
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
        out = poisoned_call(lambda: hooked(a, b, tile_done=done, tile_done_value=sms + 3, config=cfg,
                                           sm_count=sms), (m, n), torch.float16)
        check_gemm(out, a, b, what=f"{sms} SMs: ")
        assert (done == sms + 3).all(), done.view(tiles_m, tiles_n)


TIMEOUT = """
import torch, mkernel
a = torch.randn(512, 128, device="cuda", dtype=torch.bfloat16)
flags = torch.zeros(4, device="cuda", dtype=torch.int64)
cfg = mkernel.ops.GEMM_CONFIGS["coop_128x128_c2x1"]
torch.ops.mkernel.gemm_hooked(a, a, flags, 128, 5, None, 1, None, cfg, 0, 0, 0, 0.5)
try:
    torch.cuda.synchronize()
except Exception as e:
    print("FAILED:", type(e).__name__)
print("DIAG:", torch.ops.mkernel.wait_diagnostic())
"""


def test_a_wait_that_never_completes_times_out_with_a_report():
    """The trap is the point: in a process of its own, outside any MPS server (trap_safe_env)."""
    with trap_safe_env() as env:
        r = subprocess.run([sys.executable, "-c", TIMEOUT], capture_output=True, text=True,
                           timeout=120, env=env)
    assert "FAILED:" in r.stdout, r.stdout + r.stderr
    diag = r.stdout.split("DIAG:", 1)[1]
    assert "mkernel.gemm_hooked" in diag and "A-rows flag" in diag, diag
    assert "wants >= 5" in diag and "saw 0" in diag, diag
