"""Settings for every test process and the rank processes they start.

The fused ops keep their first-call verdicts in a cache file across processes
(csrc/fused_verdict_store.h, on by default for users). Tests assert on the measurement itself
(its "measured" lines, its per-shape verdicts), so a verdict stored by an earlier test must not
stand in for it: every test runs with MKERNEL_FUSED_VERDICT_CACHE=0 unless it sets the variable
itself (tests/gpu/test_fused_ops.py::test_verdict_cache_across_processes,
tests/fused/test_verdict_store.py)."""

from __future__ import annotations

import os

os.environ.setdefault("MKERNEL_FUSED_VERDICT_CACHE", "0")
