"""The fused ops' first-call decision (fused17) on the host: tests/fused/verdict_check.cpp checks
csrc/fused_verdict.h — the sign test's table, the paired counts, round 0's prune, the screen, the
curtailed stop, the verdict's error rates and first-call cost under noise models shaped like
s13run2's MPS samples, and s13run2's recorded samples replayed (W=2 Llama fc1 M=16384 -> unfused,
W=4 -> the peer-TMA route; rs / ar W=4 -> fused) — and that mkernel/_fused_verdicts.py
parse_tests reads the test's text as the header writes it. Skipped without g++."""

from __future__ import annotations

import importlib.util
import subprocess
from pathlib import Path

from tests.host_check import build_check, run_check

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("fused_verdicts_f17",
                                               ROOT / "python" / "mkernel" / "_fused_verdicts.py")
fv = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(fv)

KEY = "M=8192 N=14336 K=8192 BFloat16 W=2 peertma=auto"


def test_verdict_header_on_the_host(tmp_path: Path) -> None:
    exe = build_check(Path(__file__).parent / "verdict_check.cpp", tmp_path,
                      flags=("-O1", "-Wall", "-Wextra", "-Werror"))
    run_check(exe, timeout=120)


def test_parse_tests_reads_the_headers_text(tmp_path: Path) -> None:
    exe = build_check(Path(__file__).parent / "verdict_check.cpp", tmp_path,
                      flags=("-O1", "-Wall", "-Wextra", "-Werror"))
    out = subprocess.run([str(exe), "describe"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    cases = out.stdout.strip().splitlines()
    assert len(cases) == 3, cases
    # choose_path's verbose line around each description (csrc/fused_common.cpp).
    got = []
    for i, tail in enumerate(cases):
        key = KEY.replace("M=8192", f"M={8192 + 128 * i}")
        line = (f"mkernel.ag_gemm: measured {key} in 2.212 s (warm-up 1.400 s, 2 calls per sample, 7 rounds): "
                f"coop_128x256_c2x1 grid 48 gated 13776.6 us (own 13757.3, 7 rounds); "
                f"unfused 14272.0 us (own 13825.4, 7 rounds, dropped); {tail}")
        got.append(fv.parse_tests(line)[key])
    kept, lost, screened = got
    assert kept["verdict"] == "fused path 1" and kept["median"] == 0.55
    assert kept["wins"] == kept["n"] == kept["needed"] and kept["planned"] >= kept["n"]
    assert kept["test_from"] == 2 and kept["below"] == 0.99
    assert kept["route_other"] == 0 and kept["route_faster"] == kept["route_n"]
    assert kept["seconds"] == 2.212 and kept["warmup_s"] == 1.4 and kept["calls"] == 2
    assert kept["rounds"] == 7
    assert lost["verdict"] == "unfused" and lost["wins"] == 0 and lost["median"] == 1.05
    assert lost["test_from"] == 0 and "route_other" not in lost and not lost["screened"]
    assert screened["verdict"] == "unfused" and screened["screened"] and "median" not in screened


def test_parse_tests_other_lines() -> None:
    assert fv.parse_tests("") == {}
    # a pre-fused17 line (no rounds in the header) is not this parser's
    old = (f"mkernel.ag_gemm: measured {KEY} in 3.080 s (2 calls per sample): "
           "unfused 14272.0 us (own 13825.4); -> fused path 1")
    assert fv.parse_tests(old) == {}
