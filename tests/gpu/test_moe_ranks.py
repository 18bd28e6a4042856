"""moe_dispatch_gemm / moe_combine with CUDA tensors at W = 2 and 4 ranks on one GPU under MPS
(one node: the dispatch and combine kernels on the group's peer memory, csrc/moe_ep.h):

* the checks of tests/host/moe_rank_checks.py with TEST_DEVICE=cuda: values, routes, counts and
  gradients against a float64 reference from every rank's inputs (ragged T with empty ranks,
  top-k 1/2/4/8, uniform / skewed / empty experts, capacity drops; outputs from poisoned
  memory), and bit-identical repeated calls;
* CUDA-graph capture and replay with changed inputs (tests/gpu/moe_ranks.py).

The backward passes run on the same substrate (the gather and scatter kernels). Over two
emulated nodes the same checks and the graph replay run the several-node path (csrc/moe_nodes.h:
the rows through the substrate's all_gather, whose other-node blocks go FIFO -> Go proxy ->
transport)."""

from __future__ import annotations

import pytest

from tests.gpu.conftest import ROOT, check_killed_rank, check_ranks, needs_gpu, rank_env
from tests.gpu.moe_exchange_ranks import CASES_PER_RANK
from tests.launch import run_ranks

pytestmark = needs_gpu

RANK_MAIN = f"""
import sys
sys.path.insert(0, {str(ROOT)!r})
from tests.gpu.moe_ranks import main
main()
"""


def check_matrix_and_repeat(mps, world: int, **env: str) -> None:
    """The `matrix` and `repeat` suites on `world` CUDA ranks (8 cases per rank) with `env`
    added: every case within its float64 bound."""
    res = run_ranks(RANK_MAIN, world, timeout=150,
                    env=rank_env(mps, world, TEST_SUITE="matrix,repeat", TEST_DEVICE="cuda",
                                 MKERNEL_OP_TIMEOUT="15", **env))
    cases = check_ranks(res)
    assert len(cases) == world * 8, len(cases)
    assert max(c["err"] / c["bound"] for c in cases) <= 1


@pytest.mark.parametrize("world", [2, 3, 4])
def test_moe_cuda_ranks_fuzz(mps, world):
    """Random MoE cases (moe_rank_checks.py suite ``fuzz``: FUZZ_CASES from FUZZ_SEED, the
    MKERNEL_FUZZ_* values of tests/fuzz when set), forward and backward, each within its float64
    bound from poisoned memory; an odd world size too."""
    from tests.fuzz.problems import rank_env as fuzz_env

    fuzz = fuzz_env(8)
    n = fuzz["FUZZ_CASES"]
    res = run_ranks(RANK_MAIN, world, timeout=600,
                    env=rank_env(mps, world, TEST_SUITE="fuzz", TEST_DEVICE="cuda",
                                 MKERNEL_OP_TIMEOUT="15", **fuzz))
    cases = check_ranks(res)
    assert len(cases) == world * int(n), len(cases)
    assert max(c["err"] / c["bound"] for c in cases) <= 1


@pytest.mark.parametrize("world", [2, 4, 8])
def test_moe_cuda_ranks_match_reference(mps, world):
    check_matrix_and_repeat(mps, world)



@pytest.mark.parametrize("world", [2, 4, 8])
def test_moe_cuda_ranks_gathered_rows(mps, world):
    """MKERNEL_MOE_GATHER_A=1: the one-node dispatch skips its expansion and the grouped GEMM
    gathers each received row where it landed (its producer warps' cp.async, gemm::Problem::
    a_row_map). The matrix (ragged and empty experts, T = 0 ranks, H below one k-block) checks the
    gathered output bit for bit against the expanded one of the same call and the float64
    reference; three repeated calls give the same bits."""
    check_matrix_and_repeat(mps, world, MKERNEL_MOE_GATHER_A="1")


