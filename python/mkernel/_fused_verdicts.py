"""Reads the fused ops' choose_path lines on stderr (csrc/fused_common.cpp, MKERNEL_FUSED_VERBOSE=1)
for tests and benchmarks: which path the group's measurement kept per shape key, and what a CUDA
graph capture ran. Pure Python (no torch, no extension): tests/core/test_fused_verdicts.py checks
it on sample lines.

The lines (op = "mkernel.ag_gemm", ...; key = "M=.. N=.. K=.. <dtype> W=..[ peertma=<setting>]"):
  "<op>: runs fused <config>[ peer-TMA] order <s>/<r> grid <g>[ (the share)] at <key> (<figures>)"
  "<op>: runs unfused (the substrate's collective + the engine GEMM): measured not faster than
   the unfused path (by the 3% margin) at <key> (<figures>)"   (a TORCH_WARN: a log prefix first)
  "<op>: graph capture at <key>: the cached verdict, path <i> (<name>)"
  "<op>: graph capture at <key>: no verdict cached (unmeasured), path 0 (<name>)"
"""

from __future__ import annotations

import re

# The key: shape_key's part, then the op's own (ag_gemm " peertma=<setting>", gemm_ar " rs+ag",
# ...), up to the line's next " (" (verdicts) or ": " (captures).
_KEY = r"(M=\d+ N=\d+ K=\d+ \S+ W=\d+.*?)"


def parse_verdicts(text: str, op: str = "mkernel.ag_gemm") -> dict[str, str]:
    """{key: route} of every verdict line of `op` in `text`: route "unfused" or "fused <plan>"
    (e.g. "fused coop_128x256_c2x1 peer-TMA order 0/0 grid 48"). A key seen twice keeps the last
    (each process measures a key once; a second line would be another process's)."""
    out: dict[str, str] = {}
    fused = re.compile(re.escape(op) + r": runs fused (.+?) at " + _KEY + r"(?= \()")
    unfused = re.compile(re.escape(op) + r": runs unfused .*? at " + _KEY + r"(?= \()")
    for line in text.splitlines():
        m = fused.search(line)
        if m:
            out[m.group(2)] = "fused " + m.group(1)
            continue
        m = unfused.search(line)
        if m:
            out[m.group(1)] = "unfused"
    return out


def parse_captures(text: str, op: str = "mkernel.ag_gemm") -> list[dict]:
    """Every graph-capture line of `op`: {key, cached (the group's verdict ran), path, name}."""
    pat = re.compile(re.escape(op) + r": graph capture at " + _KEY +
                     r": (the cached verdict|no verdict cached \(unmeasured\)), "
                     r"path (\d+) \((.*)\)")
    out = []
    for line in text.splitlines():
        m = pat.search(line)
        if m:
            out.append({"key": m.group(1), "cached": m.group(2) == "the cached verdict",
                        "path": int(m.group(3)), "name": m.group(4)})
    return out


def route_is_peer(route: str) -> bool:
    """Whether a route ("fused <plan>" from parse_verdicts, a capture's name, or bench_fused's
    row "path") runs ag_gemm's peer-TMA kernel."""
    return "peer-TMA" in route
