"""mkernel.ring_attention on the GPU at W = 2, 4 and 8, the ranks sharing one GPU under MPS
(tests/gpu/rank_ring_attention.py holds what each rank checks): every rank's output and LSE
against a float32 reference of the whole sequence (causal zigzag and non-causal, GQA, ragged
local lengths, d 64/128, bf16/fp16, outputs poisoned, two calls back to back), a CUDA graph
replayed with new inputs, gradients against fp32 autograd, groups spanning 2 emulated nodes,
both ring modes on the same shapes, and a killed rank failing the others within the timeout
(no hang)."""

from __future__ import annotations

import pytest

from tests.gpu.conftest import ROOT, check_killed_rank, check_ranks, needs_gpu, rank_env
from tests.gpu.rank_ring_attention import CASES, whole_mode
from tests.launch import run_ranks

pytestmark = needs_gpu

RING_MAIN = f"""
import sys
sys.path.insert(0, {str(ROOT)!r})
from tests.gpu.rank_ring_attention import main
main()
"""


def test_ring_attention_empty_batch(mps):
    """W = 2, b = 0 on every rank (causal and not, d = 128 and 96): empty out / lse and
    gradients without an exchange, then a normal call on the same group still matches."""
    world = 2
    res = run_ranks(RING_MAIN, world, timeout=120,
                    env=rank_env(mps, world, TEST_SUITE="empty_batch", MKERNEL_OP_TIMEOUT="30"))
    cases = check_ranks(res)
    assert sorted(c["op"] for c in cases) == sorted(
        ["empty_batch"] * world + ["empty_batch_after"] * 2 * world), cases


def test_ring_attention_lse_gradient(mps):
    """W = 2: a loss that reads out and lse; dq / dk / dv against fp32 autograd of the whole
    sequence through the grouped calls and the native ring mode (grad_lse)."""
    world = 2
    res = run_ranks(RING_MAIN, world, timeout=180,
                    env=rank_env(mps, world, TEST_SUITE="grad_lse", MKERNEL_OP_TIMEOUT="30"))
    cases = check_ranks(res)
    assert [c["op"] for c in cases] == ["grad_lse"] * 3 * world, cases


@pytest.mark.parametrize("world", [2, 3, 4])
def test_ring_attention_fuzz(mps, world):
    """Random ring cases (rank_ring_attention.py suite ``fuzz``: FUZZ_CASES from FUZZ_SEED, the
    MKERNEL_FUZZ_* values of tests/fuzz when set): the forward twice and half of them the
    gradients, against the fp32 reference of the whole sequence; an odd world size too."""
    from tests.fuzz.problems import rank_env as fuzz_env

    fuzz = fuzz_env(8)
    n = int(fuzz["FUZZ_CASES"])
    res = run_ranks(RING_MAIN, world, timeout=600,
                    env=rank_env(mps, world, TEST_SUITE="fuzz", MKERNEL_OP_TIMEOUT="30", **fuzz))
    cases = check_ranks(res)
    assert sum(c["op"] == "fuzz" for c in cases) == 2 * n * world, cases


