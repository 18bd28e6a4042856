"""Shared pieces of the host reference backend's multi-process tests."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

# The program of every rank: tests/host/rank_checks.py, suites chosen by TEST_SUITE.
RANK_MAIN = f"""
import sys
sys.path.insert(0, {str(ROOT)!r})
from tests.host.rank_checks import main
main()
"""


def check_ranks(results, ok: bool = True) -> list[dict]:
    """Asserts every rank exited 0 (and printed OK when `ok`); returns the CASE records."""
    cases = []
    # Every failed rank's tail, not only the first's (moe11: s13run2 showed rank 0's wait record
    # only; the peer it waited for had its own story).
    failed = [f"rank {r.rank}: rc={r.returncode}\n--- stdout\n{r.stdout[-3000:]}"
              f"\n--- stderr\n{r.stderr[-5000:]}" for r in results if r.returncode != 0]
    assert not failed, "\n=====\n".join(failed)
    for r in results:
        if ok:
            assert f"OK {r.rank}" in r.stdout, f"rank {r.rank}:\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}"
        cases += [json.loads(line[5:]) for line in r.stdout.splitlines() if line.startswith("CASE ")]
    return cases


def records(result, tag: str) -> list[dict]:
    """The JSON records a rank printed after `tag` (e.g. "ERR")."""
    n = len(tag) + 1
    return [json.loads(line[n:]) for line in result.stdout.splitlines() if line.startswith(tag + " ")]
