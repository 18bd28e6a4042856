"""The engine's KV-wait hook (ring attention's building block): a kernel launched before its
K/V blocks are released waits for the flags, then computes exactly what the plain kernel does.
The flags are released by a copy-engine transfer from the host (the persistent kernel holds
every SM, so no kernel could release them)."""

from __future__ import annotations

import os

import time

import pytest
import torch

import mkernel
from tests.isolated import isolated

from .reference import attention_ref

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


def _inputs(b, s, s_kv, h, h_kv, d, seed):
    gen = torch.Generator(device="cuda").manual_seed(seed)
    q = torch.randn(b, s, h, d, device="cuda", dtype=torch.bfloat16, generator=gen)
    k = torch.randn(b, s_kv, h_kv, d, device="cuda", dtype=torch.bfloat16, generator=gen)
    v = torch.randn(b, s_kv, h_kv, d, device="cuda", dtype=torch.bfloat16, generator=gen)
    return q, k, v


# The mainloop variant of the hooked bf16 d=128 128x128 KV-wait kernel (attention_launch.cuh:
# KvFlagHooks runs kDefaultVariant = 9 in both causal modes). The plain default is 9 causal but
# 136 non-causal since session 9 (O in a V stage + a third K stage, measured faster; a hooked 136
# has not run on a GPU yet), so the plain side of the comparison pins variant 9: the same
# mainloop, the hooks being the only difference.
HOOKED_VARIANT = "9"


@pytest.mark.parametrize("causal", [False, True])
def test_released_flags_give_the_plain_result(causal, monkeypatch) -> None:
    """Flags released before the launch: the hooked kernel's out and lse equal, bit for bit,
    the plain kernel's with the same mainloop (variant HOOKED_VARIANT), and the reference."""
    q, k, v = _inputs(2, 500, 700, 8, 2, 128, 1)
    n_blocks = -(-700 // 128)
    flags = torch.full((2 * 2 * n_blocks,), 3, dtype=torch.int64, device="cuda")
    out, lse = torch.ops.mkernel.attention_hooked(q, k, v, flags, 3, 1, causal)
    monkeypatch.setenv("MKERNEL_ATTN_VARIANT", HOOKED_VARIANT)
    plain, plain_lse = mkernel.attention(q, k, v, causal=causal)
    monkeypatch.delenv("MKERNEL_ATTN_VARIANT")
    assert torch.equal(out, plain) and torch.equal(lse, plain_lse)
    ref, ref_lse = attention_ref(q, k, v, causal)
    assert ((out.double() - ref).norm() / ref.norm()).item() < 1e-2
    finite = torch.isfinite(ref_lse)
    assert torch.allclose(lse.double()[finite], ref_lse[finite], rtol=1e-3, atol=1e-3)


def test_split_hooked_kernel_gives_the_plain_result(monkeypatch) -> None:
    """ring11 (opt-in, MKERNEL_RING_SPLIT_MASK=1): the causal hooked KV-wait kernel with its
    masked and wholly visible KV blocks in two loops (variant 9 + bit 10) equals the plain
    variant 9 and the plain split variant 1033 bit for bit, flags released before the launch."""
    q, k, v = _inputs(2, 500, 700, 8, 2, 128, 3)
    n_blocks = -(-700 // 128)
    flags = torch.full((2 * 2 * n_blocks,), 3, dtype=torch.int64, device="cuda")
    monkeypatch.setenv("MKERNEL_RING_SPLIT_MASK", "1")
    out, lse = torch.ops.mkernel.attention_hooked(q, k, v, flags, 3, 1, True)
    monkeypatch.delenv("MKERNEL_RING_SPLIT_MASK")
    for variant in (HOOKED_VARIANT, "1033"):
        monkeypatch.setenv("MKERNEL_ATTN_VARIANT", variant)
        plain, plain_lse = mkernel.attention(q, k, v, causal=True)
        assert torch.equal(out, plain) and torch.equal(lse, plain_lse), variant
    monkeypatch.delenv("MKERNEL_ATTN_VARIANT")
    ref, ref_lse = attention_ref(q, k, v, True)
    assert ((out.double() - ref).norm() / ref.norm()).item() < 1e-2


@pytest.mark.parametrize("flag_cache", ["0", "1"])
@isolated(timeout_s=60.0)  # gated on flags: a release that never comes ends in a trap
def test_kernel_waits_for_late_flags(flag_cache: str) -> None:
    # flag_cache "1": the load lane remembers acquired flags across tiles (HookArgs::
    # remember_flags) and still waits for each one the first time.
    os.environ["MKERNEL_RING_FLAG_CACHE"] = flag_cache
    q, k, v = _inputs(1, 1000, 1000, 4, 4, 128, 2)
    flags = torch.zeros(4 * 2, dtype=torch.int64, device="cuda")  # 8 blocks, 4 per flag
    release = torch.full_like(flags, 7, device="cpu").pin_memory()
    side = torch.cuda.Stream()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    out, lse = torch.ops.mkernel.attention_hooked(q, k, v, flags, 7, 4, False, None, 20.0)
    end.record()
    time.sleep(0.3)
    finished_early = end.query()
    with torch.cuda.stream(side):
        flags.copy_(release, non_blocking=True)  # copy engine: no SM needed
    end.synchronize()  # released before any assert: a kernel left waiting would trap
    assert not finished_early, "the kernel finished before its K/V flags were released"
    assert start.elapsed_time(end) >= 250.0
    ref, ref_lse = attention_ref(q, k, v, False)
    assert ((out.double() - ref).norm() / ref.norm()).item() < 1e-2
    assert torch.allclose(lse.double(), ref_lse, rtol=1e-3, atol=1e-3)