@pytest.mark.parametrize("world", [2, 4])
def test_ring_attention_matches_reference(mps, world):
    res = run_ranks(RING_MAIN, world, timeout=180,
                    env=rank_env(mps, world, TEST_SUITE="matrix,graph,grad", MKERNEL_OP_TIMEOUT="20"))
    cases = check_ranks(res)
    ops = {c["op"] for c in cases}
    assert {"matrix", "graph", "after_graph", "grad"} <= ops, ops
    worst = max(c["rel"] for c in cases)
    print(f"W={world}: {len(cases)} checked calls, worst rel err {worst:.2e}")
    for c in cases[:len(cases) // world]:  # rank 0's
        print(f"  {c['op']:<11} causal={c['causal']!s:<5} {c['shape']} {c.get('dtype', '')} "
              f"rel {c['rel']:.2e} lse_rel {c.get('lse_rel', float('nan')):.2e}")


def test_ring_backward_on_auto_native_rows(mps):
    """W = 2, non-causal d = 128 and causal d = 64 shards of 4096 keys: auto runs the ring
    backward on the native backward's ring mode (_ring_backward.native_ring_wins; one launch over
    the gathered K/V, dK/dV travelling), dq / dk / dv against fp32 autograd of the whole sequence
    on every rank; and K/V shards longer than the queries' (grad_uneven), which the native ring
    mode does not take."""
    world = 2
    res = run_ranks(RING_MAIN, world, timeout=180,
                    env=rank_env(mps, world, TEST_SUITE="grad_auto_native,grad_uneven",
                                 MKERNEL_OP_TIMEOUT="30"))
    cases = check_ranks(res)
    assert sorted(c["op"] for c in cases) == sorted(
        ["grad_auto_native"] * 2 * world + ["grad_uneven"] * world), cases
    print(f"W=2 auto's native rows: worst rel err {max(c['rel'] for c in cases):.2e}")


@pytest.mark.parametrize("world", [2, 4])
def test_native_ring_backward_on_arrival(mps, world):
    """The fused ring backward (K/V consumed as the send kernel forwards it, dK/dV travelling
    back to their owners in the kernel), the same launch with the reduce-scatter after, and the
    launch after an all-gather with either: gradients against fp32 autograd of the whole sequence, dk / dv
    bit for bit across the paths and between calls (rank_ring_attention.grad_arrival); then the
    fused backward captured in a CUDA graph and replayed on new inputs (grad_graph)."""
    res = run_ranks(RING_MAIN, world, timeout=300,
                    env=rank_env(mps, world, TEST_SUITE="grad_arrival,grad_graph",
                                 MKERNEL_OP_TIMEOUT="30"))
    cases = check_ranks(res)
    per_rank = len(cases) // world
    assert per_rank == 6 * 4 + 2 * 2, [c["op"] for c in cases]
    assert {c["op"] for c in cases} == {"grad_travel", "grad_gathered", "grad_scatter",
                                        "grad_gathered_travel", "grad_capped", "grad_graph"}
    print(f"W={world} fused / scatter / gathered / graph: worst rel err "
          f"{max(c['rel'] for c in cases):.2e}")


def test_ring_attention_at_world_eight(mps):
    """W = 8 (each rank 12% of the SMs): the matrix's shorter cases (both modes, causal zigzag
    and not, GQA/MQA, ragged), each called twice (the reference of the whole sequence is
    computed by every rank: the long cases would need ~170 GB at W = 8)."""
    world = 8
    res = run_ranks(RING_MAIN, world, timeout=180,
                    env=rank_env(mps, world, TEST_SUITE="matrix", RING_CASES="0,1,2,3,6",
                                 MKERNEL_OP_TIMEOUT="30"))
    cases = check_ranks(res)
    assert len(cases) == world * 10, len(cases)
    print(f"W=8: {len(cases)} checked calls, worst rel err {max(c['rel'] for c in cases):.2e}")


@pytest.mark.parametrize("world", [2, 4, 8])
def test_ring_attention_across_emulated_nodes(mps, world):
    """Two emulated nodes, the default paths: whole-mode cases (0, 6) run the fused ring across
    nodes (ring13, default since s11run2: one engine launch, the other nodes' K/V pushed through
    the inter-node FIFO by the send kernel; not yet run at W = 8 nor under `grad`), ragged ones
    (1, 2, 3) the all-gather path (the substrate's all_gather: NetPath FIFO -> Go proxy ->
    transport, then the per-step engine calls and merges); causal zigzag and not, GQA/MQA, both
    head dims, and the gradients, against the fp32 reference."""
    res = run_ranks(RING_MAIN, world, nodes=2, timeout=180,
                    env=rank_env(mps, world, TEST_SUITE="matrix,grad", RING_CASES="0,1,2,3,6",
                                 MKERNEL_OP_TIMEOUT="30"))
    cases = check_ranks(res)
    assert len(cases) == world * 12, len(cases)
    assert {c["op"] for c in cases} == {"matrix", "grad"}
    print(f"W={world} over 2 nodes: {len(cases)} checked calls, "
          f"worst rel err {max(c['rel'] for c in cases):.2e}")


@pytest.mark.parametrize("knob,ring_cases,suite",
                         [("MKERNEL_RING_MODE=step", "0,6", "matrix"),
                          # the send kernel instead of the default forwarding inside the engine
                          # (bf16 d=128; case 6, fp16, runs the send kernel either way); case 5:
                          # causal, 2 blocks per flag, more tiles (72) than CTAs
                          ("MKERNEL_RING_SEND=kernel", "0,5,6", "matrix,graph"),
                          ("MKERNEL_RING_SEND_CTAS=4", "0,6", "matrix"),
                          ("MKERNEL_RING_SEND_FIRST=1", "0,6", "matrix"),
                          # the static tile order instead of claimed tiles
                          ("MKERNEL_RING_TILES=static", "0,5,6", "matrix,graph"),
                          # ring11 (opt-in, unmeasured): the causal engine kernels' masked and
                          # wholly visible KV blocks in two loops, engine forwarding (case 5:
                          # zigzag whole mode, 9 tiles per chunk; case 2: the per-step ring) and
                          # the KV-wait kernel beside the send kernel
                          ("MKERNEL_RING_SPLIT_MASK=1", "0,2,5", "matrix,graph"),
                          ("MKERNEL_RING_SPLIT_MASK=1 MKERNEL_RING_SEND=kernel", "2,5", "matrix"),
                          # ring12's flag skip is the default since s11run1: this pins the old
                          # path (one KV-flag acquire per key block in the load lane; engine
                          # forwarding, case 5 with 2 blocks per flag, the KV-wait kernel of
                          # fp16 case 6), and the compute-alone op with it
                          ("MKERNEL_RING_FLAG_SKIP=0", "0,5,6", "matrix,graph,alone"),
                          # session 25's defaults off: the flags acquired once per tile, not
                          # once per launch, and the claim at the tile's start
                          ("MKERNEL_RING_FLAG_CACHE=0 MKERNEL_RING_LATE_CLAIM=0", "0,5,6",
                           "matrix,graph"),
                          # the whole mode's key chunks per shard: session 25's 16 (the default
                          # is 4 since session 26)
                          ("MKERNEL_RING_CHUNKS=16", "0,5,6", "matrix,graph,alone"),
                          # the non-causal bf16 engine on the 128x144 tile (flags by keys) with
                          # the send kernel; cases 5 / 6 (causal, fp16) keep 128x128
                          ("MKERNEL_RING_BLOCK_N=144", "0,8,5,6", "matrix,graph,alone"),
                          # the own-shard-first split (every tile's own-shard keys as a first
                          # item, its peers' keys resumed from the saved softmax state by a
                          # second; the default at these shards' lengths since session 34)
                          # pinned off: the unsplit engine, the default inside a node for
                          # shards of more than 8192 keys; and pinned on everywhere with the
                          # send kernel — bit for bit the ceiling (alone), graph replays (the
                          # flags zeroed per launch); case 5: causal zigzag, 72 tiles > CTAs,
                          # the second phases of the early chunk's tiles see no peer key
                          ("MKERNEL_RING_OWN_FIRST=0", "0,5,6", "matrix,graph,alone"),
                          # the own shard copied into the virtual K/V before the engine (the
                          # default reads it in place: the engine's own TMA descriptors, the
                          # forwarding's step 0 from the inputs), engine and send kernel
                          ("MKERNEL_RING_OWN_COPY=1", "0,5,6", "matrix,graph,alone"),
                          ("MKERNEL_RING_OWN_COPY=1 MKERNEL_RING_SEND=kernel", "0,5", "matrix"),
                          ("MKERNEL_RING_OWN_FIRST=1 MKERNEL_RING_SEND=kernel", "0,5", "matrix,alone"),
                          # the ring backward on the native backward's ring mode (one launch
                          # over the gathered K/V; session 26): the grad suite's two cases per
                          # rank, against fp32 autograd of the whole sequence
                          ("MKERNEL_ATTN_BWD=native", "0", "grad")])
def test_ring_attention_pinned_paths(mps, knob, ring_cases, suite):
    """Whole-sequence shapes (non-causal, causal zigzag MQA) through the paths the benchmark
    times beside the default (the K/V forwarded inside the engine, tiles claimed): the
    per-step ring pinned, the send kernel (2 and 4 CTAs, and the engine started only once it
    runs), and the static tile order (with CUDA-graph replays) — against the reference."""
    world = 2
    knobs = dict(kv.split("=") for kv in knob.split())  # one or more VAR=value
    res = run_ranks(RING_MAIN, world, timeout=120,
                    env=rank_env(mps, world, TEST_SUITE=suite, RING_CASES=ring_cases,
                                 MKERNEL_OP_TIMEOUT="20", **knobs))
    cases = check_ranks(res)
    matrix = [c for c in cases if c["op"] not in ("graph", "after_graph", "alone")]
    assert len(matrix) == world * 2 * len(ring_cases.split(",")), len(matrix)
    if "graph" in suite:
        assert {"graph", "after_graph"} <= {c["op"] for c in cases}


@pytest.mark.parametrize("world,nodes", [(2, 1), (4, 2)])
def test_ring_attention_other_head_dims(mps, world, nodes):
    """Head dims the engine is not built for (32, 80, 96, 256) at W > 1, inside a node and across
    emulated nodes: the K/V shards all-gathered over the substrate, torch's FA2 kernel per ring
    step, fp32 merges; forward (twice, poisoned) and gradients against the fp32 reference."""
    res = run_ranks(RING_MAIN, world, nodes=nodes, timeout=150,
                    env=rank_env(mps, world, TEST_SUITE="other_dims", MKERNEL_OP_TIMEOUT="30"))
    cases = check_ranks(res)
    assert len([c for c in cases if c["op"] == "other_dims"]) == world * 8, cases
    assert len([c for c in cases if c["op"] == "other_dims_grad"]) == world * 4, cases
    assert {c["shape"][-1] for c in cases} == {32, 80, 96, 256}


def test_context_parallel_attention_layer(mps):
    """mkernel.nn.ContextParallelAttention at W = 2: Megatron's core-attention call on the fused
    ring, output and input gradients against fp32 autograd of the whole sequence."""
    world = 2
    res = run_ranks(RING_MAIN, world, timeout=120,
                    env=rank_env(mps, world, TEST_SUITE="layer", MKERNEL_OP_TIMEOUT="20"))
    cases = check_ranks(res)
    assert len([c for c in cases if c["op"] == "layer"]) == world * 2, cases


def test_compute_alone_is_the_ring_bit_for_bit(mps):
    """ring12: the bench's compute-alone ceiling (torch.ops.mkernel.ring_attention_compute_alone
    on every rank's K/V held locally in the ring's order) equals the ring's output bit for bit in
    every whole-sequence case (non-causal, causal zigzag, GQA/MQA, both head dims and dtypes,
    both hook policies), and the reference."""
    world = 2
    res = run_ranks(RING_MAIN, world, timeout=120,
                    env=rank_env(mps, world, TEST_SUITE="alone", MKERNEL_OP_TIMEOUT="20"))
    cases = check_ranks(res)
    assert len(cases) == world * 6 and all(c["bitwise_ring"] for c in cases), cases


def test_killed_rank_fails_the_others_within_the_timeout(mps):
    world, timeout_s = 2, 5
    res = run_ranks(RING_MAIN, world, timeout=120,
                    env=rank_env(mps, world, TEST_SUITE="kill", MKERNEL_OP_TIMEOUT=str(timeout_s)))
    errs = check_killed_rank(res, world - 1, timeout_s)
    assert all(e["type"] == "MkernelError" for e in errs), errs


@pytest.mark.parametrize("mid", ["0", "1"])
def test_killed_rank_fails_the_native_ring_backward(mps, mid):
    """The fused ring backward (K/V on arrival, dK/dV travelling) with a peer killed between its
    forward and its backward (mid 0) or right after launching it (mid 1): the survivor raises
    within the timeout, naming the peer where a wait record is left
    (rank_ring_attention.kill_backward)."""
    world, timeout_s = 2, 5
    res = run_ranks(RING_MAIN, world, timeout=120,
                    env=rank_env(mps, world, TEST_SUITE="kill_backward", KILL_MID=mid,
                                 MKERNEL_OP_TIMEOUT=str(timeout_s)))
    check_killed_rank(res, world - 1, timeout_s)


# ring13: the fused ring across emulated nodes (MKERNEL_RING_FUSED_NODES=1 pinned; the default
# since s11run2, where these two tests passed; the killed-rank test has not run yet): the whole-
# sequence mode's one engine launch consuming each KV chunk on arrival, the same-node shards over
# peer memory and the other nodes' pushed through the inter-node FIFO by the send kernel
# (kernels/ring_attention/ring_kv_api.h "across nodes").
LINK = "50GB/s,3us"  # issue 12 item 10: one 400 Gb/s NIC
FUSED_NODES_CASES = {2: "0,1,5,6", 4: "0,6"}
FUSED_NODES_SUITES = {2: "matrix,graph", 4: "matrix"}


def _fused_calls(phase_path, world: int) -> list[int]:
    """Per rank, the calls that ran the whole-sequence mode (MKERNEL_RING_PHASES "fused" lines;
    the all-gather path writes none, a CUDA-graph capture or replay neither): proof that the
    fused path ran across nodes."""
    counts = []
    for r in range(world):
        try:
            with open(f"{phase_path}.rank{r}") as f:
                counts.append(sum(line.startswith("fused ") for line in f))
        except FileNotFoundError:
            counts.append(0)
    return counts


@pytest.mark.parametrize("world", [2, 4])
def test_fused_ring_across_emulated_nodes(mps, world, tmp_path):
    """W = 2 over 2 emulated nodes (every peer remote) and W = 4 over 2 (one node-mate over peer
    memory, two remote ranks through the FIFO), link shaped 50GB/s,3us: whole-mode cases
    (non-causal GQA in 2 pieces per shard, causal zigzag in 9 pieces, causal MQA fp16 d=64) plus
    a ragged one at W = 2 (case 1: the all-gather path, unchanged), two calls back to back on
    fresh inputs, outputs poisoned, against the float64 reference; at W = 2 also a CUDA graph
    (the FIFO pushes, arrival waits and receive halves keyed by the device call counter)
    replayed 3 times with new inputs, then an eager call. Every whole-mode eager call ran fused."""
    phases = tmp_path / "ph"
    picked, suite = FUSED_NODES_CASES[world], FUSED_NODES_SUITES[world]
    res = run_ranks(RING_MAIN, world, nodes=2, timeout=150,
                    env=rank_env(mps, world, TEST_SUITE=suite, RING_CASES=picked, RING_REF="fp64",
                                 MKERNEL_OP_TIMEOUT="20", MKERNEL_NET_EMULATE=LINK,
                                 MKERNEL_RING_FUSED_NODES="1", MKERNEL_RING_PHASES=str(phases)))
    cases = check_ranks(res)
    idx = [int(i) for i in picked.split(",")]
    matrix = [c for c in cases if c["op"] == "matrix"]
    assert len(matrix) == world * 2 * len(idx), len(matrix)
    whole = 2 * sum(whole_mode(CASES[i]) for i in idx)
    if "graph" in suite:  # the warm-up and the eager call after the replays (graph case: whole)
        assert {"graph", "after_graph"} <= {c["op"] for c in cases}
        whole += 2
    fused = _fused_calls(phases, world)
    assert fused == [whole] * world, (fused, whole)
    print(f"W={world} over 2 nodes, fused: {len(cases)} checked calls ({whole} fused eager calls "
          f"per rank), worst rel err {max(c['rel'] for c in cases):.2e}")


@pytest.mark.parametrize("knob", ["MKERNEL_RING_OWN_FIRST", "MKERNEL_RING_REFILL"])
def test_fused_ring_across_nodes_pinned_off(mps, tmp_path, knob):
    """W = 2 over 2 emulated nodes with a default of the fused path across nodes pinned off: the
    own-shard-first split (single-item tiles) or the refill (no engine CTAs on the send
    kernel's SMs once it ended). Still against the float64 reference, and fused."""
    world, picked = 2, "0,5"
    phases = tmp_path / "ph"
    res = run_ranks(RING_MAIN, world, nodes=2, timeout=150,
                    env=rank_env(mps, world, TEST_SUITE="matrix", RING_CASES=picked, RING_REF="fp64",
                                 MKERNEL_OP_TIMEOUT="20", MKERNEL_NET_EMULATE=LINK,
                                 MKERNEL_RING_PHASES=str(phases), **{knob: "0"}))
    cases = check_ranks(res)
    assert len([c for c in cases if c["op"] == "matrix"]) == world * 2 * 2, cases
    whole = 2 * sum(whole_mode(CASES[int(i)]) for i in picked.split(","))
    assert _fused_calls(phases, world) == [whole] * world


def test_fused_ring_across_nodes_killed_rank(mps):
    """W = 4 over 2 emulated nodes, fused: rank 3 (node 1) dies while its call runs; every
    survivor (its node-mate at the entry barrier or on its peer-memory chunks, the other node's
    ranks on their FIFO arrivals or their proxy's report) raises within the timeout, and every
    wait record present names rank 3."""
    world, timeout_s = 4, 5
    res = run_ranks(RING_MAIN, world, nodes=2, timeout=90,
                    env=rank_env(mps, world, TEST_SUITE="kill", MKERNEL_OP_TIMEOUT=str(timeout_s),
                                 MKERNEL_NET_EMULATE=LINK, MKERNEL_RING_FUSED_NODES="1"))
    errs = check_killed_rank(res, world - 1, timeout_s)
    assert all(e["type"] == "MkernelError" for e in errs), errs
