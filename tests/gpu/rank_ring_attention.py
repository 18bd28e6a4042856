"""What each rank process of tests/gpu/test_ring_attention.py runs: mkernel.ring_attention on the
GPU (the K/V shards rotating over the substrate's peer memory) against a float32 reference of
the whole sequence, sharded the same way (contiguous, or zigzag when causal).

Every rank draws the same full q/k/v from a seeded generator (on the CPU), takes its shard, and
computes the reference of the whole sequence itself. Outputs are poisoned first (NaN blocks of
the op's buffer sizes are freed just before the call, so the caching allocator hands them to
the op: an unwritten row or a missed merge shows up as NaN), and the op is called twice in a row
on fresh inputs (buffers and flags reused across calls without a host step).

A rank prints ``CASE {json}`` per checked call, ``ERR {json}`` for an expected failure and
``OK <rank>`` at the end. ``TEST_SUITE`` (comma-separated) picks: ``matrix``, ``graph``,
``grad``, ``grad_auto_native``, ``grad_uneven``, ``grad_arrival``, ``grad_graph``, ``kill_backward``, ``alone`` (ring12: the compute-alone ceiling op), ``layer`` (mkernel.nn.ContextParallelAttention),
``other_dims`` (head dims other than 64 / 128), ``fuzz`` (FUZZ_CASES random cases from FUZZ_SEED:
forward twice and, for half of them, the gradients), ``kill`` (ends the process). Groups spanning emulated nodes run the same suites.
"""

from __future__ import annotations

import json
import os
import random
import signal
import sys
import time

import torch
import torch.distributed as dist

import mkernel
from mkernel.ops import zigzag_shard
from tests.attention.reference import attention_ref, lse_ref

BOUND = 1e-2  # ‖out − ref‖ / ‖ref‖ for bf16/fp16 outputs
LSE_BOUND = 1e-3

# (causal, b, local s, h, h_kv, d, dtype): ragged local lengths (not multiples of the 128-key
# block), GQA, both head dims; causal shards are zigzag (two halves of s / 2). Non-causal with
# s a multiple of 128 (causal: s/2 a multiple of 128) runs the whole-sequence mode (one engine
# launch), else the per-step ring.
CASES = [
    (False, 2, 256, 8, 2, 128, torch.bfloat16),
    (False, 2, 333, 4, 2, 128, torch.bfloat16),
    (True, 1, 400, 8, 8, 128, torch.bfloat16),
    (True, 2, 384, 8, 2, 64, torch.float16),
    (False, 1, 2048, 4, 4, 64, torch.float16),  # fp16 d=64 non-causal >= 2048 queries
    (True, 1, 2304, 4, 2, 128, torch.bfloat16),  # 18 key blocks: 2 blocks per flag
    (True, 2, 512, 4, 1, 64, torch.float16),  # causal whole mode, MQA, 2 blocks per zigzag half
    # bf16 d=64 non-causal >= 2048 queries: the 192x128 tile (3 consumer warpgroups) with the
    # send kernel and claimed tiles (the forwarding policy is 128x128 only)
    (False, 1, 2048, 4, 2, 64, torch.bfloat16),
    # 384-key shards: with MKERNEL_RING_BLOCK_N=144 (W = 2: 768 keys = 5 x 144 + 48) the 128x144
    # kernel's blocks straddle the 128-key chunks' flags and its top block is narrow
    (False, 2, 384, 8, 2, 128, torch.bfloat16),
]


def emit(tag: str, payload: dict) -> None:
    sys.stdout.write(f"{tag} {json.dumps(payload)}\n")
    sys.stdout.flush()


def rel_err(out: torch.Tensor, ref: torch.Tensor) -> float:
    ref = ref.double()
    return ((out.double() - ref).norm() / ref.norm()).item()


def shard(x: torch.Tensor, rank: int, world: int, causal: bool, dim: int = 1) -> torch.Tensor:
    if causal:
        return zigzag_shard(x, rank, world, dim=dim)
    return x.chunk(world, dim=dim)[rank].contiguous()


def full_inputs(seed: int, b: int, s_full: int, h: int, h_kv: int, d: int, dtype):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(b, s_full, h, d, generator=g).to(dtype)
    k = torch.randn(b, s_full, h_kv, d, generator=g).to(dtype)
    v = torch.randn(b, s_full, h_kv, d, generator=g).to(dtype)
    return q, k, v


