"""torch.ops.mkernel.ring_attention_compute_alone — the ring's compute-alone ceiling
(csrc/ring_attention.cpp; benchmarks/bench_ring_attention.py's `ceiling`): rank r's attention
for its query shard against the W K/V shards held locally in the ring's order (position p holds
rank (r + 1 + p) mod W's shard, the own one last), causal over the zigzag layout.

Checked against an independent float64 attention over the WHOLE sequence in global order (the
standard bottom-right causal mask), its rows picked at the rank's zigzag positions: so the
op's ring order and zigzag positions are tested, not assumed. The CPU tests run the op's fp32
reference kernel; the CUDA tests the whole-sequence mode's own engine launch (both hook
policies: bf16 d=128 runs the forwarding policy's kernel with nothing to forward, fp16 the
KV-wait kernel), outputs poisoned first, and the KV-wait options (the flag skip, the flag cache
across tiles, the late claim, the static order) bit for bit equal to the default.
"""

from __future__ import annotations

import pytest
import torch

import mkernel  # noqa: F401  (registers torch.ops.mkernel)

from .reference import attention_ref

OP = "ring_attention_compute_alone"


def zigzag_rows(s: int, rank: int, world: int) -> torch.Tensor:
    """Global positions of rank's zigzag shard of length s (chunks rank and 2W-1-rank)."""
    c = s // 2
    i = torch.arange(c)
    return torch.cat([i + rank * c, i + (2 * world - 1 - rank) * c])


def case(b, s, h, h_kv, d, world, causal, dtype, device, seed):
    """Global q/k/v [b, W*s, ..] and, per rank, (q shard, k_ring, v_ring, global query rows)."""
    gen = torch.Generator(device="cpu").manual_seed(seed)
    n = world * s
    q, k, v = (torch.randn(b, n, hh, d, generator=gen).to(dtype) for hh in (h, h_kv, h_kv))
    shard = (lambda r: zigzag_rows(s, r, world)) if causal else (lambda r: torch.arange(r * s, (r + 1) * s))
    per_rank = []
    for r in range(world):
        ring = [shard((r + 1 + p) % world) for p in range(world)]
        k_ring = torch.cat([k[:, rows] for rows in ring], dim=1)
        v_ring = torch.cat([v[:, rows] for rows in ring], dim=1)
        per_rank.append(tuple(t.to(device).contiguous() for t in (q[:, shard(r)], k_ring, v_ring))
                        + (shard(r),))
    return (q, k, v), per_rank


def check(out, lse, ref, ref_lse, rows, tol):
    want, want_lse = ref[:, rows], ref_lse[:, :, rows]
    rel = ((out.double().cpu() - want).norm() / want.norm()).item()
    assert rel < tol, rel
    assert torch.allclose(lse.double().cpu(), want_lse, rtol=1e-3, atol=1e-3)
    return rel


@pytest.mark.parametrize("world,causal", [(2, False), (2, True), (3, True), (4, True), (4, False)])
def test_cpu_matches_the_whole_sequence(world, causal):
    (q, k, v), per_rank = case(1, 12, 4, 2, 16, world, causal, torch.float32, "cpu", 7 + world)
    ref, ref_lse = attention_ref(q, k, v, causal)
    for r, (qs, k_ring, v_ring, rows) in enumerate(per_rank):
        out, lse = getattr(torch.ops.mkernel, OP)(qs, k_ring, v_ring, r, world, causal)
        check(out, lse, ref, ref_lse, rows, 1e-5)


def test_bad_arguments_are_named():
    q = torch.randn(1, 8, 2, 16)
    k = torch.randn(1, 16, 2, 16)
    with pytest.raises(ValueError, match="rank"):
        getattr(torch.ops.mkernel, OP)(q, k, k, 2, 2, False)
    with pytest.raises(ValueError, match="k_ring"):
        getattr(torch.ops.mkernel, OP)(q, k[:, :15], k[:, :15], 0, 2, False)
    with pytest.raises(ValueError, match="zigzag"):
        getattr(torch.ops.mkernel, OP)(q, k[:, :12], k[:, :12], 0, 2, True)


needs_gpu = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


