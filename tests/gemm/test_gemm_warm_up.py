"""The GEMM tuner's warm-up rule (csrc/gemm_warm_up.h, run by gemm_autotune.cpp warm_up before the
timed rounds), on the CPU: a small program feeds it block times and reports where it stopped.
The rule: blocks until three in a row lie within 0.5% of the one before, at least 300 ms in, or
1500 ms in all."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PROGRAM = r"""
#include <cstdio>
#include <sstream>
#include <string>
#include <iostream>
#include "gemm_warm_up.h"
int main() {
  std::string line;
  while (std::getline(std::cin, line)) {  // one case a line: block times in ms
    std::istringstream in(line);
    mkernel::gemm::WarmUpRule rule;
    int blocks = 0;
    float ms;
    while (in >> ms) {
      ++blocks;
      if (rule.add(ms)) break;
    }
    std::printf("%d %.3f %d\n", blocks, rule.spent_ms(), rule.settled() ? 1 : 0);
  }
}
"""


@pytest.fixture(scope="module")
def rule_program(tmp_path_factory) -> Path:
    gxx = shutil.which("g++")
    if gxx is None:
        pytest.skip("needs g++")
    d = tmp_path_factory.mktemp("warm_up")
    (d / "main.cpp").write_text(PROGRAM)
    exe = d / "warm_up_rule"
    subprocess.run([gxx, "-std=c++17", "-O1", f"-I{ROOT / 'csrc'}", str(d / "main.cpp"), "-o", str(exe)],
                   check=True, capture_output=True, timeout=120)
    return exe


def run_rule(exe: Path, cases: list[list[float]]) -> list[tuple[int, float, bool]]:
    out = subprocess.run([str(exe)], input="".join(" ".join(map(str, c)) + "\n" for c in cases),
                         capture_output=True, text=True, timeout=30, check=True).stdout.split("\n")
    return [(int(a), float(b), c == "1") for a, b, c in (ln.split() for ln in out if ln)]


def test_a_steady_clock_stops_at_the_minimum(rule_program: Path) -> None:
    # A GPU already at the cap (a training step's next shape): every block alike.
    [(blocks, spent, settled)] = run_rule(rule_program, [[25.0] * 100])
    assert settled and blocks == 12 and spent == pytest.approx(300.0)


def test_the_fall_to_the_cap_is_waited_out(rule_program: Path) -> None:
    # The clock falls over the first blocks (calls slow down), overshoots, then settles: the
    # warm-up ends three steady blocks after the last change, not at the minimum.
    falling = [25.0, 25.1, 26.5, 28.0, 30.5, 31.0, 30.2, 29.8, 29.9, 30.3]  # 10 blocks, 286 ms
    steady = [30.0] * 40
    [(blocks, spent, settled)] = run_rule(rule_program, [falling + steady])
    assert settled
    assert blocks == len(falling) + 4  # the first steady block differs from 30.3 by 1%: three after it
    assert spent == pytest.approx(sum(falling) + 4 * 30.0, rel=1e-5)


def test_a_wandering_clock_stops_at_the_limit(rule_program: Path) -> None:
    wandering = [25.0 * (1.0 + 0.02 * (-1) ** i) for i in range(200)]  # +-2% every block
    [(blocks, spent, settled)] = run_rule(rule_program, [wandering])
    assert not settled and 1500.0 <= spent < 1500.0 + 26.0 and blocks == 60


def test_an_outlier_restarts_the_count(rule_program: Path) -> None:
    # Steady from the start, but a 2% outlier at block 11 (a neighbour's kernel): three steady
    # blocks after the one following the outlier, so 3 blocks past the minimum's 12.
    case = [25.0] * 10 + [25.5] + [25.0] * 40
    [(blocks, _, settled)] = run_rule(rule_program, [case])
    assert settled and blocks == 15
