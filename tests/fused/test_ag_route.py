"""ag_gemm's copy / peer-TMA route (fused16) on the host: tests/fused/ag_route_check.cpp checks
csrc/fused_ag_route.h — MKERNEL_FUSED_AG_PEER_TMA's parsing (unset / "" -> auto, 0, 1, auto,
anything else refused), where the peer kernel fits, the candidate list choose_path measures per
setting (auto: the copy kernel on every plan first, then the peer kernel; 0: copy only; 1: the
peer kernel where it fits) and the verdict key's part (distinct per setting and fit) — and the
Python mirror of the default matches the header. Skipped without g++ (the mirror check is not)."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

from tests.host_check import build_check, run_check

ROOT = Path(__file__).resolve().parents[2]


def test_route_header_on_the_host(tmp_path: Path) -> None:
    exe = build_check(Path(__file__).parent / "ag_route_check.cpp", tmp_path,
                      flags=("-O1", "-Wall", "-Wextra", "-Werror"))
    run_check(exe, timeout=60)


def test_python_mirror_of_the_default() -> None:
    spec = importlib.util.spec_from_file_location(
        "fused_defaults_route", ROOT / "python" / "mkernel" / "_fused_defaults.py")
    fd = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(fd)
    src = (ROOT / "csrc" / "fused_ag_route.h").read_text()
    found = re.findall(r"constexpr PeerTma kPeerTmaDefault = PeerTma::k(\w+);", src)
    names = {"Off": "0", "On": "1", "Auto": "auto"}
    assert [names[f] for f in found] == [fd.AG_PEER_TMA_DEFAULT], found
    assert fd.AG_PEER_TMA_DEFAULT == "auto"  # fused16 (benchmarks/NOTES.md "fused16" rule)
    found = re.findall(r"constexpr CopyEngine kCopyEngineDefault = CopyEngine::k(\w+);", src)
    assert [names[f] for f in found] == [fd.AG_COPY_ENGINE_DEFAULT], found
    # ag_gemm.cpp reads it from the header (no second constant left behind).
    ag = (ROOT / "csrc" / "ag_gemm.cpp").read_text()
    assert "kAgPeerTmaByDefault" not in ag and "ag_route::kPeerTmaDefault" in ag
