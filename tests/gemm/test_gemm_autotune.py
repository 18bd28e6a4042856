"""The engine's cached autotuner (what ``config="auto"`` runs) and programmatic
dependent launch, against float64 references.

The tuner may pick any of several configs for a shape, so it rests on one
premise that is tested here: configs that do not split K give the same bits.
PDL lets a GEMM start while the previous kernel on the stream drains, so a
chain of GEMMs that each read the previous one's output checks that no load
runs ahead of the data it needs.
"""

from __future__ import annotations

import random

import pytest
import torch

import mkernel
from mkernel.ops import GEMM_CONFIGS

from .checks import check_gemm, poisoned_call, reference, rel_err
from .test_gemm_engine import needs_hopper

# Configs that split K (their sums run in another order): not tuning candidates.
SPLITS_K = ("coop_128x128_streamk", "coop_128x256_c2x1_streamk")
# The swapped-operand GEMM's variants (gemm_swap_dispatch.cu order).
SWAP_VARIANTS = ["swap_128x176_c2x1", "swap_128x176_streamk", "swap_128x64_streamk", "swap_128x128_streamk",
                 "swap_128x176_c2x2", "swap_128x192_c2x1", "swap_64x64_ping", "swap_64x16_ping",
                 "swap_128x16_streamk", "swap_128x112_streamk", "swap_64x176_ping", "swap_256x176_streamk",
                 "swap_256x176_k2", "swap_128x176_sk", "swap_256x176_k4", "swap_64x16k256_ping",
                 "swap_128x176_k2", "swap_128x176_tk", "swap_128x112_tk", "swap_128x112k128_tk", "swap_256x112_tk",
                 "swap_128x336_wide", "swap_128x176_c1x2", "swap_64x176_c4x2",
                 "swap_128x168", "swap_128x168_c1x2", "swap_128x168_c2x1", "swap_64x168_c4x2",
                 "swap_64x168_c1x2", "swap_128x176_ds", "swap_64x176_c4x2_ds",
                 "swap_128x168_c1x2_h", "swap_64x168_c4x2_h"]


def parse_plan(plan: str) -> tuple[str, int, str]:
    cfg, swz, ras = plan.split()[0].split("/")
    return cfg, int(swz[1:]), ras


def test_plan_and_pdl_on_cpu():
    a, b = torch.randn(5, 16), torch.randn(24, 16)
    assert mkernel.gemm_plan(a, b) == "host reference"
    assert rel_err(mkernel.gemm(a, b, pdl=False), reference(a, b)) < 1e-6
    with pytest.raises(ValueError, match="sm_count"):
        mkernel.gemm_plan(a, b, sm_count=-1)


@needs_hopper
@pytest.mark.gpu
@pytest.mark.parametrize("m,n,k", [(129, 1032, 512), (1000, 776, 1048)])
def test_configs_without_split_k_give_identical_bits(m, n, k):
    a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(n, k, device="cuda", dtype=torch.bfloat16)
    outs = {c: mkernel.gemm(a, b, config=c, splits=1) for c in GEMM_CONFIGS
            if c not in SPLITS_K + ("auto",)}
    first = next(iter(outs.values()))
    check_gemm(first, a, b)
    differ = [c for c, o in outs.items() if not torch.equal(o, first)]
    assert not differ, f"configs {differ} give other bits than {next(iter(outs))}"


@needs_hopper
@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("kind", ["decode", "mid", "large"])
def test_autotuned_plan_is_cached_and_exact(kind, dtype):
    rng = random.Random(f"{kind}/{dtype}")  # seeded: a failure reproduces with the same shape
    # decode from 17 rows: M <= 16 runs the GEMV kernel, not a tuned plan (test_gemv.py)
    m = {"decode": rng.randrange(17, 257), "mid": rng.randrange(257, 1025),
         "large": rng.randrange(1025, 3000)}[kind]
    n, k = 8 * rng.randrange(64, 520), 8 * rng.randrange(32, 300)  # fresh shape: not tuned yet
    a = torch.randn(m, k, device="cuda", dtype=dtype)
    b = torch.randn(n, k, device="cuda", dtype=dtype)
    # first call: tunes, then runs the winner into its own output
    out = poisoned_call(lambda: mkernel.gemm(a, b), (m, n), dtype)
    check_gemm(out, a, b, what=f"{m}x{n}x{k}: ")
    plan = mkernel.gemm_plan(a, b)
    assert plan.endswith(" (tuned)"), plan
    assert mkernel.gemm_plan(a, b) == plan  # cached
    if plan.startswith("swap_"):  # 17..512 rows: the swapped GEMM measured faster (test_gemm_swap.py)
        assert m <= 512
        assert torch.equal(out, torch.ops.mkernel.gemm_swap(a, b, SWAP_VARIANTS.index(plan.split()[0])))
        return
    if plan.startswith("split:"):  # MKERNEL_GEMM_SMALLM_S11=1: the hooked kernel, K split
        cfg, _, splits = plan.split()[0][6:].partition("/k")
        assert m <= 512
        assert torch.equal(out, mkernel.gemm(a, b, config=cfg, splits=int(splits)))
        return
    cfg, swz, ras = parse_plan(plan)
    assert cfg in GEMM_CONFIGS and cfg not in SPLITS_K
    assert torch.equal(out, mkernel.gemm(a, b, config=cfg, swizzle=swz, raster=ras, splits=1))