def poison(b: int, s: int, h: int, d: int, dtype, device) -> None:
    """NaN blocks the size of the op's buffers, freed: the op's allocations reuse them."""
    blocks = [torch.full((b, s, h, d), float("nan"), dtype=torch.float32, device=device)
              for _ in range(2)]
    blocks += [torch.full((b, s, h, d), float("nan"), dtype=dtype, device=device)
               for _ in range(2)]
    blocks += [torch.full((b, h, s), float("nan"), dtype=torch.float32, device=device)
               for _ in range(2)]
    del blocks


class Checker:
    def __init__(self, ctx, device):
        self.ctx, self.device = ctx, device
        self.rank, self.world = dist.get_rank(), dist.get_world_size()
        self.calls = 0

    def reference(self, causal, q, k, v):
        # RING_REF=fp64 (ring13's across-nodes tests): the float64 reference
        ref_dtype = torch.float64 if os.environ.get("RING_REF") == "fp64" else torch.float32
        ref, ref_lse = attention_ref(q.to(self.device), k.to(self.device), v.to(self.device),
                                     causal, dtype=ref_dtype)
        return (shard(ref, self.rank, self.world, causal).cpu(),
                shard(ref_lse, self.rank, self.world, causal, dim=2).cpu())

    def check(self, name, case, out, lse, ref, ref_lse, extra=None):
        causal, b, s, h, h_kv, d, dtype = case
        rel = rel_err(out.cpu(), ref)
        finite = torch.isfinite(lse).all().item()
        lse_rel = rel_err(lse.cpu(), ref_lse) if finite else float("nan")
        rec = {"op": name, "causal": causal, "shape": [b, s, h, h_kv, d], "dtype": str(dtype),
               "rel": rel, "lse_rel": lse_rel, "world": self.world}
        rec.update(extra or {})
        emit("CASE", rec)
        assert out.dtype == dtype and out.shape == (b, s, h, d), rec
        assert rel <= BOUND, rec
        assert finite and lse_rel <= LSE_BOUND, rec
        self.calls += 1


def matrix(c: Checker) -> None:
    pick = os.environ.get("RING_CASES")  # indices into CASES (W = 8: the short ones)
    for i, case in enumerate(CASES):
        if pick and str(i) not in pick.split(","):
            continue
        check_twice(c, "matrix", case, 100 * i)


def check_twice(c: Checker, op: str, case, seed: int) -> None:
    """The case's forward twice back to back on fresh inputs (seeds seed, seed + 1; buffers
    and flags reused), outputs poisoned first, each against the reference."""
    causal, b, s, h, h_kv, d, dtype = case
    outs = []
    for call in range(2):
        q, k, v = full_inputs(seed + call, b, s * c.world, h, h_kv, d, dtype)
        ql, kl, vl = (shard(x, c.rank, c.world, causal).to(c.device) for x in (q, k, v))
        poison(b, s, h, d, dtype, c.device)
        out, lse = mkernel.ring_attention(ql, kl, vl, causal=causal, group=c.ctx)
        outs.append((q, k, v, out, lse))
    torch.cuda.synchronize()
    for call, (q, k, v, out, lse) in enumerate(outs):
        ref, ref_lse = c.reference(causal, q, k, v)
        c.check(op, case, out, lse, ref, ref_lse, {"call": call})


