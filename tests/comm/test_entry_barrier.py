"""The entry barrier's signature slots on the host (fused14): entry_barrier_check.cpp models
kernels/comm/group_sync_impl.cuh's publish / check steps over FlagSlot::signature_slot (the
header the kernels use) under random schedules of W ranks x several CTAs per kernel. Same ops on
every rank must never trap (s12run1: a CTA of ag_gemm's kernel placed late read a peer's next
call's signature and trapped "called different ops"); a real mismatch must trap every rank at
that call; the retired single slot must show the false trap (the model reaches the case).
Skipped without g++."""

from __future__ import annotations

from pathlib import Path

from tests.host_check import build_check, run_check


def test_signature_slots_have_no_false_mismatch(tmp_path: Path) -> None:
    exe = build_check(Path(__file__).parent / "entry_barrier_check.cpp", tmp_path, flags=("-O2",))
    run_check(exe)
