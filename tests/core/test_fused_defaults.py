"""python/mkernel/_fused_defaults.py mirrors csrc/fused_common.cpp's compiled-in co-resident grid
rule (the benchmarks and rank tests pin grids by it before any call): the constant must match
the C++ one, and the rule gives the measured grids (no extension or GPU needed)."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# By path: importing the mkernel package needs the built extension; this module needs nothing.
_spec = importlib.util.spec_from_file_location("fused_defaults_under_test",
                                               ROOT / "python" / "mkernel" / "_fused_defaults.py")
fd = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(fd)


def test_co_grid_constant_matches_the_library() -> None:
    src = (ROOT / "csrc" / "fused_common.cpp").read_text()
    found = re.findall(r"constexpr int kCoGridAtShare32 = (\d+);", src)
    assert found == [str(fd.CO_GRID_AT_SHARE_32)], found


def test_co_resident_grid_rule() -> None:
    assert fd.co_resident_grid(66) == 48  # W = 2 on an H200 (s8run2: 96 of 132 SMs whole)
    assert fd.co_resident_grid(32) == (fd.CO_GRID_AT_SHARE_32 or 24)  # W = 4
    assert fd.co_resident_grid(16) == 12  # W = 8: the 3/4 rule
    assert fd.co_resident_grid(2) == 0  # no smaller whole-cluster grid


def test_co_resident_grid_c1_rule() -> None:
    """fused18: the cluster-free config's co-resident grid (126 of 132 SMs for two clients)."""
    src = (ROOT / "csrc" / "fused_common.cpp").read_text()
    assert "const int g = grid * 126 / 132;" in src  # the C++ rule this mirrors
    assert fd.co_resident_grid_c1(66) == 63  # W = 2: 126 of 132 (s8run2's 1-CTA probe)
    assert fd.co_resident_grid_c1(32) == 30  # W = 4: 120 of 128 (never probed: the safe side)
    assert fd.co_resident_grid_c1(16) == 15  # W = 8
    assert fd.co_resident_grid_c1(1) == 0
