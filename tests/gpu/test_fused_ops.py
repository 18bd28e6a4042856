"""The fused ops on CUDA across W rank processes sharing one GPU under MPS (each rank gets
100/W % of the SMs; the `mps` fixture of tests/gpu/conftest.py): tests/gpu/fused_ranks.py runs
in every rank against a float64 reference built from every rank's inputs."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.gpu.conftest import check_ranks, needs_gpu, rank_env
from tests.launch import run_ranks

pytestmark = needs_gpu

RANKS = (Path(__file__).with_name("fused_ranks.py")).read_text()


def run(mps, world: int, suite: str, timeout: float = 240.0) -> list[dict]:
    res = run_ranks(RANKS, world, timeout=timeout, env=rank_env(mps, world, FUSED_SUITE=suite))
    return check_ranks(res)


@pytest.mark.parametrize("world", [2, 4, 8])
def test_ag_gemm(mps, world):
    cases = run(mps, world, "ag")
    assert len(cases) == world * 2 * 5 * 2  # ranks x dtypes x shapes x (out, out_only)


@pytest.mark.parametrize("world", [2, 4, 8])
@pytest.mark.parametrize("op", ["rs", "ar"])
def test_reduce_ops(mps, op, world):
    cases = run(mps, world, op)
    assert len(cases) == world * 2 * 5  # ranks x dtypes x shapes


@pytest.mark.parametrize("world", [2, 4])
@pytest.mark.parametrize("suite", ["ag", "rs", "ar"])
def test_co_resident_grid(mps, world, suite):
    """The fused kernels on the co-resident grid (3/4 of the share in 2-CTA clusters), which
    choose_path measures against the share's grid under an MPS limit: every shape, pinned."""
    res = run_ranks(RANKS, world, timeout=240,
                    env=rank_env(mps, world, FUSED_SUITE=suite, FUSED_GRID="co_resident"))
    per_rank = 2 * 5 * 2 if suite == "ag" else 2 * 5
    assert len(check_ranks(res)) == world * per_rank


@pytest.mark.parametrize("world", [2, 4])
def test_mlp_layers(mps, world):
    """mkernel.nn column -> GeLU -> row under sequence parallelism: outputs and gradients."""
    cases = run(mps, world, "mlp")
    assert len(cases) == world * 6


@pytest.mark.parametrize("world", [2, 4])
@pytest.mark.parametrize("suite", ["compile", "compile_aot"])
def test_mlp_compiled(mps, world, suite):
    """The same MLP under torch.compile(fullgraph=True) (inductor, aot_eager), eager first:
    outputs and gradients of both against the fp32 model (issue 12 item 7)."""
    cases = run(mps, world, suite, timeout=300.0)
    assert len(cases) == world * 6 * 2  # eager + compiled, 6 tensors each


@pytest.mark.parametrize("world", [2, 4])
def test_graph_replay(mps, world):
    cases = run(mps, world, "graph")
    assert len(cases) == world * (3 + 2 * 2)


@pytest.mark.parametrize("algo", ["oneshot", "twoshot"])
def test_gemm_ar_both_algorithms(mps, algo):
    """Both gemm_ar algorithms on every shape (the size model picks one; this forces each)."""
    world = 2
    res = run_ranks(RANKS, world, timeout=240,
                    env=rank_env(mps, world, FUSED_SUITE="ar", MKERNEL_GEMM_AR_ALGO=algo))
    assert len(check_ranks(res)) == world * 2 * 5


@pytest.mark.parametrize("world", [2, 4])
@pytest.mark.parametrize("suite", ["ag", "rs", "ar", "graph"])
def test_launch_gate(mps, world, suite):
    """The fused ops with the launch gate (MKERNEL_FUSED_GATE=1: before each fused launch one
    warp waits for every peer's previous fused kernel to exit; fused_gate.cu) on the
    co-resident grid, back to back and captured in a graph: every output as without it."""
    res = run_ranks(RANKS, world, timeout=240,
                    env=rank_env(mps, world, FUSED_SUITE=suite, FUSED_GRID="co_resident",
                                 MKERNEL_FUSED_GATE="1"))
    per_rank = {"ag": 2 * 5 * 2, "rs": 2 * 5, "ar": 2 * 5, "graph": 3 + 2 * 2}[suite]
    assert len(check_ranks(res)) == world * per_rank


@pytest.mark.parametrize("world", [2, 4])
def test_ag_gemm_peer_tma(mps, world):
    """ag_gemm with MKERNEL_FUSED_AG_PEER_TMA=1 (fused13, opt-in): the peers' rows loaded by TMA
    from their own slots; ragged m and return_gathered on the copy path under the same knob.
    Every output against the fp32 reference per tile, and the peer kernel must have launched."""
    res = run_ranks(RANKS, world, timeout=240, env=rank_env(mps, world, FUSED_SUITE="peertma"))
    cases = check_ranks(res)
    # ranks x dtypes x shapes x (3 checked outputs + the same_bits record)
    assert len(cases) == world * 2 * 5 * 4
    for r in res:
        assert "mkernel.ag_gemm: peer-TMA kernel launched" in r.stderr, f"rank {r.rank}"


# ag_gemm.cpp kAgPeerTmaByDefault (fused14): whether the default route launches the peer kernel.
AG_PEER_TMA_BY_DEFAULT = False


@pytest.mark.parametrize("world", [2, 4])
def test_ag_gemm_default_route(mps, world):
    """ag_gemm as users get it (no knob, the op's own measured choice): the peer-TMA kernel
    where it applies (it launches at least in the measurement), the copy path for ragged m and
    return_gathered; every output against the fp32 reference per tile."""
    res = run_ranks(RANKS, world, timeout=240, env=rank_env(mps, world, FUSED_SUITE="agdefault"))
    cases = check_ranks(res)
    assert len(cases) == world * 2 * 4 * 3  # ranks x dtypes x shapes x checked outputs
    for r in res:
        launched = "mkernel.ag_gemm: peer-TMA kernel launched" in r.stderr
        assert launched == AG_PEER_TMA_BY_DEFAULT, f"rank {r.rank}"


@pytest.mark.parametrize("world", [2, 4])
def test_ag_gemm_peer_tma_graph_replay(mps, world):
    """The peer-TMA ag_gemm captured in a CUDA graph, replayed with every rank's x changed."""
    res = run_ranks(RANKS, world, timeout=240, env=rank_env(mps, world, FUSED_SUITE="peergraph"))
    assert len(check_ranks(res)) == world * 2
    for r in res:
        assert "mkernel.ag_gemm: peer-TMA kernel launched" in r.stderr, f"rank {r.rank}"