@needs_gpu
@pytest.mark.parametrize("world,causal,dtype,h_kv,s", [
    (2, False, torch.bfloat16, 2, 384),   # forwarding policy's kernel, nothing to forward
    (2, True, torch.bfloat16, 2, 512),    # zigzag, 2 query tiles per chunk
    (4, True, torch.bfloat16, 1, 256),    # MQA, W = 4
    (2, True, torch.float16, 2, 256),     # the KV-wait policy's kernel (fp16)
    (3, False, torch.float16, 4, 256),
])
def test_cuda_matches_the_whole_sequence(world, causal, dtype, h_kv, s, monkeypatch):
    (q, k, v), per_rank = case(2, s, 4, h_kv, 128, world, causal, dtype, "cuda", 11 + world)
    ref, ref_lse = attention_ref(q.double(), k.double(), v.double(), causal)
    for r, (qs, k_ring, v_ring, rows) in enumerate(per_rank):
        # Poison the caching allocator's blocks the op's outputs will take.
        poison = [torch.full_like(qs, float("nan")),
                  torch.full((qs.shape[0], qs.shape[2], qs.shape[1]), float("nan"), device="cuda")]
        del poison
        out, lse = getattr(torch.ops.mkernel, OP)(qs, k_ring, v_ring, r, world, causal)
        check(out, lse, ref, ref_lse, rows, 1e-2)
        # ring12's flag skip (the default since s11run1) off: the same loads of the same data,
        # the same bits.
        monkeypatch.setenv("MKERNEL_RING_FLAG_SKIP", "0")
        out2, lse2 = getattr(torch.ops.mkernel, OP)(qs, k_ring, v_ring, r, world, causal)
        monkeypatch.delenv("MKERNEL_RING_FLAG_SKIP")
        assert torch.equal(out, out2) and torch.equal(lse, lse2)
        # Session 25's defaults off one by one (the flag cache across tiles, the late claim) and
        # the static order: the same tiles' arithmetic, the same bits.
        for knob, value in [("MKERNEL_RING_FLAG_CACHE", "0"), ("MKERNEL_RING_LATE_CLAIM", "0"),
                            ("MKERNEL_RING_TILES", "static")]:
            monkeypatch.setenv(knob, value)
            out3, lse3 = getattr(torch.ops.mkernel, OP)(qs, k_ring, v_ring, r, world, causal)
            monkeypatch.delenv(knob)
            assert torch.equal(out, out3) and torch.equal(lse, lse3), knob


@needs_gpu
@pytest.mark.parametrize("causal", [False, True])
def test_hooked_flag_skip_is_bit_for_bit(causal, monkeypatch):
    """attention_hooked with 3 key blocks per flag on ragged lengths, flags released before the
    launch: MKERNEL_RING_FLAG_SKIP=1 gives the default's bits."""
    gen = torch.Generator(device="cuda").manual_seed(5)
    q = torch.randn(2, 700, 8, 128, device="cuda", dtype=torch.bfloat16, generator=gen)
    k = torch.randn(2, 900, 2, 128, device="cuda", dtype=torch.bfloat16, generator=gen)
    v = torch.randn(2, 900, 2, 128, device="cuda", dtype=torch.bfloat16, generator=gen)
    flags = torch.full((2 * 2 * 3,), 5, dtype=torch.int64, device="cuda")  # 8 blocks, 3 per flag
    out, lse = torch.ops.mkernel.attention_hooked(q, k, v, flags, 5, 3, causal)
    monkeypatch.setenv("MKERNEL_RING_FLAG_SKIP", "1")
    out2, lse2 = torch.ops.mkernel.attention_hooked(q, k, v, flags, 5, 3, causal)
    assert torch.equal(out, out2) and torch.equal(lse, lse2)
    # ... and with the flags remembered across tiles (8 query heads over 2 flag rows per batch:
    # tiles revisit rows), alone and with the skip.
    monkeypatch.setenv("MKERNEL_RING_FLAG_CACHE", "1")
    out3, lse3 = torch.ops.mkernel.attention_hooked(q, k, v, flags, 5, 3, causal)
    monkeypatch.setenv("MKERNEL_RING_FLAG_SKIP", "0")
    out4, lse4 = torch.ops.mkernel.attention_hooked(q, k, v, flags, 5, 3, causal)
    assert torch.equal(out, out3) and torch.equal(lse, lse3)
    assert torch.equal(out, out4) and torch.equal(lse, lse4)
    ref, _ = attention_ref(q, k, v, causal)
    assert ((out2.double() - ref).norm() / ref.norm()).item() < 1e-2


@needs_gpu
@pytest.mark.parametrize("world,s,h_kv", [
    (2, 384, 2),   # 768 keys = 5 x 144 + 48: the narrow top block; 128-key flags straddled
    (3, 256, 4),   # 768 keys again, 3 shards of 256
    (2, 1024, 1),  # MQA, 2048 keys: several blocks per flag
])
def test_cuda_wide_tile_matches_the_whole_sequence(world, s, h_kv, monkeypatch):
    """MKERNEL_RING_BLOCK_N=144: the whole mode's non-causal bf16 engine on the 128x144 tile, its
    KV flags counted by keys (a block may wait for two), against float64; with the flag skip and
    cache off as well (the same loads, the same bits)."""
    (q, k, v), per_rank = case(2, s, 4, h_kv, 128, world, False, torch.bfloat16, "cuda", 23 + world)
    ref, ref_lse = attention_ref(q.double(), k.double(), v.double(), False)
    monkeypatch.setenv("MKERNEL_RING_BLOCK_N", "144")
    for r, (qs, k_ring, v_ring, rows) in enumerate(per_rank):
        poison = [torch.full_like(qs, float("nan")),
                  torch.full((qs.shape[0], qs.shape[2], qs.shape[1]), float("nan"), device="cuda")]
        del poison
        out, lse = getattr(torch.ops.mkernel, OP)(qs, k_ring, v_ring, r, world, False)
        check(out, lse, ref, ref_lse, rows, 1e-2)
        monkeypatch.setenv("MKERNEL_RING_FLAG_SKIP", "0")
        monkeypatch.setenv("MKERNEL_RING_FLAG_CACHE", "0")
        out2, lse2 = getattr(torch.ops.mkernel, OP)(qs, k_ring, v_ring, r, world, False)
        monkeypatch.delenv("MKERNEL_RING_FLAG_SKIP")
        monkeypatch.delenv("MKERNEL_RING_FLAG_CACHE")
        assert torch.equal(out, out2) and torch.equal(lse, lse2)

