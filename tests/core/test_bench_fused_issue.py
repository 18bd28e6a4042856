"""benchmarks/bench_fused.py's item-11 set and W = 4 measurement aids on a machine without a GPU:
the per-rank shapes of `--set issue`, the placement probe's verdict (the largest 2-CTA-cluster grid
every rank got whole), and benchmarks/report.py's tables of the probe, the variants and the
timelines (bench_fused --probe --variants ...)."""

from __future__ import annotations

import importlib.util
import json
import shutil
import sys
from pathlib import Path

from tests import source_module

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "benchmarks" / "results"
sys.path.insert(0, str(ROOT / "benchmarks"))
import report  # noqa: E402

HAVE_MPL = importlib.util.find_spec("matplotlib") is not None


def bench_fused():
    """The module without running it (its rank / parent code runs only as __main__ / __rank__)."""
    return source_module.load("benchmarks/bench_fused.py", "bench_fused_under_test")


def test_issue_set_per_rank_shapes():
    bf = bench_fused()
    for world in (2, 4):
        rows = bf.issue_shapes(world, full=False)
        labels = [(op, label) for op, label, *_ in rows]
        assert len(labels) == len(set(labels)) == 12
        # the square families first (a budget cut keeps them whole), then Llama M=8192, 16384
        assert [label for _, label in labels[:6]] == ["square M=4096"] * 3 + ["square M=16384"] * 3
        got = {(op, label): dims for op, label, *dims in rows}
        for m in (4096, 16384):
            assert got[("ag_gemm", f"square M={m}")] == [m // world, m, m // 16]
            assert got[("gemm_rs", f"square M={m}")] == [m, m // 16 // world, m]
            assert got[("gemm_ar", f"square M={m}")] == [m, m // 16 // world, m]
        for m in (8192, 16384):
            assert got[("ag_gemm", f"llama70b-fc1 M={m}")] == [m // world, 8192, 28672 // world]
            assert got[("gemm_rs", f"llama70b-fc2 M={m}")] == [m, 28672 // world, 8192]
            assert got[("gemm_ar", f"llama70b-fc2 M={m}")] == [m, 28672 // world, 8192]
    full = bf.issue_shapes(4, full=True)
    assert sorted({int(label.split("=")[1]) for _, label, *_ in full if "square" in label}) == \
        [2048, 4096, 8192, 16384, 32768]


def test_best_whole_grid_needs_every_rank_in_every_rep():
    bf = bench_fused()
    probes = [{"cluster": 2, "grid": 24, "first_wave_per_rank": [[24] * 4, [24] * 4]},
              {"cluster": 2, "grid": 26, "first_wave_per_rank": [[26] * 4, [26, 26, 26, 20]]},
              {"cluster": 2, "grid": 28, "first_wave_per_rank": [[28] * 4, [28] * 4]},
              {"cluster": 2, "grid": 30, "first_wave_per_rank": [[30, 30, 18, 30], [30] * 4]},
              {"cluster": 1, "grid": 33, "first_wave_per_rank": [[33] * 4, [33] * 4]}]
    assert bf.best_whole_grid(probes) == 28  # 1-CTA probes never count: the fused grid is 2-CTA
    assert bf.best_whole_grid(probes[1:2]) == 0
    assert bf.row_falls_back("unfused: measured not faster") and not bf.row_falls_back("fused x")


def test_report_of_probe_variants_and_timelines(tmp_path):
    path = tmp_path / "fused_w4_nvidia_h200_20991231-000000.json"
    shutil.copy(RESULTS / "fused_w2_nvidia_h200_20261202-082459.json", path)
    data = json.loads(path.read_text())
    data["world"] = 4
    data["placement"] = {"share_sms": 33, "default_co_grid": 24, "best_c2_grid": 28, "probes": [
        {"cluster": 2, "grid": 28, "first_wave_per_rank": [[28] * 4, [28] * 4], "whole": True},
        {"cluster": 2, "grid": 30, "first_wave_per_rank": [[30, 30, 30, 6], [30] * 4],
         "whole": False}]}
    data["variants"] = {"co": {"MKERNEL_FUSED_CO_GRID": "28"}}
    llama = [r for r in data["rows"] if "llama" in r["shape"]]
    assert llama
    for r in data["rows"]:
        r["gemm_plan"] = "ping_64x256_c1x1/s8/n (tuned)"
        r.pop("fused_kernel_ms", None)  # --lean: only where the op falls back
    for r in llama:
        r.update(fused_co_ms=0.9 * r["fused_ms"], fused_co_vs_ideal=0.9 * r["fused_vs_ideal"],
                 fused_co_over_fused_paired=0.9, fused_co_same_bits=True,
                 gemm_hooked_co_ms=1.07 * r["gemm_ms"],
                 timeline={"launches": [
                     {"first_wave_min": 24, "ctas": 24, "gemm_phase_us": 6100.0, "tail_us": 310.5,
                      "copy_gbs_min": 151.0, "period_us": None},
                     {"first_wave_min": 20, "ctas": 24, "gemm_phase_us": 6200.0, "tail_us": 290.0,
                      "copy_gbs_min": None, "period_us": 6480.0}],
                     "period_us": 6480.0, "peak_ctas": 96})
    path.write_text(json.dumps(data))
    md, png = report.report(path)
    text = md.read_text()
    assert "largest grid whole on every rank = 28 (3/4 rule: 24)" in text
    assert "| 2 | 30 | [[30, 30, 30, 6], [30, 30, 30, 30]] | False |" in text
    assert "ping_64x256_c1x1/s8/n (tuned)" in text
    for r in llama:
        lines = [ln for ln in text.splitlines() if ln.startswith(f"| {r['op']} | {r['shape']} |")]
        assert len(lines) == 4, lines  # the main table, the plans, the variants, the timelines
        main, plan, variant, timeline = lines
        assert plan.rstrip().endswith("| ping_64x256_c1x1/s8/n (tuned) |"), plan
        assert main.rstrip().endswith(f"| {r['fused_vs_ideal']:.4g} |"), main
        assert f"| {r['fused_co_ms']:.4g} | {r['fused_co_vs_ideal']:.4g} | 0.9 | True |" in variant
        assert variant.rstrip().endswith("| 1.07 |"), variant  # hooked GEMM / GEMM alone
        assert "| 24/24 20/24 |" in timeline and "| 310.5 / 290 |" in timeline, timeline
    assert (png is not None) == HAVE_MPL


def test_fused16_job_rows():
    """The rows of fused16's device jobs (requests/fused16.md): W = 2 square ag M=16384 + Llama fc1
    M=16384 with the peertma variant on both; W = 4 the Llama M=16384 rows of the three ops."""
    bf = bench_fused()
    only = ["square M=16384", "llama70b-fc1 M=16384"]
    rows = bf.select_rows(bf.issue_shapes(2, full=False), only, ["ag_gemm"])
    assert [(op, label, a, b, c) for op, label, a, b, c in rows] == [
        ("ag_gemm", "square M=16384", 8192, 16384, 1024),
        ("ag_gemm", "llama70b-fc1 M=16384", 8192, 8192, 14336)]
    assert all(any(w in label for w in only) for _, label, *_ in rows)  # --variant-rows = --only
    rows4 = bf.select_rows(bf.issue_shapes(4, full=False),
                           ["llama70b-fc1 M=16384", "llama70b-fc2 M=16384"], [])
    assert [(op, label) for op, label, *_ in rows4] == [
        ("ag_gemm", "llama70b-fc1 M=16384"), ("gemm_rs", "llama70b-fc2 M=16384"),
        ("gemm_ar", "llama70b-fc2 M=16384")]
    assert [dims for _, _, *dims in rows4] == [[4096, 8192, 7168], [16384, 7168, 8192],
                                               [16384, 7168, 8192]]


def test_peer_choice_fields():
    """bench_fused.peer_choice: the op's route (from its verbose path) against both forced
    kernels — the fields fused16's rule reads."""
    bf = bench_fused()
    row = {"op": "ag_gemm", "shape": "square M=16384",
           "path": "fused coop_128x256_c2x1 peer-TMA order 0/0 grid 0 (the share)",
           "fused_ms": 2.05, "fused_kernel_ms": 2.75, "fused_peertma_ms": 2.04,
           "fused_paired_kernel": 0.75, "fused_over_peertma_paired": 1.004,
           "fused_peertma_over_kernel_paired": 0.714}
    c = bf.peer_choice(row)
    assert c["route"] == "peer-TMA" and c["forced_faster"] == "peer-TMA" and c["picked_faster"]
    assert c["op_over_best_forced"] == round(2.05 / 2.04, 4)
    assert c["peer_over_copy"] == round(2.04 / 2.75, 4)
    assert c["peer_over_copy_paired"] == 0.714 and c["op_over_peer_paired"] == 1.004
    fc1 = dict(row, shape="llama70b-fc1 M=16384",
               path="fused coop_128x256_c2x1 order 0/0 grid 48", fused_ms=6.3,
               fused_kernel_ms=6.25, fused_peertma_ms=6.47)
    c = bf.peer_choice(fc1)
    assert c["route"] == "copy" and c["forced_faster"] == "copy" and c["picked_faster"]
    wrong = dict(fc1, path="fused coop_128x256_c2x1 peer-TMA order 0/0 grid 48")
    assert not bf.peer_choice(wrong)["picked_faster"]
    fell = dict(fc1, path="unfused: measured not faster ...")
    assert bf.peer_choice(fell)["route"] == "unfused" and not bf.peer_choice(fell)["picked_faster"]


def test_report_of_the_route_choice(tmp_path):
    """report.py's table of the peertma rows' `choice` (fused16)."""
    bf = bench_fused()
    path = tmp_path / "fused_w2_nvidia_h200_20991231-000001.json"
    shutil.copy(RESULTS / "fused_w2_nvidia_h200_20261202-082459.json", path)
    data = json.loads(path.read_text())
    row = next(r for r in data["rows"] if r["op"] == "ag_gemm")
    row.update(path="fused coop_128x256_c2x1 peer-TMA order 0/0 grid 0 (the share)",
               fused_kernel_ms=1.2 * row["fused_ms"], fused_peertma_ms=row["fused_ms"],
               fused_peertma_over_kernel_paired=0.83, fused_over_peertma_paired=1.0)
    row["choice"] = bf.peer_choice(row)
    path.write_text(json.dumps(data))
    md, _ = report.report(path)
    text = md.read_text()
    assert "ag_gemm's route (MKERNEL_FUSED_AG_PEER_TMA=auto" in text
    line = [ln for ln in text.splitlines()
            if ln.startswith(f"| ag_gemm | {row['shape']} | peer-TMA | peer-TMA | True |")]
    assert len(line) == 1 and "| 0.83 | 1 |" in line[0], line


def test_verdict_summary_line():
    """fused17: each row's VERDICT line (the first call's test, parsed from the verbose line by
    mkernel/_fused_verdicts.py parse_tests, and the steady-state ratios the NOTES rule reads)."""
    bf = bench_fused()
    fv = source_module.load("python/mkernel/_fused_verdicts.py", "fused_verdicts_bench")
    key = "M=4096 N=7168 K=8192 BFloat16 W=4 peertma=auto"
    line = (f"mkernel.ag_gemm: measured {key} in 2.305 s (warm-up 1.400 s, 2 calls per sample, 7 rounds): "
            "coop_128x256_c2x1 grid 0 20997.1 us (own 20994.2, 2 rounds, dropped); "
            "unfused 22198.4 us (own 20933.9, 7 rounds); fused/unfused per round: median 0.612, "
            "5 of 5 test rounds below 0.99 (5 needed of 5 planned; 7 rounds, the test from round "
            "2); route vs path 1: median 0.931, faster in 5 of 5 -> fused path 3")
    tests = fv.parse_tests(line)
    row = {"op": "ag_gemm", "shape": "llama70b-fc1 M=16384", "world": 4,
           "path": "fused coop_128x256_c2x1 peer-TMA order 0/0 grid 28", "first_call_s": 0.93,
           "first_call_test": tests[key], "unfused_over_fused": 1.61234, "fused_vs_ideal": 0.99,
           "unfused_over_fused_paired": 1.5, "choice": {"op_over_best_forced": 1.01,
                                                        "forced_faster": "peer-TMA",
                                                        "route": "peer-TMA"}}
    v = bf.verdict_summary(row)
    assert v["verdict"] == "fused path 3" and v["rounds"] == 7 and v["test_median"] == 0.612
    assert v["rounds_s"] == 0.905 and v["warmup_s"] == 1.4
    assert (v["test_wins"], v["test_n"], v["test_needed"]) == (5, 5, 5)
    assert v["route_median"] == 0.931 and v["unfused_over_fused"] == 1.6123
    assert v["op_over_best_forced"] == 1.01 and v["route"] == "peer-TMA"
    json.dumps(v)
    # no test parsed (an older build, or the key measured before): the row's figures only
    bare = bf.verdict_summary({"op": "gemm_rs", "shape": "x", "path": "fused",
                               "first_call_test": None, "unfused_over_fused": 1.2})
    assert bare["verdict"] is None and bare["unfused_over_fused"] == 1.2
