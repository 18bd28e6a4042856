"""bench_moe_ranks.py's moe10 helpers on the CPU: the dispatch's wall-clock yardstick from the
slowest rank's medians on both sides (s12run2's per-rank subtraction charged the dispatch with the
other rank's GEMM turn), and with_env's knob toggling around one call."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
import bench_moe_ranks as bench  # noqa: E402


def test_wall_clock_from_the_slowest_rank_on_both_sides():
    # s12run2's seed 8k row: op 7.3017 ms, engine GEMM 5.4823 ms (both slowest-rank medians).
    sent = 58505216
    row = bench.wall_clock({"mkernel_dispatch_gemm": 7.301663875579834, "engine_gemm": 5.482272148132324},
                           sent, 50.0)
    over = 7.301663875579834 - 5.482272148132324
    assert row["dispatch_overhead_ms_aligned"] == pytest.approx(over)
    assert row["dispatch_gbs_per_rank_wall_aligned"] == pytest.approx(sent / (over * 1e-3) / 1e9)
    assert row["dispatch_link_ratio_wall"] == pytest.approx(sent / (over * 1e-3) / 1e9 / 50.0)
    assert 0.6 < row["dispatch_link_ratio_wall"] < 0.66  # 32.2 GB/s, not s12run2's 13.7
    assert "dispatch_speedup_vs_prev" not in row and "dispatch_overhead_ms_aligned_prev" not in row


def test_wall_clock_with_the_previous_sequence_and_edge_cases():
    row = bench.wall_clock({"mkernel_dispatch_gemm": 6.5, "mkernel_dispatch_gemm_prev": 7.5,
                            "mkernel_dispatch_gemm_p8": 6.4, "engine_gemm": 5.0}, 30_000_000, None)
    assert row["dispatch_overhead_ms_aligned_p8"] == pytest.approx(1.4)
    assert row["dispatch_overhead_ms_aligned"] == pytest.approx(1.5)
    assert row["dispatch_overhead_ms_aligned_prev"] == pytest.approx(2.5)
    assert row["dispatch_gbs_per_rank_wall_aligned_prev"] == pytest.approx(12.0)
    assert row["dispatch_link_ratio_wall"] is None  # no emulated rate given
    assert row["dispatch_speedup_vs_prev"] == pytest.approx(7.5 / 6.5)
    # An op at or below the GEMM alone (everything hidden): no rate, not a division by zero.
    row = bench.wall_clock({"mkernel_dispatch_gemm": 5.0, "engine_gemm": 5.0}, 1, 50.0)
    assert row["dispatch_gbs_per_rank_wall_aligned"] is None and row["dispatch_link_ratio_wall"] is None
    assert bench.wall_clock({"mkernel_dispatch_gemm": 5.0}, 1, 50.0) == {}
    row = bench.wall_clock({"mkernel_dispatch_gemm": 6.5, "mkernel_dispatch_gemm_p8": 6.0,
                            "engine_gemm": 5.0}, 30_000_000, 50.0)
    assert row["dispatch_link_ratio_wall_p8"] == pytest.approx(0.6)
    assert "dispatch_speedup_vs_prev" not in row


def test_with_env_sets_and_restores(monkeypatch):
    monkeypatch.delenv("MKERNEL_MOE_DISPATCH_PIPELINE", raising=False)
    monkeypatch.setenv("MKERNEL_MOE_PHASES", "7")
    seen = []
    fn = bench.with_env({"MKERNEL_MOE_DISPATCH_PIPELINE": "0", "MKERNEL_MOE_PHASES": "1"},
                        lambda: seen.append((os.environ["MKERNEL_MOE_DISPATCH_PIPELINE"],
                                             os.environ["MKERNEL_MOE_PHASES"])) or 3)
    assert fn() == 3 and seen == [("0", "1")]
    assert "MKERNEL_MOE_DISPATCH_PIPELINE" not in os.environ and os.environ["MKERNEL_MOE_PHASES"] == "7"

    def boom():
        raise RuntimeError("x")

    with pytest.raises(RuntimeError):
        bench.with_env({"MKERNEL_MOE_DISPATCH_PIPELINE": "0"}, boom)()
    assert "MKERNEL_MOE_DISPATCH_PIPELINE" not in os.environ


def test_print_row_reports_the_moe10_lines(capsys):
    phases = {"routing": 0.08, "layout": 0.3, "received": 1.3, "joined": 1.31, "gathered": 1.33,
              "gemm": 6.7, "host_ms": 0.9}
    row = {"dispatch_overhead_ms_aligned": 1.4, "dispatch_gbs_per_rank_wall_aligned": 41.8,
           "dispatch_link_ratio_wall": 0.836, "mkernel_dispatch_gemm_prev": {"median_ms": 7.3},
           "dispatch_overhead_ms_aligned_prev": 1.82, "dispatch_link_ratio_wall_prev": 0.64,
           "dispatch_speedup_vs_prev": 1.06, "dispatch_phases": {"pipelined": [phases, {}], "prev": [{}, {}]}}
    bench.print_moe10(row)
    out = capsys.readouterr().out
    assert "0.84x the link" in out and "speed-up 1.060x" in out and "received 1.300" in out
    json.dumps(row)
    bench.print_moe10({})  # a one-node row: nothing
    assert capsys.readouterr().out == ""


def test_deepep_style_dispatch_only_and_combine():
    # moe13: bytes sent / the op's own time (no GEMM), slowest rank and each rank's own median.
    sent = [58_000_000, 58_500_000]
    worst = {"mkernel_dispatch_only": 1.5, "mkernel_dispatch_only_counted": 1.3, "mkernel_combine": 2.6,
             "mkernel_dispatch_gemm": 7.0, "engine_gemm": 5.0}
    own = [{"mkernel_dispatch_only": 1.4, "mkernel_dispatch_only_counted": 1.2, "mkernel_combine": 2.5},
           {"mkernel_dispatch_only": 1.5, "mkernel_dispatch_only_counted": 1.3, "mkernel_combine": 2.6}]
    wire = {"dispatch": 58_720_256, "combine": 2 * 58_720_256}
    row = bench.deepep_style(worst, own, sent, wire, 50.0)
    assert row["mkernel_dispatch_only_gbs"] == pytest.approx(58.5e6 / 1.5e-3 / 1e9)
    assert row["mkernel_dispatch_only_link_ratio"] == pytest.approx(58.5e6 / 1.5e-3 / 1e9 / 50)
    assert row["mkernel_dispatch_only_gbs_per_rank_own"] == pytest.approx([58e6 / 1.4e-3 / 1e9, 58.5e6 / 1.5e-3 / 1e9])
    assert row["mkernel_dispatch_only_link_ratio_own_min"] == pytest.approx(58.5e6 / 1.5e-3 / 1e9 / 50)
    assert row["mkernel_dispatch_only_counted_wire_link_ratio"] == pytest.approx(58_720_256 / 1.3e-3 / 1e9 / 50)
    # The combine's reduce moves fp32 partials: its wire ratio is 2x its logical one.
    assert row["mkernel_combine_wire_gbs"] == pytest.approx(2 * 58_720_256 / 2.6e-3 / 1e9)
    assert "mkernel_dispatch_gemm_gbs" not in row and "engine_gemm_gbs" not in row
    # No emulated rate: bandwidths kept, ratios None; no wire bytes: no wire keys.
    row = bench.deepep_style(worst, own, sent, {}, None)
    assert row["mkernel_combine_link_ratio"] is None and row["mkernel_combine_gbs"] > 0
    assert not any(k.endswith("_wire_gbs") for k in row)


def test_print_lean_row_and_targets(capsys):
    row = {"name": "seed_e256_top8_8k", "world": 2, "nodes": 2, "emulate": "50GB/s,3us", "lean": True,
           "copier_submit_env": "ce", "sent_bytes_per_rank": [1, 2],
           "mkernel_dispatch_gemm": {"median_ms": 7.0}, "mkernel_dispatch_gemm_counted": {"median_ms": 6.6},
           "engine_gemm": {"median_ms": 5.0}, "mkernel_dispatch_only": {"median_ms": 1.8},
           "mkernel_combine": {"median_ms": 2.5}, "dispatch_speedup_counted": 7.0 / 6.6,
           "link_paths": {"link_exchange_gather": {"ms": 1.3, "gbs_per_rank": 45.0}},
           "dispatch_link_ratio_wall": 0.64, "mkernel_dispatch_only_gbs": 32.0,
           "mkernel_dispatch_only_link_ratio": 0.64, "mkernel_combine_gbs": 23.0,
           "mkernel_combine_link_ratio": 0.46, "dispatch_phases": {"prev": [{"joined": 1.4}, {}]}}
    bench.print_row(row)
    bench.print_targets([row])
    out = capsys.readouterr().out
    assert "lean, copier submit ce" in out and "counted 6.600 ms" in out
    assert "dispatch_only 1.800 ms = 32.0 GB/s/rank = 0.64x the link" in out
    assert "dispatch_only 0.64x the 50 GB/s link [MISSED]" in out and "combine 0.46x" in out
    assert "phases prev" in out and "joined 1.400" in out
