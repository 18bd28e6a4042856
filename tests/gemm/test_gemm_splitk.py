"""Split-K on the hooked kernel: K cut into slices whose partial sums the last
slice to finish adds in slice order. Checked against a float64 reference on
ragged shapes with poisoned outputs, bitwise reproducibility, workspace reuse
across shapes (the tickets must come back to zero), and the hooks (A waits,
one tile_done per tile) with slices in flight."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

import mkernel
from mkernel.ops import GEMM_CONFIGS
from tests.gemm.checks import assert_poisoned, check_gemm, poison_next_allocation, poisoned_call
from tests.gemm.test_gemm_engine import HOPPER
from tests.gemm.test_gemm_hooks import HOOKED, hooked, read_flags, synchronize_or_report
from tests.isolated import isolated

# Split-K lives in the cooperative hooked kernels (the ping-pong one rejects it: test_gemm_hooks).
SPLIT_CONFIGS = dict({c: i for c, i in HOOKED.items() if c.startswith("coop")},
                     coop_128x256_c1x2=GEMM_CONFIGS["coop_128x256_c1x2"])


def test_bad_splits_rejected_on_cpu():
    a = torch.randn(8, 16)
    with pytest.raises(ValueError, match="splits must be >= 0"):
        mkernel.gemm(a, a, splits=-1)
    with pytest.raises(ValueError, match="splits > 1 needs an explicit cooperative config"):
        mkernel.gemm(a, a, splits=2)


@pytest.mark.gpu
@pytest.mark.skipif(not HOPPER, reason="needs a Hopper (sm_90) GPU")
@pytest.mark.parametrize("config", list(SPLIT_CONFIGS))
@pytest.mark.parametrize("m,n,k", [(1, 256, 1024), (130, 520, 1000), (300, 1024, 4096)])
@pytest.mark.parametrize("dtype, splits",  # fp16 once per shape and config
                         [(torch.bfloat16, 2), (torch.bfloat16, 3), (torch.bfloat16, 7),
                          (torch.float16, 3)], ids=["bf16-2", "bf16-3", "bf16-7", "fp16-3"])
def test_split_k_matches_reference(config, m, n, k, dtype, splits):
    a = torch.randn(m, k, device="cuda", dtype=dtype)
    b = torch.randn(n, k, device="cuda", dtype=dtype)
    out = poisoned_call(lambda: mkernel.gemm(a, b, config=config, splits=splits), (m, n), dtype)
    check_gemm(out, a, b)


@pytest.mark.gpu
@pytest.mark.skipif(not HOPPER, reason="needs a Hopper (sm_90) GPU")
def test_split_k_is_bitwise_reproducible_and_reuses_its_workspace():
    # Shapes alternate so one stream's workspace is reused by differently tiled
    # launches: a ticket left non-zero would make a slice reduce too early.
    shapes = [(128, 8192, 3584), (64, 2048, 8192), (200, 1536, 2048)]
    runs = {}
    for rep in range(3):
        for m, n, k in shapes:
            torch.manual_seed(m * 7 + k)
            a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
            b = torch.randn(n, k, device="cuda", dtype=torch.bfloat16)
            out = poisoned_call(lambda: mkernel.gemm(a, b, config="coop_128x256_c1x2", splits=5),
                                (m, n), torch.bfloat16)
            # CUTLASS's stream-K kernel between: its scratch must not land on the tickets.
            mkernel.gemm(a, b, config="coop_128x128_streamk")
            if rep == 0:
                check_gemm(out, a, b)
                runs[(m, n, k)] = out
            else:
                assert torch.equal(out, runs[(m, n, k)]), f"split-K sum changed between runs for {m}x{n}x{k}"


@pytest.mark.gpu
@pytest.mark.skipif(not HOPPER, reason="needs a Hopper (sm_90) GPU")
@pytest.mark.parametrize("m,n,k", [(128, 8192, 3584), (1, 4096, 4096), (256, 7168, 2048), (77, 1024, 8192)])
def test_auto_plan_for_small_m(m, n, k):
    """Decode-sized M picks split-K by shape; the result must not depend on it."""
    a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(n, k, device="cuda", dtype=torch.bfloat16)
    check_gemm(poisoned_call(lambda: mkernel.gemm(a, b), (m, n), torch.bfloat16), a, b)
    one = SimpleNamespace(handle=0, world_size=1)
    for op in (mkernel.ag_gemm, mkernel.gemm_rs, mkernel.gemm_ar):
        out = poisoned_call(lambda op=op: op(a, b, group=one), (m, n), torch.bfloat16)
        check_gemm(out, a, b, what=f"{op.__name__}: ")


@pytest.mark.gpu
@pytest.mark.skipif(not HOPPER, reason="needs a Hopper (sm_90) GPU")
def test_split_k_rejected_on_a_non_cooperative_config():
    a = torch.randn(128, 512, device="cuda", dtype=torch.bfloat16)
    with pytest.raises(ValueError, match="splits > 1 needs a cooperative"):
        mkernel.gemm(a, a, config="ping_64x256_c1x1", splits=2)
    # The hooked kernel's ping-pong config takes no split-K either (session 44's fuzz: it was a
    # launch failure, a RuntimeError, not a refusal of the argument).
    with pytest.raises(ValueError, match="ping_128x128_c1x2 is not one"):
        mkernel.gemm(a, a, config="ping_128x128_c1x2", splits=3)
    # More output tiles than split-K's ticket area holds: named before any launch.
    big = torch.randn(16512, 64, device="cuda", dtype=torch.bfloat16)
    with pytest.raises(ValueError, match="at most 16384 output tiles"):
        mkernel.gemm(big, big, config="coop_128x128_c2x1", splits=2)


@pytest.mark.gpu
@pytest.mark.skipif(not HOPPER, reason="needs a Hopper (sm_90) GPU")
@isolated(timeout_s=90.0)  # gated on flags: a release that never comes ends in a trap
def test_hooks_with_split_k():
    """Every slice waits for its A rows; each tile is signalled once, after the
    slice that completes it stored the full sum."""
    cfg = SPLIT_CONFIGS["coop_128x256_c1x2"]
    m, n, k, rows = 256, 4096, 4096, 128
    tiles_m, tiles_n, _, _, _ = torch.ops.mkernel.gemm_tile_counts(cfg, m, n)
    a_src = torch.randn(m, k, dtype=torch.bfloat16).pin_memory()
    b = torch.randn(n, k, device="cuda", dtype=torch.bfloat16)
    a = torch.full((m, k), float("nan"), device="cuda", dtype=torch.bfloat16)
    a_ready = torch.zeros(m // rows, device="cuda", dtype=torch.int64)
    done = torch.zeros(tiles_m * tiles_n, device="cuda", dtype=torch.int64)
    one = torch.ones(1, dtype=torch.int64).pin_memory()
    done_host = torch.zeros(done.shape, dtype=torch.int64).pin_memory()
    side = torch.cuda.Stream()
    torch.cuda.synchronize()
    ptr = poison_next_allocation((m, n), torch.bfloat16, "cuda")
    out = hooked(a, b, a_ready=a_ready, rows_per_flag=rows, tile_done=done, tile_done_value=3,
                 config=cfg, timeout_s=30.0, splits=4)
    # Ordered by the flags, not by sleeping: before any A row is released no tile can be done.
    before = read_flags(done, side, done_host)
    with torch.cuda.stream(side):
        for i in range(m // rows):
            a[i * rows:(i + 1) * rows].copy_(a_src[i * rows:(i + 1) * rows], non_blocking=True)
            a_ready[i:i + 1].copy_(one, non_blocking=True)
    synchronize_or_report("the split-K GEMM waiting on its A rows")
    assert_poisoned(out, ptr)  # checked once the kernel is released: a failed assert
    # with the kernel still waiting on its A rows would end in a timeout that poisons the context
    assert (before == 0).all(), f"tiles signalled before their A rows arrived: {before.nonzero().flatten().tolist()}"
    assert (done == 3).all()
    check_gemm(out, a_src, b)
