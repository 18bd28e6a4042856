"""benchmarks/report.py (JSON -> markdown table + PNG) and benchmarks/run.py (`make bench`) on a
machine without a GPU: tables from the recorded runs, a plot only where matplotlib is, and no
benchmark started without a GPU."""

from __future__ import annotations

import importlib.util
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "benchmarks" / "results"
sys.path.insert(0, str(ROOT / "benchmarks"))
import report  # noqa: E402

HAVE_MPL = importlib.util.find_spec("matplotlib") is not None


def copy(name: str, tmp_path: Path) -> Path:
    dst = tmp_path / name
    shutil.copy(RESULTS / name, dst)
    return dst


def test_gemm_table_has_every_shape_with_its_ratio_and_spread(tmp_path):
    path = copy("gemm_nvidia_h200_20261129-183111.json", tmp_path)
    md, png = report.report(path)
    text = md.read_text()
    data = json.loads(path.read_text())
    for r in data["results"]:
        auto = r["final"]["auto"]
        line = next(ln for ln in text.splitlines() if ln.startswith(f"| {r['m']}x{r['n']}x{r['k']} "))
        assert f"| {auto['ratio_vs_cublas']:.3f} |" in line, line
        assert f"{min(auto['round_ratios']):.3f}-{max(auto['round_ratios']):.3f}" in line, line
    # run 18: 8192x7168x8192 at 0.998x, named as a loss
    assert "slower than cuBLAS in this run: 8192x7168x8192" in text
    assert (png is not None) == HAVE_MPL
    if png is not None:
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_grouped_and_generic_tables(tmp_path):
    md, _ = report.report(copy("grouped_gemm_nvidia_h200_20261129-185933.json", tmp_path))
    assert "| skewed |" in md.read_text() and "1.129" in md.read_text()
    md, png = report.report(copy("proxy_cpu_20261129-120538.json", tmp_path))
    assert png is None and "## proxy_rate" in md.read_text()


@pytest.mark.skipif(HAVE_MPL, reason="matplotlib is installed: the PNG is written")
def test_no_matplotlib_still_writes_the_table(tmp_path, capsys):
    report.main([str(copy("gemm_nvidia_h200_20261129-185927.json", tmp_path))])
    assert (tmp_path / "gemm_nvidia_h200_20261129-185927.md").exists()
    assert "matplotlib is not installed: no plot" in capsys.readouterr().err


@pytest.mark.skipif(torch.cuda.is_available(), reason="a GPU is present: make bench would run them")
def test_make_bench_without_gpu_runs_nothing():
    before = sorted(RESULTS.iterdir())
    r = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "run.py")], capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert "no CUDA GPU on this machine: ran nothing" in r.stdout and "gemm" in r.stdout
    assert sorted(RESULTS.iterdir()) == before


def test_every_recorded_result_renders(tmp_path):
    """Every JSON under results/ (the older layouts too) gets its table."""
    for path in sorted(RESULTS.glob("*.json")):
        md, _ = report.report(copy(path.name, tmp_path))
        assert md.read_text().count("|---") >= 1, path.name


def test_ring_attention_table_and_plot(tmp_path):
    path = copy("ring_attention_nvidia_h200_20261202-013333.json", tmp_path)
    md, png = report.report(path)
    text = md.read_text()
    data = json.loads(path.read_text())
    for r in data["rows"]:
        line = next(ln for ln in text.splitlines()
                    if ln.startswith(f"| {r['shape']} | {r['causal']} |"))
        assert f"| {r['vs_ceiling']:.3f} | - | {r['vs_unfused']:.3f} |" in line, line  # no agg: session 6
    assert "per-step pinned" not in text  # session 6 did not time it
    assert (png is not None) == HAVE_MPL


def test_fused_table_and_plot(tmp_path):
    """bench_fused's JSON (key "bench": "fused"): a row per op and shape with its ratio to the
    unfused path and to the overlap ideal, and the PNG the fused-op issue asks for."""
    path = copy("fused_w2_nvidia_h200_20261202-082459.json", tmp_path)
    md, png = report.report(path)
    text = md.read_text()
    data = json.loads(path.read_text())
    assert "x unfused" in text and "x ideal" in text
    for r in data["rows"]:
        line = next(ln for ln in text.splitlines()
                    if ln.startswith(f"| {r['op']} | {r['shape']} |"))
        assert f"| {r['unfused_over_fused']:.4g} |" in line, line
        assert line.rstrip().endswith(f"| {r['fused_vs_ideal']:.4g} |"), line
    assert (png is not None) == HAVE_MPL


@pytest.mark.parametrize("name", ["attention_nvidia_h100_80gb_hbm3_20261206-113800.json",
                                  "attention_bwd_nvidia_h100_80gb_hbm3_20261206-114038.json"])
def test_attention_table_and_plot(tmp_path, name):
    """bench_attention's JSON (key "bench": "attention_fwd" / "attention_fwd_bwd"): a row per
    problem with its TFLOP/s and ratios to SDPA's backends, and the PNG issue 13 asks for."""
    path = copy(name, tmp_path)
    md, png = report.report(path)
    text = md.read_text()
    data = json.loads(path.read_text())
    for r in data["rows"]:
        label = f"S {r['s']} b {r['b']} {'causal' if r['causal'] else 'non-causal'}"
        line = next(ln for ln in text.splitlines() if ln.startswith(f"| {label} |"))
        assert f"| {r['ratio_vs_cudnn']:.3f} | {r['ratio_vs_flash']:.3f} |" in line, line
        if data["bench"] == "attention_fwd_bwd":
            assert line.rstrip().endswith(f"| {r['gpu_bwd_mkernel_ratio_vs_best_sdpa']:.3f} |"), line
    assert (png is not None) == HAVE_MPL