@pytest.mark.parametrize("world", [2, 4, 8])
def test_moe_cuda_ranks_overlapped_rows(mps, world):
    """MKERNEL_MOE_OVERLAP=1 (with the gather): the dispatch in two launches (layout, then the
    sends on a side stream of 16 CTAs) and the grouped GEMM in two (this rank's own rows beside
    the sends, then the peers' rows: gemm::Problem::group_begin segments). The same matrix and
    repeat checks: the output bit for bit the expanded path's of the same call, the float64
    bound, repeated calls bit-identical."""
    check_matrix_and_repeat(mps, world, MKERNEL_MOE_GATHER_A="1", MKERNEL_MOE_OVERLAP="1")


@pytest.mark.parametrize("world", [2, 4, 8])
def test_moe_cuda_ranks_fused(mps, world):
    """MKERNEL_MOE_FUSED=1: the dispatch and the grouped GEMM as one persistent kernel after the
    layout launch (kernels/moe/moe_fused_api.h: its side warps send the tokens and expand each M
    tile's rows, own rows first, its producer waits for each tile's flag). The same matrix and
    repeat checks (ragged T with empty ranks, empty experts, top-k 1-8, H below one k-block,
    poisoned outputs, gradients through the returned rows): every case within its float64 bound,
    the fused output without recv_x bit for bit the one with it, repeated calls bit-identical."""
    check_matrix_and_repeat(mps, world, MKERNEL_MOE_FUSED="1")


@pytest.mark.parametrize("world", [2, 4])
def test_moe_cuda_ranks_fused_auto(mps, world):
    """MKERNEL_MOE_FUSED=auto: the first eager call of each shape times the fused kernel against
    the default path on every rank (fused_common.h choose_path) and the group keeps one. The same
    matrix and repeat checks (measured calls included: every case within its float64 bound,
    repeated calls bit-identical), and every rank's stderr holds the dispatch's measurement
    (MKERNEL_FUSED_VERBOSE=1) — whichever path won, the choice was measured, not assumed."""
    res = run_ranks(RANK_MAIN, world, timeout=240,
                    env=rank_env(mps, world, TEST_SUITE="matrix,repeat", TEST_DEVICE="cuda",
                                 MKERNEL_OP_TIMEOUT="15", MKERNEL_MOE_FUSED="auto",
                                 MKERNEL_FUSED_VERBOSE="1"))
    cases = check_ranks(res)
    assert len(cases) == world * 8, len(cases)
    assert max(c["err"] / c["bound"] for c in cases) <= 1
    for r in res:
        assert "moe_dispatch_gemm: measured" in r.stderr, f"rank {r.rank}: no measurement line"


def test_moe_cuda_graph_replay_fused(mps):
    """The graph suite with the fused dispatch (MKERNEL_MOE_FUSED=1): its two launches captured
    and replayed with changed inputs."""
    res = run_ranks(RANK_MAIN, 2, timeout=150,
                    env=rank_env(mps, 2, TEST_SUITE="graph", TEST_DEVICE="cuda",
                                 MKERNEL_OP_TIMEOUT="15", MKERNEL_MOE_FUSED="1"))
    cases = check_ranks(res)
    assert len(cases) == 2 * 4, len(cases)


def test_moe_fused_killed_rank_fails_the_others_within_the_timeout(mps):
    """The last rank dies in the middle of a fused dispatch: the survivor raises within the op
    timeout (+ slack) with a wait record naming the dead rank."""
    world, timeout_s = 2, 5
    res = run_ranks(RANK_MAIN, world, timeout=90,
                    env=rank_env(mps, world, TEST_SUITE="kill", TEST_DEVICE="cuda",
                                 MKERNEL_OP_TIMEOUT=str(timeout_s), TEST_KILL_OP="dispatch",
                                 MKERNEL_MOE_FUSED="1"))
    errs = check_killed_rank(res, world - 1, timeout_s)
    assert all(e["record"] is not None for e in errs), errs


