"""The fused ops on CUDA across W rank processes sharing one GPU under MPS (each rank gets
100/W % of the SMs; the `mps` fixture of tests/gpu/conftest.py): tests/gpu/fused_ranks.py runs
in every rank against a float64 reference built from every rank's inputs."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from tests.gpu.conftest import check_killed_rank, check_ranks, needs_gpu, rank_env
from tests.launch import run_ranks

pytestmark = needs_gpu

RANKS = (Path(__file__).with_name("fused_ranks.py")).read_text()
# ag_gemm.cpp's once-per-process line when the peer-TMA kernel launches (fused_smoke.py's too).
PEER_MARK = "mkernel.ag_gemm: peer-TMA kernel launched"


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
def test_c1x1_kernels(mps, world):
    """MKERNEL_FUSED_C1X1=1 (fused18, opt-in): the cluster-free coop_128x256_c1x1 fused kernels of
    ag_gemm (peer-TMA and copy routes), gemm_rs and gemm_ar, as the forced measurement picks and
    pinned to the c1x1 co-resident grid; every output against the fp32 reference per tile from
    poisoned memory. The c1x1 kernel must have run on every rank, and its co-resident grid
    (co_resident_grid_c1: 63 at W = 2, 30 at W = 4) must have been a measured candidate."""
    import re

    from mkernel._fused_defaults import co_resident_grid_c1

    res = run_ranks(RANKS, world, timeout=300,
                    env=rank_env(mps, world, FUSED_SUITE="c1x1", MKERNEL_FUSED_VERBOSE="1"))
    cases = check_ranks(res)
    # ranks x dtypes x (ag: 3 shapes x 2 grids x (2 outputs + same_bits) + rs/ar: 2 x 2 shapes x
    # 2 grids x (1 output + same_bits))
    assert len(cases) == world * 2 * (3 * 2 * 3 + 2 * 2 * 2 * 2)
    for r in res:
        assert "runs fused coop_128x256_c1x1" in r.stderr, f"rank {r.rank}: no c1x1 launch line"
        assert PEER_MARK in r.stderr, f"rank {r.rank}: the peer-TMA route never ran"
    # The MPS share's SMs on an H200: 66 at W = 2, 32 at W = 4 (NOTES "fused12": not 33).
    co = co_resident_grid_c1(66 if world == 2 else 32)
    assert any(re.search(rf"coop_128x256_c1x1( peer-TMA)? grid {co}\b", r.stderr) for r in res), \
        "the c1x1 co-resident grid was never measured"


@pytest.mark.parametrize("world", [2, 4])
def test_gemm_ar_flag_range(mps, world):
    """Issue 12's flag room (group_device.h kFlagWords = 1 << 19): gemm_ar two-shot at M = N ~
    16384 (square M=16384's row of bench_fused.py --set issue, which ran unfused with "more output
    tiles than the group's flag slots" under the 1 << 16-word region) uses flag slots up to
    74240 (128x256 tiles) and 82432 (128x128, pinned): both must run fused on every rank and
    match the fp32 reference per tile from poisoned memory, identical bits on every rank."""
    res = run_ranks(RANKS, world, timeout=300,
                    env=rank_env(mps, world, FUSED_SUITE="bigflags", MKERNEL_GEMM_AR_ALGO="twoshot",
                                 MKERNEL_FUSED_VERBOSE="1"))
    cases = check_ranks(res)
    assert len(cases) == world * 2  # ranks x (model's config, pinned 128x128)
    for r in res:
        assert "flag slots" not in r.stderr, f"rank {r.rank} ran unfused:\n{r.stderr[-2000:]}"
        for config in ("coop_128x256_c2x1", "coop_128x128_c2x1"):
            assert f"runs fused {config}" in r.stderr, f"rank {r.rank}: no fused {config} line"


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
        assert PEER_MARK in r.stderr, f"rank {r.rank}"


@pytest.mark.parametrize("world", [2, 4])
def test_ag_gemm_default_route(mps, world):
    """ag_gemm as users get it (no knob: MKERNEL_FUSED_AG_PEER_TMA=auto, fused16): where the
    peer-TMA kernel fits, the shape's first call measures it beside the copy kernel and the
    unfused path on every rank and the group keeps the fastest; the copy path for ragged m and
    return_gathered. Every output against the fp32 reference per tile; the peer kernel launched
    on every rank (in the measurement at least); every rank printed the same verdict for every
    shape key (one verdict for the group); a CUDA graph of a measured shape ran the cached
    verdict (the capture's MKERNEL_FUSED_VERBOSE line) on every rank, the same path everywhere,
    and its replays with changed inputs are right."""
    from mkernel._fused_defaults import AG_PEER_TMA_DEFAULT
    from mkernel._fused_verdicts import parse_captures, parse_verdicts

    setting = AG_PEER_TMA_DEFAULT  # fused_ag_route.h kPeerTmaDefault ("auto" since fused16)
    res = run_ranks(RANKS, world, timeout=240,
                    env=rank_env(mps, world, FUSED_SUITE="agdefault", MKERNEL_FUSED_VERBOSE="1"))
    cases = check_ranks(res)
    # ranks x (dtypes x shapes x checked outputs + the graph's 2 replays)
    assert len(cases) == world * (2 * 4 * 3 + 2)
    verdicts = {r.rank: parse_verdicts(r.stderr) for r in res}
    captures = {r.rank: parse_captures(r.stderr) for r in res}
    for r in res:
        # auto / 1: the peer kernel runs (in the measurement at least); 0: never
        assert (PEER_MARK in r.stderr) == (setting != "0"), f"rank {r.rank}: {setting}"
        # the fitting shapes of both dtypes (m % 128 == 0: 3 per dtype), each with a verdict
        fit_keys = [k for k in verdicts[r.rank] if k.endswith(f" peertma={setting}")]
        assert len(fit_keys) == 6, (r.rank, verdicts[r.rank])
        assert verdicts[r.rank] == verdicts[0], (r.rank, verdicts[r.rank], verdicts[0])
        cap = captures[r.rank]
        assert len(cap) == 1 and cap[0]["cached"], (r.rank, cap)
        assert cap[0]["key"] == f"M=1024 N=4096 K=1024 BFloat16 W={world} peertma={setting}", cap
        assert cap == captures[0], (r.rank, cap, captures[0])
    print("verdicts (rank 0):", verdicts[0])
    print("capture (rank 0):", captures[0])


def _route(verdict: str) -> tuple:
    """A verdict of parse_verdicts as (config, grid, peer-TMA) or ("unfused",): the measured line
    and a bucket reuse's line name a fused route in different orders."""
    if verdict == "unfused":
        return ("unfused",)
    grid = re.search(r"grid (\d+)", verdict)
    return (verdict.split()[1], grid.group(1) if grid else None, "peer-TMA" in verdict)


@pytest.mark.parametrize("world", [2, 4])
def test_verdict_bucket_reuse(mps, world):
    """A shape reuses its M bucket's verdict (session 54, choose_path): per op the first M of the
    bucket is measured ("measured" line), two more M with the same N, K and candidate paths run
    that verdict with no measurement (their "its M bucket's verdict" line names the first key),
    and an M under MKERNEL_FUSED_BUCKET=0 gets its own measurement; every rank the same verdicts;
    every output right per tile (fused_ranks.py suite_bucket)."""
    from mkernel._fused_verdicts import parse_tests, parse_verdicts
    from tests.gpu.fused_ranks import BUCKET_CASES, BUCKET_N

    res = run_ranks(RANKS, world, timeout=240,
                    env=rank_env(mps, world, FUSED_SUITE="bucket", MKERNEL_FUSED_VERBOSE="1"))
    cases = check_ranks(res)
    assert len(cases) == world * sum(2 + len(reused) for _, _, reused, _, _ in BUCKET_CASES)
    for op, m0, reused, own, k in BUCKET_CASES:
        tag = " peertma=auto" if op == "ag_gemm" else ""

        def key(m: int) -> str:
            return f"M={m} N={BUCKET_N} K={k} BFloat16 W={world}{tag}"

        name = f"mkernel.{op}"
        per_rank = []
        for r in res:
            measured = parse_tests(r.stderr, name)
            verdicts = parse_verdicts(r.stderr, name)
            assert key(m0) in measured and key(own) in measured, (r.rank, op, sorted(measured))
            for m in reused:
                assert key(m) not in measured, (r.rank, op, m, "measured despite its bucket's verdict")
                assert f"measured at {key(m0)})" in r.stderr, (r.rank, op, m)
                assert _route(verdicts[key(m)]) == _route(verdicts[key(m0)]), (r.rank, op, m, verdicts)
            per_rank.append({m: verdicts[key(m)] for m in (m0, *reused, own)})
        assert all(v == per_rank[0] for v in per_rank), (op, per_rank)


@pytest.mark.parametrize("world", [2])
def test_verdict_cache_across_processes(mps, world, tmp_path):
    """A verdict measured by one process group is reused by the next (session 55,
    fused_verdict_store.h): group 1 measures ag_gemm and gemm_rs at their bucket's first M and
    stores the verdicts in MKERNEL_CACHE_DIR; group 2 (new processes, same directory) runs another
    M of each bucket on the stored verdict ("a stored verdict, measured at" the first key, no
    "measured" line), the same route as group 1's; group 3 gives every rank but 0 an empty
    directory, so the ranks disagree and the group measures again. Outputs right per tile in every
    group (fused_ranks.py suite_store)."""
    from mkernel._fused_verdicts import parse_tests, parse_verdicts
    from tests.gpu.fused_ranks import BUCKET_CASES, BUCKET_N

    cache = tmp_path / "cache"
    runs = {}
    for phase in ("first", "second", "split"):
        res = run_ranks(RANKS, world, timeout=240,
                        env=rank_env(mps, world, FUSED_SUITE="store", STORE_PHASE=phase,
                                     MKERNEL_FUSED_VERBOSE="1", MKERNEL_FUSED_VERDICT_CACHE="1",
                                     MKERNEL_CACHE_DIR=str(cache)))
        assert len(check_ranks(res)) == world * len(BUCKET_CASES), phase
        runs[phase] = res
        if phase == "first":  # group 3 overwrites rank 0's entries with its own measurement
            entries = json.loads((cache / "fused_verdicts.json").read_text())["verdicts"]
    for i, (op, m0, reused, _, k) in enumerate(BUCKET_CASES):
        tag = " peertma=auto" if op == "ag_gemm" else ""

        def key(m: int) -> str:
            return f"M={m} N={BUCKET_N} K={k} BFloat16 W={world}{tag}"

        name = f"mkernel.{op}"
        stored = [v for k_, v in entries.items() if f"|{name}|" in k_ and "(fused forced)" not in k_]
        for r in runs["first"]:
            assert key(m0) in parse_tests(r.stderr, name), (r.rank, op, "not measured first")
        first = parse_verdicts(runs["first"][0].stderr, name)[key(m0)]
        # An unfused verdict that left a fused edge unconfirmed is not stored (session 56,
        # fused_verdict.h storable): then the next group measures again.
        kept_out = f"{name}: verdict at {key(m0)} not stored for the next process"
        if any(kept_out in r.stderr for r in runs["first"]):
            assert all(kept_out in r.stderr for r in runs["first"]), (op, "the ranks disagreed")
            assert not stored, (op, stored)
            for r in runs["second"]:
                assert key(reused[0]) in parse_tests(r.stderr, name), (r.rank, op, "not measured")
            continue
        assert stored and all(v.endswith("@" + key(m0)) for v in stored), (op, stored)
        for r in runs["second"]:
            assert not parse_tests(r.stderr, name), (r.rank, op, "measured despite a stored verdict")
            assert f"(a stored verdict, measured at {key(m0)})" in r.stderr or \
                f"runs unfused (a stored verdict) at {key(reused[0])} (measured at {key(m0)})" in r.stderr, \
                (r.rank, op, r.stderr[-2000:])
            assert _route(parse_verdicts(r.stderr, name)[key(reused[0])]) == _route(first), (r.rank, op)
        for r in runs["split"]:
            assert key(reused[1]) in parse_tests(r.stderr, name), (r.rank, op, "the ranks disagreed: not measured")


CE_MARK = "mkernel.ag_gemm: copy-engine route launched"


@pytest.mark.parametrize("world", [2, 4, 8])
def test_ag_gemm_copy_engine(mps, world):
    """ag_gemm with MKERNEL_FUSED_AG_COPY_ENGINE=1 (session 27, opt-in): the rows moved by the
    copy engines while the copy kernel's GEMM waits for their flags; ragged m, return_gathered,
    back-to-back calls, the same bits as the copy kernel, calls alternating with gemm_rs (the
    launch gate's reset beside gemm_rs's tile flags), then a CUDA graph (the plan on the copy
    kernel inside capture) and an eager call after it. The route must have launched everywhere."""
    res = run_ranks(RANKS, world, timeout=300,
                    env=rank_env(mps, world, FUSED_SUITE="copyengine"))
    cases = check_ranks(res)
    # ranks x (dtypes x shapes x (3 checked outputs + same_bits) + 6 x (ag_gemm + gemm_rs)
    # alternating + 2 replays + 1 eager after)
    assert len(cases) == world * (2 * 6 * 4 + 12 + 3)
    for r in res:
        assert CE_MARK in r.stderr, f"rank {r.rank}"
    same = [c for c in cases if "same_bits" in c]
    print("same bits as the copy kernel:", sum(c["same_bits"] for c in same), "of", len(same))


@pytest.mark.parametrize("suite", ["cekill", "rscekill"])
def test_copy_engine_killed_rank(mps, suite):
    """The copy-engine routes (cekill: ag_gemm's, rscekill: gemm_rs's) at W = 4 with rank 3
    SIGKILLed after a call: every survivor raises within the op timeout (its gate's barrier, an
    entry barrier or a flag wait), naming rank 3."""
    world, timeout_s = 4, 5
    res = run_ranks(RANKS, world, timeout=90,
                    env=rank_env(mps, world, FUSED_SUITE=suite, MKERNEL_OP_TIMEOUT=str(timeout_s)))
    errs = check_killed_rank(res, world - 1, timeout_s)
    assert sum(e["record"] is not None for e in errs) >= 1, "no survivor named the killed rank"


RS_CE_MARK = "mkernel.gemm_rs: copy-engine route launched"


@pytest.mark.parametrize("world", [2, 4])
def test_gemm_rs_copy_engine(mps, world):
    """gemm_rs with MKERNEL_FUSED_RS_COPY_ENGINE=1 (session 59, opt-in): per-owner engine GEMMs,
    their partials moved into the owners' slots by the copy engines, a reduce of local memory;
    back-to-back calls, alternating with ag_gemm and the fused gemm_rs, then a CUDA graph (the
    route's plan on the fused kernel inside capture) and an eager call after it. The route must
    have launched on every rank."""
    res = run_ranks(RANKS, world, timeout=300,
                    env=rank_env(mps, world, FUSED_SUITE="rscopyengine"))
    cases = check_ranks(res)
    # ranks x (dtypes x shapes x (3 route outputs + the fused one + same_bits) + 6 x (ag_gemm +
    # gemm_rs) alternating + 2 replays + 1 eager after)
    assert len(cases) == world * (2 * 5 * 5 + 12 + 3)
    for r in res:
        assert RS_CE_MARK in r.stderr, f"rank {r.rank}"
    same = [c for c in cases if "same_bits" in c]
    print("same bits as the fused kernel:", sum(c["same_bits"] for c in same), "of", len(same))


@pytest.mark.parametrize("world", [2, 4])
def test_ag_gemm_peer_tma_graph_replay(mps, world):
    """The peer-TMA ag_gemm captured in a CUDA graph, replayed with every rank's x changed."""
    res = run_ranks(RANKS, world, timeout=240, env=rank_env(mps, world, FUSED_SUITE="peergraph"))
    assert len(check_ranks(res)) == world * 2
    for r in res:
        assert PEER_MARK in r.stderr, f"rank {r.rank}"


@pytest.mark.parametrize("world", [2, 3, 4])
def test_fused_ops_fuzz(mps, world):
    """Random calls of ag_gemm / gemm_rs / gemm_ar (fused_ranks.py suite ``fuzz``: FUZZ_CASES
    problems from FUZZ_SEED, the MKERNEL_FUZZ_* values of tests/fuzz when set), the fused kernels
    pinned, each output per tile against the fp32 reference from poisoned memory; an odd world
    size too."""
    from tests.fuzz.problems import rank_env as fuzz_env

    env = rank_env(mps, world, FUSED_SUITE="fuzz", **fuzz_env(12))
    res = run_ranks(RANKS, world, timeout=600, env=env)
    assert len(check_ranks(res)) == world * int(env["FUZZ_CASES"])
