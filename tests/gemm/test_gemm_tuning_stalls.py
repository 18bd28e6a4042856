"""What the autotuner must not cost a running job (GPU): a new M reuses its bucket's plan, a
thread never waits for another thread's tuning, and a captured graph's split-K workspace stays
valid whatever runs eagerly afterwards."""

from __future__ import annotations

import threading
import time

import pytest
import torch

import mkernel

from .checks import reference, rel_err
from .test_gemm_engine import needs_hopper

pytestmark = [pytest.mark.gpu, needs_hopper]


def operands(m: int, n: int, k: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator(device="cuda").manual_seed(seed)
    return (torch.randn(m, k, device="cuda", dtype=torch.bfloat16, generator=g),
            torch.randn(n, k, device="cuda", dtype=torch.bfloat16, generator=g))


def test_new_m_reuses_its_buckets_plan_without_tuning():
    a, b = operands(300, 2056, 1032, 1)  # M bucket 512; N, K no other test uses
    plan = mkernel.gemm_plan(a, b)
    assert plan.endswith(" (tuned)"), plan
    for m in (257, 333, 511, 512):  # same bucket: the same plan, no tuning (~0.3 s) on the way
        x = torch.randn(m, a.shape[1], device="cuda", dtype=torch.bfloat16)
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        assert mkernel.gemm_plan(x, b) == plan, m
        assert time.perf_counter() - t0 < 0.05, f"M={m} took {time.perf_counter() - t0:.3f} s"
        assert rel_err(mkernel.gemm(x, b), reference(x, b)) < 1e-2
    x = torch.randn(513, a.shape[1], device="cuda", dtype=torch.bfloat16)
    assert mkernel.gemm_plan(x, b).endswith(" (tuned)")  # next bucket: tuned on its own


def test_a_call_never_waits_for_another_threads_tuning():
    a, b = operands(1500, 3080, 2056, 2)  # a large new shape: ~0.3 s of tuning
    x, y = operands(700, 1048, 1544, 3)   # another new shape, called while the first tunes
    started, waited = threading.Event(), []

    def tune():
        started.set()
        mkernel.gemm_plan(a, b)

    t = threading.Thread(target=tune)
    t.start()
    started.wait()
    time.sleep(0.02)  # the tuner holds the device by now (it runs ~0.3 s)
    t0 = time.perf_counter()
    out = mkernel.gemm(x, y)  # must not block on the tuning: runs the heuristic's plan
    waited.append(time.perf_counter() - t0)
    t.join()
    assert rel_err(out, reference(x, y)) < 1e-2
    assert waited[0] < 0.1, f"gemm waited {waited[0]:.3f} s for another shape's tuning"
    assert mkernel.gemm_plan(x, y).endswith(" (tuned)")  # tuned once asked (the query waits)


def test_captured_split_k_workspace_survives_a_bigger_eager_shape():
    """The graph bakes its split-K workspace's address in; a later, bigger split-K GEMM on the
    same stream must not free it (freed, the memory is handed to other tensors and the replay
    reads their bytes as split-K tickets)."""
    stream = torch.cuda.Stream()
    a, b = operands(256, 1024, 4096, 4)
    big_a, big_b = operands(2048, 8192, 8192, 5)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.stream(stream):
        mkernel.gemm(a, b, config="coop_128x128_c2x1", splits=4)  # load outside capture
        stream.synchronize()
        with torch.cuda.graph(graph, stream=stream):
            out = mkernel.gemm(a, b, config="coop_128x128_c2x1", splits=4)
        for _ in range(2):  # eager, same stream, a workspace many times larger
            mkernel.gemm(big_a, big_b, config="coop_128x128_c2x1", splits=4)
        stream.synchronize()
    junk = [torch.full((1 << 20,), -1, device="cuda", dtype=torch.int64) for _ in range(64)]
    for seed in (6, 7):
        a.copy_(operands(256, 1024, 4096, seed)[0])
        graph.replay()
        torch.cuda.synchronize()
        assert rel_err(out, reference(a, b)) < 1e-2
    del junk