@pytest.mark.parametrize("world,nodes,weights", [(2, 1, "0"), (2, 2, "0"), (4, 4, "0"), (2, 2, "1"), (4, 4, "1")],
                         ids=["w2n1", "w2n2", "w4n4", "w2n2-carried", "w4n4-carried"])
def test_moe_buffer_replays_match_the_ops(mps, world, nodes, weights):
    """mkernel.moe.MoEBuffer on CUDA (tests/host/moe_rank_checks.py `buffer`): ten calls, T
    changing then fixed, the same tensors call after call on every rank but 0 (direct graphs
    there, the static graph and an eager combine on rank 0, in the same exchanges), w1 swapped;
    each call bit for bit the plain ops' results and within bf16 rounding of the float64
    reference; the graphs captured are the design's; its argument errors raise. One rank per
    node (w2n2, w4n4): the eager misses run dispatch mode 3, the replays mode 1. `-carried`: the
    weights go to the dispatch too (session 22: its combine then uses the carried routes)."""
    res = run_ranks(RANK_MAIN, world, nodes=nodes, timeout=150,
                    env=rank_env(mps, world, TEST_SUITE="buffer", TEST_DEVICE="cuda",
                                 MKERNEL_OP_TIMEOUT="15", TEST_BUFFER_WEIGHTS=weights))
    cases = check_ranks(res)
    assert len(cases) == world * 10, len(cases)
    assert max(c["err"] / c["bound"] for c in cases) <= 1


@pytest.mark.parametrize("world,nodes", [(2, 1), (2, 2)], ids=["w2n1", "w2n2"])
def test_moe_mlp_cuda_matches_dense_reference(mps, world, nodes):
    """mkernel.nn.MoEMLP (SwiGLU experts, bf16) on 2 ranks, one node and two emulated nodes,
    against the dense float64 formula over every rank's tokens: output and the gradients of x,
    w1, w2 and topk_weights, capacity-free and padded (tests/host/moe_rank_checks.py `mlp`)."""
    res = run_ranks(RANK_MAIN, world, nodes=nodes, timeout=150,
                    env=rank_env(mps, world, TEST_SUITE="mlp", TEST_DEVICE="cuda", MKERNEL_OP_TIMEOUT="15"))
    cases = check_ranks(res)
    assert len(cases) == world * 2 and max(c["err"] / c["bound"] for c in cases) <= 1


def test_moe_cuda_ranks_aten_routing(mps):
    """The opt-out MKERNEL_MOE_ROUTING=aten (route_on_device's ATen ops instead of the routing
    kernels): the same checks at W=2."""
    check_matrix_and_repeat(mps, 2, MKERNEL_MOE_ROUTING="aten")

@pytest.mark.parametrize("world", [2, 4])
def test_moe_cuda_graph_replay(mps, world):
    res = run_ranks(RANK_MAIN, world, timeout=150,
                    env=rank_env(mps, world, TEST_SUITE="graph", TEST_DEVICE="cuda",
                                 MKERNEL_OP_TIMEOUT="15"))
    cases = check_ranks(res)
    assert len(cases) == world * 4, len(cases)


def test_moe_cuda_graph_replay_overlapped(mps):
    """The graph suite with the overlapped dispatch (MKERNEL_MOE_OVERLAP=1, the gather on): the
    side stream's send launch forks from and joins the captured stream."""
    res = run_ranks(RANK_MAIN, 2, timeout=150,
                    env=rank_env(mps, 2, TEST_SUITE="graph", TEST_DEVICE="cuda",
                                 MKERNEL_OP_TIMEOUT="15", MKERNEL_MOE_GATHER_A="1",
                                 MKERNEL_MOE_OVERLAP="1"))
    cases = check_ranks(res)
    assert len(cases) == 2 * 4, len(cases)


