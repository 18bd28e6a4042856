"""The entry barrier's signature slots on the host (fused14): entry_barrier_check.cpp models
kernels/comm/group_sync_impl.cuh's publish / check steps over FlagSlot::signature_slot (the
header the kernels use) under random schedules of W ranks x several CTAs per kernel. Same ops on
every rank must never trap (s12run1: a CTA of ag_gemm's kernel placed late read a peer's next
call's signature and trapped "called different ops"); a real mismatch must trap every rank at
that call; the retired single slot must show the false trap (the model reaches the case).
Skipped without g++."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def test_signature_slots_have_no_false_mismatch(tmp_path: Path) -> None:
    gxx = shutil.which("g++")
    if gxx is None:
        pytest.skip("needs g++")
    exe = tmp_path / "entry_barrier_check"
    subprocess.run([gxx, "-std=c++17", "-O2", f"-I{ROOT / 'csrc'}",
                    str(Path(__file__).parent / "entry_barrier_check.cpp"), "-o", str(exe)],
                   check=True, capture_output=True, timeout=300)
    run = subprocess.run([str(exe)], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0 and run.stdout.strip() == "OK", run.stdout[-3000:] + run.stderr
