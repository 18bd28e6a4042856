"""mkernel.ring_attention through the host reference backend (CPU tensors, W local processes in
emulated nodes: K/V shards travel FIFO -> Go proxy -> loopback/tcp) against a float64
reference of the full sequence; causal in the zigzag layout; GQA; fp32/bf16/fp16; gradients
(the ring backward: per-block backward with the forward's LSE, dK/dV reduce-scattered) against
float64 autograd."""

from __future__ import annotations

import pytest
import torch

import mkernel
from mkernel.ops import zigzag_shard, zigzag_unshard
from tests.host.conftest import ROOT, check_ranks
from tests.launch import run_ranks

from .reference import attention_ref

RING_MAIN = f"""
import sys
sys.path.insert(0, {str(ROOT)!r})
from tests.attention.ring_rank import main
main()
"""


@pytest.mark.multiproc
@pytest.mark.parametrize("world, nodes", [(2, 1), (2, 2), (4, 2)])
def test_ring_attention_matches_reference(world, nodes) -> None:
    res = run_ranks(RING_MAIN, world, nodes=nodes, timeout=150, fork=True)
    check_ranks(res)


@pytest.mark.multiproc
@pytest.mark.parametrize("world, nodes", [(2, 1), (3, 2)])
def test_ring_attention_host_fuzz(world, nodes) -> None:
    """Random cases (ring_rank.fuzz: MKERNEL_FUZZ_CASES from MKERNEL_FUZZ_SEED, 6 by default), the
    forward and the fp32 gradients, an odd world size across two emulated nodes too."""
    from tests.fuzz.problems import rank_env

    env = {"RING_SUITE": "fuzz", **rank_env(6)}
    res = run_ranks(RING_MAIN, world, nodes=nodes, timeout=240, fork=True, env=env)
    check_ranks(res)
    assert all(r.stdout.count("FUZZ ") == int(env["FUZZ_CASES"]) for r in res)


CP_MAIN = f"""
import sys
sys.path.insert(0, {str(ROOT)!r})
from tests.attention.cp_attention_rank import main
main()
"""


@pytest.mark.multiproc
@pytest.mark.parametrize("world, nodes", [(2, 1), (4, 2)])
def test_context_parallel_attention_layer(world, nodes) -> None:
    """mkernel.nn.ContextParallelAttention (Megatron's core-attention call, [s, b, h, d] in,
    [s, b, h * d] out) on every rank: output and input gradients against float64 autograd."""
    res = run_ranks(CP_MAIN, world, nodes=nodes, timeout=150, fork=True)
    check_ranks(res)


def test_context_parallel_attention_refuses_what_it_cannot_do() -> None:
    from mkernel import runtime
    from mkernel.nn import ContextParallelAttention

    had_default = runtime._default is not None and not runtime._default.closed
    ctx = mkernel.init()
    try:
        class Config:
            attention_dropout = 0.1

        with pytest.raises(ValueError, match="attention_dropout"):
            ContextParallelAttention(Config(), group=ctx)
        with pytest.raises(ValueError, match="attn_mask_type 'padding'"):
            ContextParallelAttention(attn_mask_type="padding", group=ctx)
        with pytest.raises(ValueError, match="self-attention only"):
            ContextParallelAttention(attention_type="cross", group=ctx)
        layer = ContextParallelAttention(group=ctx)
        q, kv = torch.randn(4, 1, 4, 8), torch.randn(4, 1, 2, 8)
        with pytest.raises(ValueError, match="attention_mask must be None"):
            layer(q, kv, kv, torch.ones(1, 1, 4, 4, dtype=torch.bool))
        with pytest.raises(ValueError, match="packed_seq_params"):
            layer(q, kv, kv, packed_seq_params=object())
        with pytest.raises(ValueError, match=r"key \(4, 1, 2, 4\)"):
            layer(q, torch.randn(4, 1, 2, 4), torch.randn(4, 1, 2, 4))
        with pytest.raises(ValueError, match="not a multiple of key's 3"):
            layer(q, torch.randn(4, 1, 3, 8), torch.randn(4, 1, 3, 8))
        with pytest.raises(ValueError, match=r"query must be \[s, b, heads"):
            layer(q[0], kv, kv)
        # World 1: plain attention, [s, b, h * d], the module's no-mask override per call.
        out = layer(q, kv, kv, attn_mask_type="no_mask")
        ref, _ = attention_ref(q.transpose(0, 1), kv.transpose(0, 1), kv.transpose(0, 1), False)
        ref = ref.transpose(0, 1).reshape(4, 1, 32)
        assert out.shape == (4, 1, 32)
        assert ((out.double() - ref).norm() / ref.norm()).item() < 1e-5
    finally:
        if not had_default:
            ctx.close()


def test_zigzag_roundtrip_and_balance() -> None:
    x = torch.arange(2 * 16).reshape(2, 16)
    shards = [zigzag_shard(x, r, 4) for r in range(4)]
    assert torch.equal(zigzag_unshard(shards), x)
    assert shards[0][0].tolist() == [0, 1, 14, 15] and shards[3][0].tolist() == [6, 7, 8, 9]
    with pytest.raises(ValueError, match="multiple of 2"):
        zigzag_shard(torch.zeros(1, 6), 0, 4)