@pytest.mark.parametrize("world,nodes", [(2, 2), (4, 2), (4, 4)], ids=["2", "4", "w4n4"])
def test_moe_cuda_across_emulated_nodes(mps, world, nodes):
    """Emulated nodes: values, routes, counts and gradients against the float64 reference,
    bit-identical repeats, and graph replay (with and without reserve_tokens). Defaults: with one
    rank per node (W=2 over 2, W=4 over 4) the MoE's own exchange with the routing-headed dispatch
    (mode 1: each landed piece's rows gathered on the caller's stream, the finish at the join,
    since session 21; the group's first call runs the sequence while it sizes the areas), the
    kernel layout and the pipelined combine; at W=4 over 2 nodes the substrate's collectives."""
    res = run_ranks(RANK_MAIN, world, nodes=nodes, timeout=150,
                    env=rank_env(mps, world, TEST_SUITE="matrix,repeat,graph", TEST_DEVICE="cuda",
                                 MKERNEL_OP_TIMEOUT="20"))
    cases = check_ranks(res)
    assert len(cases) == world * (8 + 4), len(cases)
    assert max(c["err"] / c["bound"] for c in cases) <= 1


def test_moe_cuda_across_emulated_nodes_previous_dispatch(mps):
    """MKERNEL_MOE_DISPATCH_PIPELINE=0 (the sequence, the default until session 18; pinned here): the dispatch across nodes as before
    the pipelined one (the routing all_gathered before the rows move, the rows joined whole, then
    index_select over the static row bound); the same checks at W=2 over 2 nodes."""
    world = 2
    res = run_ranks(RANK_MAIN, world, nodes=2, timeout=150,
                    env=rank_env(mps, world, TEST_SUITE="matrix,repeat,graph", TEST_DEVICE="cuda",
                                 MKERNEL_OP_TIMEOUT="20", MKERNEL_MOE_DISPATCH_PIPELINE="0"))
    cases = check_ranks(res)
    assert len(cases) == world * (8 + 4), len(cases)
    assert max(c["err"] / c["bound"] for c in cases) <= 1


@pytest.mark.parametrize("world,nodes,mode,sync", [
    (2, 2, "1", "0"), (2, 2, "1", "1"), (4, 2, "1", "0"), (4, 4, "1", "0")],
    ids=["w2n2", "w2n2-sync", "w4n2", "w4n4"])
def test_moe_cuda_across_emulated_nodes_pipelined(mps, world, nodes, mode, sync):
    """MKERNEL_MOE_DISPATCH_PIPELINE=1 (pinned eagerly too), the same checks as above; the
    matrix has ranks with T = 0 beside ranks with tokens (cases 2 and 7; all empty: case 5),
    asserted on the CPU by tests/host/test_moe_headed_protocol.py. One rank per node (n = W)
    runs the headed gather (moe_net.h), W=4 over 2 nodes the substrate's collectives and the
    counted-rows gather. MKERNEL_MOE_HEADED_SYNC=1: each rank's host synchronizes the whole
    device between the headed gather's two halves (what a lazily loaded kernel's first launch
    may do there): before moe12 both ranks then deadlocked at DONE (s13run2 / s14run1)."""
    res = run_ranks(RANK_MAIN, world, nodes=nodes, timeout=150,
                    env=rank_env(mps, world, TEST_SUITE="matrix,repeat,graph", TEST_DEVICE="cuda",
                                 MKERNEL_OP_TIMEOUT="15", MKERNEL_MOE_DISPATCH_PIPELINE=mode,
                                 MKERNEL_MOE_HEADED_SYNC=sync))
    cases = check_ranks(res)
    assert len(cases) == world * (8 + 4), len(cases)
    assert max(c["err"] / c["bound"] for c in cases) <= 1


@pytest.mark.parametrize("world,nodes,mode,gather,layout,sms,sync,early", [
    (2, 2, "3", "", "kernel", "", "0", "0"), (2, 2, "3", "", "kernel", "", "1", "0"),
    (2, 2, "1", "", "kernel", "16", "0", "1"), (2, 2, "0", "counted", "kernel", "", "0", "0"),
    (2, 2, "3", "", "aten", "", "0", "0"), (4, 2, "3", "", "kernel", "", "0", "0"),
    (4, 4, "0", "", "", "", "0", "1")],
    ids=["w2n2-p3-kl", "w2n2-p3-kl-sync", "w2n2-p1-kl-s16", "w2n2-counted-kl", "w2n2-p3", "w4n2-p3-kl",
         "w4n4-combine-early"])
