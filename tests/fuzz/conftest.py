"""The fuzz tests' device and seed: CUDA when present (the full campaign), else the CPU (a few
small cases: the harness and the host paths). The seed and case count are printed in pytest's
header so a failing case can be replayed (MKERNEL_FUZZ_SEED, MKERNEL_FUZZ_CASES; problems.py)."""

from __future__ import annotations

import pytest
import torch

from .problems import fuzz_seed

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
SEED = fuzz_seed()  # drawn once per session: collection and the header agree


def poison() -> None:
    """Fill the caching allocator's free memory (256 MiB of it) with NaN bit patterns, so an
    output element a kernel never writes shows up (on CUDA; nothing to do on the CPU)."""
    if DEVICE == "cuda":
        x = torch.empty(256 << 20, dtype=torch.uint8, device="cuda")
        x.fill_(0xFF)  # NaN in bf16 / fp16 / fp32
        del x


def pytest_report_header(config):  # noqa: ARG001
    return f"mkernel fuzz: MKERNEL_FUZZ_SEED={SEED} on {DEVICE}"


@pytest.fixture(autouse=True)
def _private_plan_cache(tmp_path_factory, monkeypatch):
    """The GEMM autotuner's plan file in a directory of the session's own (no plans from an
    earlier run turn a tuning into a cache hit, and no test writes the user's cache)."""
    monkeypatch.setenv("MKERNEL_CACHE_DIR", str(tmp_path_factory.getbasetemp() / "mkernel-cache"))