def whole_mode(case) -> bool:
    """The case runs the whole-sequence mode (one engine launch; csrc/ring_attention.cpp)."""
    causal, b, s, h, h_kv, d, dtype = case
    return (s // 2) % 128 == 0 if causal else s % 128 == 0


def alone(c: Checker) -> None:
    """ring12: torch.ops.mkernel.ring_attention_compute_alone (the bench's compute-alone ceiling)
    on this rank's shard with every rank's K/V shard in the ring's order (position p: rank
    (rank + 1 + p) mod W's) against the reference, and bit for bit the ring's own output (the
    same engine kernel on the same values, without the communication)."""
    pick = os.environ.get("RING_CASES")
    for i, case in enumerate(CASES):
        if (pick and str(i) not in pick.split(",")) or not whole_mode(case):
            continue
        causal, b, s, h, h_kv, d, dtype = case
        q, k, v = full_inputs(100 * i + 7, b, s * c.world, h, h_kv, d, dtype)
        ql, kl, vl = (shard(x, c.rank, c.world, causal).to(c.device) for x in (q, k, v))
        out, lse = mkernel.ring_attention(ql, kl, vl, causal=causal, group=c.ctx)
        ring = [(c.rank + 1 + p) % c.world for p in range(c.world)]
        k_ring, v_ring = (torch.cat([shard(x, src, c.world, causal) for src in ring], dim=1)
                          .to(c.device) for x in (k, v))
        poison(b, s, h, d, dtype, c.device)
        out2, lse2 = torch.ops.mkernel.ring_attention_compute_alone(ql, k_ring, v_ring, c.rank,
                                                                    c.world, causal)
        torch.cuda.synchronize()
        same = bool(torch.equal(out, out2) and torch.equal(lse, lse2))
        ref, ref_lse = c.reference(causal, q, k, v)
        c.check("alone", case, out2, lse2, ref, ref_lse, {"bitwise_ring": same})
        assert same, f"compute-alone differs from the ring's output bit for bit (case {i})"


def graph(c: Checker) -> None:
    """Captured once, replayed with new inputs: the flags' expected values come from the
    group's device op counter, so every replay waits for its own call's data."""
    case = (True, 1, 512, 8, 2, 128, torch.bfloat16)
    causal, b, s, h, h_kv, d, dtype = case
    static = [torch.zeros(b, s, hh, d, dtype=dtype, device=c.device) for hh in (h, h_kv, h_kv)]
    mkernel.ring_attention(*static, causal=causal, group=c.ctx)  # warm-up: memory sized
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        out, lse = mkernel.ring_attention(*static, causal=causal, group=c.ctx)
    for replay in range(3):
        q, k, v = full_inputs(7000 + replay, b, s * c.world, h, h_kv, d, dtype)
        for dst, x in zip(static, (q, k, v)):
            dst.copy_(shard(x, c.rank, c.world, causal))
        out.fill_(float("nan"))
        lse.fill_(float("nan"))
        g.replay()
        torch.cuda.synchronize()
        ref, ref_lse = c.reference(causal, q, k, v)
        c.check("graph", case, out, lse, ref, ref_lse, {"replay": replay})
    # An eager call after the replays still agrees with the ranks' op counters.
    q, k, v = full_inputs(7100, b, s * c.world, h, h_kv, d, dtype)
    out2, lse2 = mkernel.ring_attention(*(shard(x, c.rank, c.world, causal).to(c.device)
                                          for x in (q, k, v)), causal=causal, group=c.ctx)
    torch.cuda.synchronize()
    ref, ref_lse = c.reference(causal, q, k, v)
    c.check("after_graph", case, out2, lse2, ref, ref_lse)


def grad(c: Checker) -> None:
    """dq/dk/dv of the local shards (the ring backward: K/V gathered, the per-block backward
    with the forward's LSE — or, with MKERNEL_ATTN_BWD=native, one launch of the native
    backward's ring mode —, dK/dV reduce-scattered in fp32) against fp32 autograd through the
    reference of the whole sequence."""
    for i, case in enumerate([(True, 1, 512, 8, 2, 128, torch.bfloat16),
                              (False, 2, 333, 4, 4, 64, torch.bfloat16)]):
        check_grads(c, "grad", case, 9000 + i, 9100 + i)


def grad_lse(c: Checker) -> None:
    """A loss that reads lse too (ring recipes that merge in torch): its gradient (a ring forward
    with v := k, a second ring backward fed dO := dlse·q) on top of out's, through the grouped
    calls and on auto's native ring rows, against fp32 autograd of the whole sequence."""
    for i, case in enumerate([(True, 1, 512, 8, 2, 128, torch.bfloat16),
                              (False, 2, 333, 4, 4, 64, torch.bfloat16),
                              (False, 1, 2048, 4, 2, 128, torch.bfloat16)]):
        check_grads(c, "grad_lse", case, 9400 + i, 9500 + i, with_lse=True)


def grad_auto_native(c: Checker) -> None:
    """dq/dk/dv through the ring backward on auto's native rows (_ring_backward.native_ring_wins:
    non-causal d = 128 on 4096-key shards, causal d = 64 on 4096-key shards), where auto runs the
    native backward's ring mode (after the all-gather, dK/dV travelling), against fp32 autograd
    of the whole sequence. Its own suite: every rank builds the reference of the whole sequence,
    W x 4096 keys."""
    from mkernel._ring_backward import native_ring_wins
    for i, case in enumerate([(False, 1, 4096, 2, 1, 128, torch.bfloat16),
                              (True, 1, 4096, 2, 2, 64, torch.float16)]):
        causal, b, s, h, h_kv, d, dtype = case
        assert native_ring_wins(torch.empty(b, s, h, d, dtype=dtype, device=c.device), causal)
        check_grads(c, "grad_auto_native", case, 9200 + i, 9300 + i)


def grad_uneven(c: Checker) -> None:
    """Non-causal shards whose K/V are longer than their queries (1024 queries, 1100 keys a
    rank, d = 128: q's length is on auto's native rows, but the native ring mode takes shards of
    one length): the output against the fp32 reference, and the backward — the grouped calls
    over each source's whole shard (session 41: they took only q's length of keys) — against
    fp32 autograd of the whole sequence."""
    b, s_q, s_kv, h, h_kv, d, dtype = 1, 1024, 1100, 4, 2, 128, torch.bfloat16
    gen = torch.Generator().manual_seed(9800)
    q = torch.randn(b, s_q * c.world, h, d, generator=gen).to(dtype)
    k, v = (torch.randn(b, s_kv * c.world, h_kv, d, generator=gen).to(dtype) for _ in range(2))
    dout = torch.randn(b, s_q * c.world, h, d, generator=gen).to(dtype)
    refs = reference_grads(c, False, q, k, v, dout)
    mine = [shard(x, c.rank, c.world, False).to(c.device).requires_grad_() for x in (q, k, v)]
    out, _ = mkernel.ring_attention(*mine, causal=False, group=c.ctx)
    ref, _ = c.reference(False, q, k, v)
    out_rel = rel_err(out.detach().cpu(), ref)
    out.backward(shard(dout, c.rank, c.world, False).to(c.device))
    torch.cuda.synchronize()
    rels = {name: rel_err(x.grad.cpu(), r) for name, x, r in zip("qkv", mine, refs)}
    rels["out"] = out_rel
    rec = {"op": "grad_uneven", "causal": False, "shape": [b, s_q, h, h_kv, d], "s_kv": s_kv,
           "rel": max(rels.values()), "rels": rels, "world": c.world}
    emit("CASE", rec)
    assert all(r <= BOUND for r in rels.values()), rec
    c.calls += 1


def empty_batch(c: Checker) -> None:
    """b = 0 on every rank, causal and not, d = 128 and 96: empty out / lse and gradients with
    no exchange (was an error inside the ring's launch), then a normal call still matches."""
    for causal in (False, True):
        for d in (128, 96):
            q, k, v = (torch.randn(0, 256, h, d, dtype=torch.bfloat16, device=c.device,
                                   requires_grad=True) for h in (4, 2, 2))
            out, lse = mkernel.ring_attention(q, k, v, causal=causal, group=c.ctx)
            assert out.shape == (0, 256, 4, d) and lse.shape == (0, 4, 256), (out.shape, lse.shape)
            grads = torch.autograd.grad(out, (q, k, v), torch.ones_like(out))
            assert [g.shape for g in grads] == [q.shape, k.shape, v.shape]
    emit("CASE", {"op": "empty_batch", "causal": True, "shape": [0, 256, 4, 2, 128], "rel": 0.0,
                  "world": c.world})
    c.calls += 1
    check_twice(c, "empty_batch_after", CASES[0], 9900)


# The native ring backward's K/V on arrival (one node, block-aligned shards; causal: zigzag
# halves a multiple of 128): non-causal GQA, causal zigzag, MQA fp16 d = 64 with 2 key blocks a
# zigzag half, non-causal d = 64 with a partial chunk flag (384 keys: 3 blocks of 128).
ARRIVAL_CASES = [
    (False, 2, 256, 8, 2, 128, torch.bfloat16),
    (True, 1, 512, 8, 2, 128, torch.bfloat16),
    (True, 2, 512, 4, 1, 64, torch.float16),
    (False, 1, 384, 4, 4, 64, torch.bfloat16),
]


# (MKERNEL_RING_BWD_ARRIVAL, MKERNEL_RING_BWD_TRAVEL, MKERNEL_RING_BWD_TRAVEL_MAX_MB) of
# grad_arrival's paths, by name: the fused ring backward (K/V on arrival, dK/dV travelling in the
# kernel), the gathered launch with its reduce-scatter, arrival with the reduce-scatter, the
# gathered launch with dK/dV travelling, the same with a receive-area cap of 0 MiB (so the
# reduce-scatter), and the fused one again.
ARRIVAL_PATHS = [("travel", "1", "1", ""), ("gathered", "0", "0", ""), ("scatter", "1", "0", ""),
                 ("gathered_travel", "0", "1", ""), ("capped", "0", "1", "0"),
                 ("travel", "1", "1", "")]
ARRIVAL_KNOBS = ("MKERNEL_RING_BWD_ARRIVAL", "MKERNEL_RING_BWD_TRAVEL",
                 "MKERNEL_RING_BWD_TRAVEL_MAX_MB")


def grad_arrival(c: Checker) -> None:
    """The native ring backward (MKERNEL_ATTN_BWD=native) by each of ARRIVAL_PATHS, on fresh
    inputs, gradients poisoned between: dq / dk / dv of each against fp32 autograd of the whole
    sequence, and dk / dv bit for bit across the paths (the same CTAs on the same values, in
    another order, summed over the ranks in rank order from 0 by the reduce-scatter and by the
    travelling sum alike; dq is summed in arrival order either way) and between two fused
    calls."""
    os.environ["MKERNEL_ATTN_BWD"] = "native"
    try:
        for i, case in enumerate(ARRIVAL_CASES):
            grads = {}
            for name, *values in ARRIVAL_PATHS:
                for knob, value in zip(ARRIVAL_KNOBS, values):
                    if value:
                        os.environ[knob] = value
                    else:
                        os.environ.pop(knob, None)
                poison(case[1], case[2], case[3], case[5], case[6], c.device)
                grads.setdefault(name, []).append(
                    check_grads(c, f"grad_{name}", case, 9400 + i, 9500 + i))
            for other in ("gathered", "scatter", "gathered_travel", "capped"):
                for name, a, g in zip("kv", grads["travel"][0][1:], grads[other][0][1:]):
                    assert torch.equal(a, g), f"d{name}: travelling and {other} differ (case {i})"
            for a, g in zip(grads["travel"][0][1:], grads["travel"][1][1:]):
                assert torch.equal(a, g), f"dk / dv differ between two fused calls (case {i})"
    finally:
        for knob in ("MKERNEL_ATTN_BWD",) + ARRIVAL_KNOBS:
            os.environ.pop(knob, None)


def grad_graph(c: Checker) -> None:
    """The native ring backward with dK/dV travelling (the default on one node), on the K/V as
    it arrives (MKERNEL_RING_BWD_ARRIVAL=1: the fused ring backward) and after an all-gather
    (=0), each captured once in a CUDA graph and replayed on new inputs (outputs poisoned before
    each replay): dq / dk / dv against fp32 autograd of the whole sequence, and dk / dv bit for
    bit an eager call's on the same inputs. Every wait's expected value comes from the group's
    device op counter, so a replay waits for its own call's data, and an eager call after it
    still agrees with the ranks' counters."""
    from mkernel.ops import _group_args
    try:
        for arrival in ("1", "0"):
            os.environ["MKERNEL_RING_BWD_ARRIVAL"] = arrival
            graph_backward_case(c, _group_args("ring_attention", c.ctx)[0], arrival)
    finally:
        os.environ.pop("MKERNEL_RING_BWD_ARRIVAL", None)


def graph_backward_case(c: Checker, handle: int, arrival: str) -> None:
    case = (True, 1, 512, 8, 2, 128, torch.bfloat16)
    causal, b, s, h, h_kv, d, dtype = case
    world, scale = c.world, d ** -0.5
    q_s, k_s, v_s = (torch.zeros(b, s, hh, d, dtype=dtype, device=c.device)
                     for hh in (h, h_kv, h_kv))
    dout_s = torch.zeros(b, s, h, d, dtype=dtype, device=c.device)
    out_s, lse_s = torch.ops.mkernel.ring_attention.default(q_s, k_s, v_s, handle, world, causal,
                                                            scale)

    def backward():
        return torch.ops.mkernel.ring_attention_backward.default(
            dout_s, q_s, k_s, v_s, out_s, lse_s, handle, world, causal, scale)

    backward()  # warm-up: the symmetric memory sized outside the capture
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        captured = backward()
    for replay in range(2):
        q, k, v = full_inputs(9600 + replay, b, s * world, h, h_kv, d, dtype)
        gen = torch.Generator().manual_seed(9700 + replay)
        dout = torch.randn(b, s * world, h, d, generator=gen).to(dtype)
        for dst, x in zip((q_s, k_s, v_s, dout_s), (q, k, v, dout)):
            dst.copy_(shard(x, c.rank, world, causal))
        out, lse = torch.ops.mkernel.ring_attention.default(q_s, k_s, v_s, handle, world, causal,
                                                            scale)
        out_s.copy_(out)
        lse_s.copy_(lse)
        for t in captured:
            t.fill_(float("nan"))
        g.replay()
        eager = backward()
        torch.cuda.synchronize()
        refs = reference_grads(c, causal, q, k, v, dout)
        rels = {name: rel_err(x.cpu(), r) for name, x, r in zip("qkv", captured, refs)}
        rec = {"op": "grad_graph", "causal": causal, "shape": [b, s, h, h_kv, d],
               "rel": max(rels.values()), "rels": rels, "world": world, "replay": replay,
               "arrival": arrival}
        emit("CASE", rec)
        assert all(r <= BOUND for r in rels.values()), rec
        for name, a, e in zip("kv", captured[1:], eager[1:]):
            assert torch.equal(a, e), f"d{name}: replay and eager call differ ({rec})"
        c.calls += 1


def reference_grads(c: Checker, causal: bool, q, k, v, dout, dlse=None) -> list:
    """This rank's shards of dq / dk / dv by fp32 autograd through the reference of the whole
    sequence (CPU tensors), for the loss <out, dout> (+ <lse, dlse> when dlse is given)."""
    refs = [x.to(c.device).float().requires_grad_() for x in (q, k, v)]
    ref_out, _ = attention_ref(*refs, causal, dtype=torch.float32)
    total = (ref_out * dout.to(c.device).float()).sum()
    if dlse is not None:
        total = total + (lse_ref(refs[0], refs[1], causal) * dlse.to(c.device)).sum()
    total.backward()
    return [shard(r.grad, c.rank, c.world, causal).cpu() for r in refs]


def check_grads(c: Checker, op: str, case, seed: int, dout_seed: int, with_lse: bool = False) -> list:
    """dq / dk / dv of the case's local shards through ring_attention's backward against fp32
    autograd through the reference of the whole sequence (with_lse: the loss reads lse too)."""
    causal, b, s, h, h_kv, d, dtype = case
    q, k, v = full_inputs(seed, b, s * c.world, h, h_kv, d, dtype)
    gen = torch.Generator().manual_seed(dout_seed)
    dout = torch.randn(b, s * c.world, h, d, generator=gen).to(dtype)
    dlse = torch.randn(b, h, s * c.world, generator=gen) if with_lse else None
    refs = reference_grads(c, causal, q, k, v, dout, dlse)
    mine = [shard(x, c.rank, c.world, causal).to(c.device).requires_grad_() for x in (q, k, v)]
    out, lse = mkernel.ring_attention(*mine, causal=causal, group=c.ctx)
    total = (out.float() * shard(dout, c.rank, c.world, causal).to(c.device).float()).sum()
    if dlse is not None:
        total = total + (lse * shard(dlse, c.rank, c.world, causal, dim=2).to(c.device)).sum()
    total.backward()
    torch.cuda.synchronize()
    rels = {name: rel_err(x.grad.cpu(), r) for name, x, r in zip("qkv", mine, refs)}
    rec = {"op": op, "causal": causal, "shape": [b, s, h, h_kv, d], "rel": max(rels.values()),
           "rels": rels, "world": c.world}
    emit("CASE", rec)
    assert all(r <= BOUND for r in rels.values()), rec
    c.calls += 1
    return [x.grad for x in mine]


# Head dims the engine is not built for (the all-gather path, torch's FA2 kernel per ring step):
# ragged and block-aligned shards, causal zigzag and not, GQA / MQA, bf16 and fp16.
OTHER_DIM_CASES = [
    (False, 2, 333, 4, 2, 96, torch.bfloat16),
    (True, 1, 256, 8, 1, 256, torch.float16),
    (True, 2, 90, 4, 4, 32, torch.bfloat16),
    (False, 1, 512, 8, 8, 80, torch.float16),
]


def other_dims(c: Checker) -> None:
    """Head dims other than 64 / 128 at W > 1 (OTHER_DIM_CASES): the forward, twice back to back
    on fresh inputs with outputs poisoned, and dq / dk / dv through the ring backward, against
    the fp32 reference of the whole sequence."""
    for i, case in enumerate(OTHER_DIM_CASES):
        check_twice(c, "other_dims", case, 8000 + 10 * i)
        check_grads(c, "other_dims_grad", case, 8500 + i, 8600 + i)


def fuzz_cases(world: int) -> list[tuple]:
    """FUZZ_CASES ring cases (causal, b, local s, h, h_kv, d, dtype) and a with-gradients flag,
    drawn from FUZZ_SEED (the same on every rank): local lengths at a block edge a third of the
    time, else log-uniform to 2500 (even when causal: two zigzag halves), GQA / MQA, head dims
    64 / 128 and a fifth of the time another multiple of 8; the whole sequence's reference capped."""
    r = random.Random(f"ring-{os.environ.get('FUZZ_SEED', '0')}-{world}")
    out = []
    while len(out) < int(os.environ.get("FUZZ_CASES", "12")):
        causal = r.random() < 0.5
        s = r.choice((1, 2, 63, 64, 65, 127, 128, 129, 144, 256, 333)) if r.random() < 0.33 \
            else int(2 ** r.uniform(0, 11.3))
        if causal:
            s += s % 2
        h_kv = r.choice((1, 2, 4))
        h = h_kv * r.choice((1, 2, 4))
        d = r.choice((64, 128)) if r.random() < 0.8 else r.choice((32, 80, 96, 256))
        b = r.choice((1, 2))
        if b * h * (s * world) ** 2 > 40_000_000:
            continue
        out.append(((causal, b, s, h, h_kv, d, r.choice((torch.bfloat16, torch.float16))),
                    r.random() < 0.5))
    return out


def fuzz(c: Checker) -> None:
    for i, (case, grads) in enumerate(fuzz_cases(c.world)):
        emit("FUZZ", {"i": i, "case": str(case), "grads": grads, "seed": os.environ.get("FUZZ_SEED", "0")})
        check_twice(c, "fuzz", case, 20000 + 10 * i)
        if grads:
            check_grads(c, "fuzz_grad", case, 30000 + i, 40000 + i)


def layer(c: Checker) -> None:
    """mkernel.nn.ContextParallelAttention (Megatron's core-attention call: [s, b, h, d] shards
    in, [s, b, h * d] out) on the fused ring: output and dq/dk/dv against fp32 autograd of the
    whole sequence, outputs poisoned first; causal (zigzag, the whole mode) and non-causal
    (ragged shards: the per-step ring)."""
    from mkernel.nn import ContextParallelAttention

    for i, case in enumerate([(True, 2, 512, 8, 2, 128, torch.bfloat16),
                              (False, 1, 333, 4, 4, 64, torch.float16)]):
        causal, b, s, h, h_kv, d, dtype = case
        q, k, v = full_inputs(9500 + i, b, s * c.world, h, h_kv, d, dtype)  # [b, S, h, d]
        gen = torch.Generator().manual_seed(9600 + i)
        dout = torch.randn(b, s * c.world, h, d, generator=gen).to(dtype)
        refs = [x.to(c.device).float().requires_grad_() for x in (q, k, v)]
        ref_out, _ = attention_ref(*refs, causal, dtype=torch.float32)
        (ref_out * dout.to(c.device).float()).sum().backward()
        # Megatron's layout: [s, b, heads, head_dim], the sequence shard along s.
        mine = [shard(x, c.rank, c.world, causal).transpose(0, 1).contiguous().to(c.device)
                .requires_grad_() for x in (q, k, v)]
        core = ContextParallelAttention(attn_mask_type="causal" if causal else "no_mask",
                                        group=c.ctx)
        poison(b, s, h, d, dtype, c.device)
        out = core(*mine, None)  # [s, b, h * d]
        assert out.shape == (s, b, h * d) and out.dtype == dtype, out.shape
        out.backward(shard(dout, c.rank, c.world, causal).transpose(0, 1).reshape(s, b, h * d)
                     .to(c.device))
        torch.cuda.synchronize()
        want = shard(ref_out.detach(), c.rank, c.world, causal).transpose(0, 1).reshape(s, b, h * d)
        rels = {"out": rel_err(out.detach().cpu(), want.cpu())}
        for name, x, r in zip("qkv", mine, refs):
            rels[name] = rel_err(x.grad.cpu(), shard(r.grad, c.rank, c.world, causal)
                                 .transpose(0, 1).cpu())
        rec = {"op": "layer", "causal": causal, "shape": [b, s, h, h_kv, d],
               "rel": max(rels.values()), "rels": rels, "world": c.world}
        emit("CASE", rec)
        assert all(r <= BOUND for r in rels.values()), rec
        c.calls += 1


def kill(c: Checker) -> None:
    """After good calls the victim (last rank) launches a ring_attention and SIGKILLs itself
    while it runs; every other rank must raise within MKERNEL_OP_TIMEOUT (+ slack) naming a
    peer, not hang. Ends the process."""
    victim = c.world - 1
    shape = (1, 1024, 8, 128)
    q = torch.randn(shape, dtype=torch.bfloat16, device=c.device)
    for _ in range(2):
        mkernel.ring_attention(q, q, q, causal=True, group=c.ctx)
    mkernel.synchronize()
    dist.barrier()
    if c.rank == victim:
        mkernel.ring_attention(q, q, q, causal=True, group=c.ctx)
        os.kill(os.getpid(), signal.SIGKILL)
    t0 = time.monotonic()
    try:
        for _ in range(3):
            mkernel.ring_attention(q, q, q, causal=True, group=c.ctx)
        mkernel.synchronize()
    except Exception as e:  # noqa: BLE001
        emit("ERR", {"suite": "kill", "type": type(e).__name__, "s": time.monotonic() - t0,
                     "msg": str(e)[:600], "record": mkernel.last_wait_failure()})
        os._exit(0)
    raise AssertionError("a ring_attention call without the killed rank succeeded")


def kill_backward(c: Checker) -> None:
    """The fused ring backward (MKERNEL_ATTN_BWD=native, MKERNEL_RING_BWD_ARRIVAL=1: K/V on
    arrival, dK/dV travelling) with a dead peer: after good forward + backward calls every rank
    runs a forward, then the victim (last rank) SIGKILLs itself — before its backward, or with
    KILL_MID=1 right after launching it (the others may then be inside the launch, waiting for
    K/V or for its dK/dV partials); the others' backward must raise within MKERNEL_OP_TIMEOUT
    (+ slack) naming a peer, not hang. Ends the process."""
    os.environ["MKERNEL_ATTN_BWD"] = "native"
    os.environ["MKERNEL_RING_BWD_ARRIVAL"] = "1"
    victim = c.world - 1
    shape = (1, 1024, 8, 128)
    dout = torch.randn(shape, dtype=torch.bfloat16, device=c.device)

    def forward():
        q = torch.randn(shape, dtype=torch.bfloat16, device=c.device, requires_grad=True)
        out, _ = mkernel.ring_attention(q, q, q, causal=True, group=c.ctx)
        return q, out

    for _ in range(2):
        q, out = forward()
        torch.autograd.grad(out, q, dout)
    mkernel.synchronize()
    dist.barrier()
    q, out = forward()
    mkernel.synchronize()
    if c.rank == victim:
        if os.environ.get("KILL_MID") == "1":
            torch.autograd.grad(out, q, dout)  # launched, not waited for
        os.kill(os.getpid(), signal.SIGKILL)
    t0 = time.monotonic()
    try:
        # With KILL_MID=1 the victim's launched backward may still finish on the GPU (its
        # kernels outlive the process), so this one can pass: then the next calls must fail.
        torch.autograd.grad(out, q, dout)
        for _ in range(2):
            q, out = forward()
            torch.autograd.grad(out, q, dout)
        mkernel.synchronize()
    except Exception as e:  # noqa: BLE001
        emit("ERR", {"suite": "kill_backward", "type": type(e).__name__, "s": time.monotonic() - t0,
                     "msg": str(e)[:600], "record": mkernel.last_wait_failure()})
        os._exit(0)
    raise AssertionError("a ring backward without the killed rank succeeded")


def main() -> None:
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    local = int(os.environ.get("LOCAL_RANK", "0"))
    device = torch.device("cuda", local % torch.cuda.device_count())
    torch.cuda.set_device(device)
    ctx = mkernel.init()
    c = Checker(ctx, device)
    t0 = time.monotonic()
    for suite in os.environ.get("TEST_SUITE", "matrix").split(","):
        globals()[suite](c)
    torch.cuda.synchronize()
    ctx.barrier()
    mkernel.shutdown()
    dist.destroy_process_group()
    print("OK", c.rank, c.calls, f"{time.monotonic() - t0:.1f}s", flush=True)


if __name__ == "__main__":
    main()