def test_moe_cuda_across_emulated_nodes_moe14(mps, world, nodes, mode, gather, layout, sms, sync, early):
    """moe14 (the kernel layout and the early combine are the defaults since session 17, mode 3 since
    session 18, mode 1 under graph capture since session 20): MKERNEL_MOE_DISPATCH_PIPELINE=3 (the headed gather without per-piece row
    hooks: the others' rows gathered once after the join), MKERNEL_MOE_LAYOUT=kernel (the packed
    layout by the routing kernels + nodes_layout instead of ~30 ATen ops; capacity > 0 cases keep
    ATen), MKERNEL_MOE_GATHER_SMS (mode 1's per-piece gathers on fewer CTAs),
    MKERNEL_MOE_COMBINE_EARLY=1 (the combine's own partials beside the link, no own-block copy);
    the same matrix, repeat and graph checks (values vs float64, bit-identical repeats, graph
    replay). W=4 over 2 nodes takes the substrate's collectives (not headed) with the kernel
    layout; W=4 over 4 nodes the MoE's own exchange at every rank (the early combine's W > 2
    split: two launches for the other ranks' slots)."""
    res = run_ranks(RANK_MAIN, world, nodes=nodes, timeout=150,
                    env=rank_env(mps, world, TEST_SUITE="matrix,repeat,graph", TEST_DEVICE="cuda",
                                 MKERNEL_OP_TIMEOUT="15", MKERNEL_MOE_DISPATCH_PIPELINE=mode,
                                 MKERNEL_MOE_DISPATCH_GATHER=gather, MKERNEL_MOE_LAYOUT=layout,
                                 MKERNEL_MOE_GATHER_SMS=sms, MKERNEL_MOE_HEADED_SYNC=sync,
                                 MKERNEL_MOE_COMBINE_EARLY=early))
    cases = check_ranks(res)
    assert len(cases) == world * (8 + 4), len(cases)
    assert max(c["err"] / c["bound"] for c in cases) <= 1


@pytest.mark.parametrize("world", [2, 4])
def test_moe_cuda_across_emulated_nodes_allgather_combine(mps, world):
    """MKERNEL_MOE_NODES_COMBINE=allgather (the opt-out): the combine across nodes from every
    rank's whole layout of y, all-gathered, instead of the owners' fp32 partial sums and one
    reduce_scatter (csrc/moe_nodes.h combine_nodes, the default); the same checks."""
    res = run_ranks(RANK_MAIN, world, nodes=2, timeout=150,
                    env=rank_env(mps, world, TEST_SUITE="matrix,repeat,graph", TEST_DEVICE="cuda",
                                 MKERNEL_OP_TIMEOUT="20", MKERNEL_MOE_NODES_COMBINE="allgather"))
    cases = check_ranks(res)
    assert len(cases) == world * (8 + 4), len(cases)
    assert max(c["err"] / c["bound"] for c in cases) <= 1

def test_moe_cuda_across_emulated_nodes_substrate_path(mps):
    """MKERNEL_MOE_NODES_PATH=substrate (the opt-out) at W=2 over 2 nodes, where the MoE's own
    exchange is the default: the substrate's all_gather / reduce_scatter; the same checks."""
    world = 2
    res = run_ranks(RANK_MAIN, world, nodes=2, timeout=150,
                    env=rank_env(mps, world, TEST_SUITE="matrix,repeat,graph", TEST_DEVICE="cuda",
                                 MKERNEL_OP_TIMEOUT="20", MKERNEL_MOE_NODES_PATH="substrate"))
    cases = check_ranks(res)
    assert len(cases) == world * (8 + 4), len(cases)
    assert max(c["err"] / c["bound"] for c in cases) <= 1


