"""bench_moe_ranks.py's moe14 helpers on the CPU: the candidate list and its drop filter (the device
job drops a mode whose test failed), the verdict inputs from the slowest rank's medians, the
DeepEP-style figures of the combine variants (reduce16's wire bytes are half), and the print."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
import bench_moe_ranks as bench  # noqa: E402


def test_variants_and_the_drop_filter(monkeypatch):
    monkeypatch.delenv("BENCH_MOE14_DROP", raising=False)
    names = list(bench.moe14_variants())
    assert "mkernel_dispatch_only_p3_kl" in names and "mkernel_combine_early" in names
    for env in bench.moe14_variants().values():  # every knob is one the ops read
        assert all(k.startswith("MKERNEL_MOE_") for k in env)
    monkeypatch.setenv("BENCH_MOE14_DROP", "p1_kl,combine_early")
    kept = list(bench.moe14_variants())
    assert "mkernel_dispatch_only_p1" in kept  # mode 1 with the ATen layout stays
    assert not any("p1_kl" in n or "combine_early" in n for n in kept)
    assert [m for m in bench.MOE14_PHASES if not bench.moe14_dropped(m)] == ["p3_kl", "counted_kl", "combine", "s20"]
    monkeypatch.setenv("BENCH_MOE14_DROP", "p3,counted_kl")
    kept = list(bench.moe14_variants())
    assert not any("_p3" in n or "counted_kl" in n for n in kept) and "mkernel_dispatch_only_p1_kl" in kept


def test_summary_and_deepep_figures(capsys):
    worst = {"mkernel_dispatch_only": 2.85, "mkernel_dispatch_only_p3_kl": 1.9, "mkernel_dispatch_only_p1_kl": 1.7,
             "mkernel_dispatch_gemm": 7.7, "mkernel_dispatch_gemm_p1_kl": 7.0, "mkernel_combine": 3.9,
             "mkernel_combine16": 2.6, "mkernel_combine_early": 3.7}
    s = bench.moe14_summary(worst)
    assert s["moe14_best_only"] == "mkernel_dispatch_only_p1_kl"
    assert s["moe14_only_vs_default"]["mkernel_dispatch_only_p3_kl"] == pytest.approx(1.9 / 2.85)
    assert s["moe14_op_vs_default"]["mkernel_dispatch_gemm_p1_kl"] == pytest.approx(7.0 / 7.7)
    assert s["moe14_combine16_vs_default"] == pytest.approx(2.6 / 3.9)
    assert s["moe14_combine_early_vs_default"] == pytest.approx(3.7 / 3.9)
    sent = [58447872, 58505216]
    d = bench.deepep_style(worst, [worst, worst], sent, {"dispatch": 58720256, "combine": 117440512}, 50.0)
    assert d["mkernel_combine16_link_ratio"] == pytest.approx(max(sent) / 2.6e-3 / 1e9 / 50.0)
    assert d["mkernel_combine16_wire_gbs"] == pytest.approx(117440512 / 2 / 2.6e-3 / 1e9)
    assert d["mkernel_combine_early_wire_gbs"] == pytest.approx(117440512 / 3.7e-3 / 1e9)
    assert d["mkernel_dispatch_only_p1_kl_link_ratio"] == pytest.approx(max(sent) / 1.7e-3 / 1e9 / 50.0)
    row = {n: {"median_ms": v} for n, v in worst.items()}
    row.update(d, **s, moe14_equal=[{"mkernel_dispatch_only_p1_kl": True}] * 2)
    bench.print_moe14(row)
    out = capsys.readouterr().out
    assert "p1_kl 1.700 ms" in out and "combine early 3.700 ms" in out