@pytest.mark.parametrize("causal", [False, True])
def test_world_one_is_plain_attention(causal) -> None:
    from mkernel import runtime

    had_default = runtime._default is not None and not runtime._default.closed
    ctx = mkernel.init()
    try:
        gen = torch.Generator().manual_seed(3)
        q = torch.randn(1, 10, 4, 16, generator=gen)
        k = torch.randn(1, 10, 2, 16, generator=gen)
        v = torch.randn(1, 10, 2, 16, generator=gen)
        out, lse = mkernel.ring_attention(q, k, v, causal=causal, group=ctx)
        ref, ref_lse = attention_ref(q, k, v, causal)
        assert ((out.double() - ref).norm() / ref.norm()).item() < 1e-5
        assert torch.allclose(lse.double(), ref_lse, rtol=1e-5, atol=1e-5)
    finally:
        if not had_default:
            ctx.close()


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_world_one_on_cuda_runs_the_engine() -> None:
    from mkernel import runtime

    had_default = runtime._default is not None and not runtime._default.closed
    ctx = mkernel.init()
    try:
        q, k, v = (torch.randn(1, 300, 4, 128, device="cuda", dtype=torch.bfloat16) for _ in range(3))
        out, lse = mkernel.ring_attention(q, k, v, causal=True, group=ctx)
        ref, ref_lse = mkernel.attention(q, k, v, causal=True)
        assert torch.equal(out, ref) and torch.equal(lse, ref_lse)
    finally:
        if not had_default:
            ctx.close()


@pytest.mark.parametrize("world", [1, 2, 3, 4, 8])
def test_ring_steps_cover_the_zigzag_causal_mask_once(world) -> None:
    """The per-step work split of the CUDA ring and of the backward (mkernel._ring_backward.
    ring_steps): over all steps, every (query, key) pair a causal zigzag shard may see is
    attended exactly once, and no other pair."""
    from mkernel._ring_backward import ring_steps

    s = 6
    pos = torch.arange(2 * world * (s // 2))
    shards = [zigzag_shard(pos.unsqueeze(0), r, world)[0] for r in range(world)]
    for rank in range(world):
        qp = shards[rank]
        want = torch.cat([(shards[src].unsqueeze(0) <= qp.unsqueeze(1)) for src in range(world)], 1)
        got = torch.zeros(s, world * s, dtype=torch.int64)
        for src, qr, kr, causal in ring_steps(rank, world, True, s):
            block = torch.ones(qr.stop - qr.start, kr.stop - kr.start, dtype=torch.int64)
            if causal:  # bottom-right aligned, as the engine
                block = torch.ones_like(block).tril(kr.stop - kr.start - (qr.stop - qr.start))
            got[qr, src * s + kr.start:src * s + kr.stop] += block
        assert got.max() <= 1 and torch.equal(got.bool(), want), (rank, got, want)


@pytest.mark.parametrize("s_kv", [None, 4, 9])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("world", [1, 2, 3, 4, 8])
def test_ring_groups_are_the_ring_steps_blocks(world, causal, s_kv) -> None:
    """The backward's grouped calls (mkernel._ring_backward.ring_groups) attend exactly the
    (query, key) pairs of the ring's steps, each once, with one causal group at most (the own
    shard, square) and at most three groups at any W; non-causal, every key of every source's
    shard — also where K/V shards are shorter or longer than the queries' (s_kv)."""
    from mkernel._ring_backward import ring_groups, ring_steps

    if causal and s_kv is not None:
        pytest.skip("causal zigzag shards have as many keys as queries")
    s = 6
    n = s if s_kv is None else s_kv  # keys a shard
    for rank in range(world):
        want = torch.zeros(s, world * n, dtype=torch.int64)
        for src, qr, kr, cz in ring_steps(rank, world, causal, s, s_kv):
            block = torch.ones(qr.stop - qr.start, kr.stop - kr.start, dtype=torch.int64)
            want[qr, src * n + kr.start:src * n + kr.stop] += block.tril() if cz else block
        if not causal:
            assert torch.equal(want, torch.ones_like(want)), (rank, want)
        got = torch.zeros_like(want)
        groups = ring_groups(rank, world, causal, s, s_kv)
        assert len(groups) <= (3 if causal else 1)
        for qr, keys, cz in groups:
            assert not cz or (len(keys) == 1 and qr == slice(0, s) and keys[0][1] == slice(0, s))
            for src, kr in keys:
                block = torch.ones(qr.stop - qr.start, kr.stop - kr.start, dtype=torch.int64)
                got[qr, src * n + kr.start:src * n + kr.stop] += block.tril() if cz else block
        assert torch.equal(got, want), (rank, got, want)


@pytest.mark.parametrize("world", [1, 2, 3, 4, 8])
@pytest.mark.parametrize("s", [2, 6, 130])
def test_ring_visible_is_the_zigzag_causal_mask(world, s) -> None:
    """The native backward's ring-mode rule (mkernel._ring_backward.ring_visible, as its kernels
    apply it per source): exactly the pairs whose global zigzag positions are causal; all pairs
    when not causal."""
    from mkernel._ring_backward import ring_visible

    pos = torch.arange(world * s)
    shards = [zigzag_shard(pos.unsqueeze(0), r, world)[0] for r in range(world)]
    for rank in range(world):
        want = torch.cat([shards[src].unsqueeze(0) <= shards[rank].unsqueeze(1)
                          for src in range(world)], 1)
        assert torch.equal(ring_visible(rank, world, s, True), want), (world, s, rank)
        assert ring_visible(rank, world, s, False).all()