@pytest.mark.parametrize("world,nodes", [(2, 2), (4, 4), (4, 2), (2, 1)], ids=["w2n2", "w4n4", "w4n2", "w2n1"])
def test_moe_cuda_carried_weights(mps, world, nodes):
    """Session 22: topk_weights given to the dispatch (MoEMLP's way) travel in its routing head;
    across nodes with capacity 0 the dispatch returns every rank's routes and weights as the
    combine reads them (checked against the reference's routes and weights), and the combine given
    the same weights uses them instead of its all_gather: bit for bit the combine given a copy,
    and the float64 reference (w4n2: the substrate's path; w2n1: one node, nothing carried)."""
    res = run_ranks(RANK_MAIN, world, nodes=nodes, timeout=150,
                    env=rank_env(mps, world, TEST_SUITE="carried", TEST_DEVICE="cuda",
                                 MKERNEL_OP_TIMEOUT="20"))
    cases = check_ranks(res)
    assert len(cases) == world * 7, len(cases)
    assert max(c["err"] / c["bound"] for c in cases) <= 1


@pytest.mark.parametrize("world", [2, 4])
def test_moe_cuda_across_emulated_nodes_narrow_partials(mps, world):
    """MKERNEL_MOE_NODES_COMBINE=reduce16 (the default since session 19 where the combine is
    pipelined, forced here everywhere): the combine's partial sums travel in y's dtype (half the
    link bytes; one more rounding per owner, inside the bf16 bound); the same checks."""
    res = run_ranks(RANK_MAIN, world, nodes=2, timeout=150,
                    env=rank_env(mps, world, TEST_SUITE="matrix,repeat,graph", TEST_DEVICE="cuda",
                                 MKERNEL_OP_TIMEOUT="20", MKERNEL_MOE_NODES_COMBINE="reduce16"))
    cases = check_ranks(res)
    assert len(cases) == world * (8 + 4), len(cases)
    assert max(c["err"] / c["bound"] for c in cases) <= 1


@pytest.mark.parametrize("combine,pipeline", [("reduce", "1"), ("", "0"), ("reduce", "0")],
                         ids=["pipelined-fp32", "sequence-default", "sequence-fp32"])
def test_moe_cuda_across_emulated_nodes_combine_variants(mps, combine, pipeline):
    """moe17 (session 19): the combine across nodes pipelined (the default where the areas are GPU
    memory: partials made piece by piece straight into the send area, each piece's rows summed from
    the receive area as it lands) with fp32 partials (MKERNEL_MOE_NODES_COMBINE=reduce), and the
    sequence it replaced (MKERNEL_MOE_COMBINE_PIPELINE=0: all partials, one exchange, one sum) with
    the default and the fp32 partials; W=2 over 2 nodes, the same checks."""
    world = 2
    res = run_ranks(RANK_MAIN, world, nodes=2, timeout=150,
                    env=rank_env(mps, world, TEST_SUITE="matrix,repeat,graph", TEST_DEVICE="cuda",
                                 MKERNEL_OP_TIMEOUT="20", MKERNEL_MOE_NODES_COMBINE=combine,
                                 MKERNEL_MOE_COMBINE_PIPELINE=pipeline))
    cases = check_ranks(res)
    assert len(cases) == world * (8 + 4), len(cases)
    assert max(c["err"] / c["bound"] for c in cases) <= 1