@needs_hopper
@pytest.mark.gpu
def test_no_tuning_inside_graph_capture():
    m, n, k = 901, 1304, 776  # a shape no other test uses
    a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(n, k, device="cuda", dtype=torch.bfloat16)
    stream = torch.cuda.Stream()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.stream(stream):
        mkernel.gemm(a, b, config="coop_128x128_c2x1")  # load the module's kernels outside capture
        stream.synchronize()
        with torch.cuda.graph(graph, stream=stream):
            out = mkernel.gemm(a, b)
    a.copy_(torch.randn_like(a))
    graph.replay()
    torch.cuda.synchronize()
    check_gemm(out, a, b)
    assert mkernel.gemm_plan(a, b).endswith(" (tuned)")  # tuned now, outside capture


@needs_hopper
@pytest.mark.gpu
@pytest.mark.parametrize("how", ["auto", "ping_64x128_c1x1", "coop_128x256_c2x1",
                                 "coop_128x256_c2x1_streamk", "hooked-split-k"])
def test_pdl_chain_reads_each_previous_output(how):
    """x_{i+1} = x_i · w_iᵀ, launched back to back with PDL: each GEMM's loads must
    wait for the previous GEMM's stores (griddepcontrol.wait before any global access)."""
    m, width, steps = 200 if how.startswith("ping") else 1500, 1024, 6
    x = torch.randn(m, width, device="cuda", dtype=torch.float16)
    ws = [torch.randn(width, width, device="cuda", dtype=torch.float16) / width ** 0.5
          for _ in range(steps)]

    def step(t, w):
        if how == "auto":
            return mkernel.gemm(t, w, pdl=True)
        if how == "hooked-split-k":
            return mkernel.gemm(t, w, config="coop_128x128_c2x1", splits=3, pdl=True)
        return mkernel.gemm(t, w, config=how, splits=1, pdl=True)

    step(x, ws[0])  # tune / load outside the timed chain
    torch.cuda.synchronize()
    t = x
    for w in ws:
        t = step(t, w)
    ref = x.double().cpu()
    for w in ws:  # round to fp16 after every step, as the chain does
        ref = (ref @ w.double().cpu().T).half().double()
    assert rel_err(t, ref) < 2e-2


# A fresh process per case: the warm-up knob is read once per process.
_TUNE_ONE = """
import torch, mkernel
a = torch.randn(1000, 1032, device="cuda", dtype=torch.bfloat16)
b = torch.randn(2056, 1032, device="cuda", dtype=torch.bfloat16)
print("PLAN", mkernel.gemm_plan(a, b), flush=True)
"""


def _tune_in_fresh_process(env: dict[str, str]):
    import os
    import subprocess
    import sys

    full = {**os.environ, "MKERNEL_GEMM_PLAN_CACHE": "0", "MKERNEL_GEMM_AUTOTUNE_LOG": "1", **env}
    return subprocess.run([sys.executable, "-c", _TUNE_ONE], env=full, capture_output=True, text=True,
                          timeout=180)


@needs_hopper
def test_warm_up_runs_until_the_call_time_settles():
    """The tuner's warm-up (gemm_autotune.cpp warm_up): at least 300 ms, at most ~1.5 s (plus the
    last block), before the timed rounds; the log names how it ended."""
    import re

    r = _tune_in_fresh_process({})
    assert r.returncode == 0, r.stderr[-3000:]
    assert "(tuned)" in r.stdout, r.stdout
    m = re.search(r"mkernel autotune: warm-up (\d+) ms \((settled|the limit)\)", r.stderr)
    assert m, r.stderr[-3000:]
    assert 300 <= int(m.group(1)) <= 1600, m.group(0)


@needs_hopper
@pytest.mark.parametrize("value", ["soon", "-5", "1e3"])
def test_warm_up_knob_refuses_a_bad_value(value):
    r = _tune_in_fresh_process({"MKERNEL_GEMM_AUTOTUNE_WARM_MS": value})
    assert r.returncode != 0, r.stdout
    assert "MKERNEL_GEMM_AUTOTUNE_WARM_MS" in r.stderr and value in r.stderr, r.stderr[-3000:]


@needs_hopper
def test_warm_up_knob_fixes_it():
    """MKERNEL_GEMM_AUTOTUNE_WARM_MS=0: no warm-up (and no warm-up line); the plan is still tuned."""
    r = _tune_in_fresh_process({"MKERNEL_GEMM_AUTOTUNE_WARM_MS": "0"})
    assert r.returncode == 0, r.stderr[-3000:]
    assert "(tuned)" in r.stdout and "warm-up" not in r.stderr, (r.stdout, r.stderr[-3000:])