@pytest.mark.parametrize("world,nodes,mode", [(2, 2, "3"), (4, 4, "3"), (2, 2, "1")], ids=["w2n2-p3", "w4n4-p3", "w2n2-p1"])
def test_moe_cuda_across_emulated_nodes_previous_streams(mps, world, nodes, mode):
    """MKERNEL_MOE_FINISH_AT_JOIN=0 and MKERNEL_MOE_HOOKS_ON_CALLER=0 (the stream placement until
    session 21: the headed gather's finish ending the send stream, mode 1's row gathers on a pool
    stream), mode 3 (the eager default of sessions 18-20) and mode 1; the default checks (values,
    gradients, repeats, graph replay)."""
    res = run_ranks(RANK_MAIN, world, nodes=nodes, timeout=150,
                    env=rank_env(mps, world, TEST_SUITE="matrix,repeat,graph", TEST_DEVICE="cuda",
                                 MKERNEL_OP_TIMEOUT="20", MKERNEL_MOE_FINISH_AT_JOIN="0",
                                 MKERNEL_MOE_HOOKS_ON_CALLER="0", MKERNEL_MOE_DISPATCH_PIPELINE=mode))
    cases = check_ranks(res)
    assert len(cases) == world * (8 + 4), len(cases)
    assert max(c["err"] / c["bound"] for c in cases) <= 1


@pytest.mark.parametrize("world,nodes", [(2, 2), (4, 4)])
def test_moe_cuda_across_emulated_nodes_copy_engine_exchange(mps, world, nodes):
    """MKERNEL_MOE_NODES_PATH=ce (forced; the default where every rank is alone on its emulated
    node): the dispatch's tokens and the combine's partial sums move by the MoE's own exchange
    (csrc/moe_net.h: copy engines into and out of the inter-node staging, pieces pushed through
    the FIFO) instead of the substrate's all_gather / reduce_scatter; the same checks (values,
    gradients, bit-identical repeats, graph replay)."""
    res = run_ranks(RANK_MAIN, world, nodes=nodes, timeout=150,
                    env=rank_env(mps, world, TEST_SUITE="matrix,repeat,graph", TEST_DEVICE="cuda",
                                 MKERNEL_OP_TIMEOUT="20", MKERNEL_MOE_NODES_PATH="ce"))
    cases = check_ranks(res)
    assert len(cases) == world * (8 + 4), len(cases)
    assert max(c["err"] / c["bound"] for c in cases) <= 1


EXCHANGE_MAIN = f"""
import sys
sys.path.insert(0, {str(ROOT)!r})
from tests.gpu.moe_exchange_ranks import main
main()
"""


@pytest.mark.parametrize("world", [2, 4])
def test_moe_copy_engine_exchange_alone(mps, world):
    """mkernel._moe_exchange, every rank alone on its node: the gather equals the substrate's
    all_gather bit for bit and the all-to-all delivers every rank's block, at 1 piece and 8 uneven
    pieces, bf16 and fp32, twice in a row."""
    res = run_ranks(EXCHANGE_MAIN, world, nodes=world, timeout=120,
                    env=rank_env(mps, world, MKERNEL_OP_TIMEOUT="20"))
    cases = check_ranks(res)
    # The count from the rank program itself: session 21 edited a literal here by mistake (6 -> 8)
    # and the test failed on a right exchange from then until session 47.
    assert len(cases) == world * CASES_PER_RANK, len(cases)
    assert all(c["gather"] and c["a2a"] for c in cases), cases


@pytest.mark.parametrize("nodes,op", [(1, "dispatch"), (2, "dispatch"), (2, "combine")],
                         ids=["dispatch", "nodes2-dispatch", "nodes2-combine"])
def test_moe_killed_rank_fails_the_others_within_the_timeout(mps, nodes, op):
    """The last rank dies in the middle of a dispatch (or, across 2 emulated nodes, of the
    pipelined combine): the survivor raises within the op timeout (+ slack), and its wait record
    (if its own wait expired first: under MPS the first trap ends every client) names the dead
    rank."""
    world, timeout_s = 2, 5
    res = run_ranks(RANK_MAIN, world, nodes=nodes, timeout=90,
                    env=rank_env(mps, world, TEST_SUITE="kill", TEST_DEVICE="cuda",
                                 MKERNEL_OP_TIMEOUT=str(timeout_s), TEST_KILL_OP=op))
    # A lone survivor's own wait expires (no other rank can trap first): it must have a record.
    errs = check_killed_rank(res, world - 1, timeout_s)
    assert all(e["record"] is not None for e in errs), errs
