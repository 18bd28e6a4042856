"""Reads the fused ops' choose_path lines on stderr (csrc/fused_common.cpp, MKERNEL_FUSED_VERBOSE=1)
for tests and benchmarks: which path the group's measurement kept per shape key, and what a CUDA
graph capture ran. Pure Python (no torch, no extension): tests/core/test_fused_verdicts.py checks
it on sample lines.

The lines (op = "mkernel.ag_gemm", ...; key = "M=.. N=.. K=.. <dtype> W=..[ peertma=<setting>[ ce=<setting>]]"):
  "<op>: runs fused <config>[ peer-TMA| copy-engine] order <s>/<r> grid <g>[ (the share)] at <key> (<figures>)"
  "<op>: runs unfused (the substrate's collective + the engine GEMM): measured not faster than
   the unfused path with confidence at <key> (<figures>; <the test's figures>)"
   (a TORCH_WARN: a log prefix first; before fused17 "... (by the 3% margin) at <key> ...")
  "<op>: measured <key> in <s> s (warm-up <w> s, <c> calls per sample, <r> rounds): <path
   figures>; <the test's figures> -> fused path <i>|unfused"   (fused17: parse_tests)
  "<op>: runs fused <plan name> at <key> (its M bucket's verdict, measured at <key0>)"
  "<op>: runs unfused (its M bucket's verdict) at <key> (measured at <key0>)"
   (session 54: a shape reusing the verdict another M of its bucket measured)
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


def parse_tests(text: str, op: str = "mkernel.ag_gemm") -> dict[str, dict]:
    """{key: the first-call measurement's test} from `op`'s "measured" lines (fused17,
    csrc/fused_verdict.h describe): seconds (warm-up included), warmup_s (the paths' first calls:
    mostly the engine tuner's for the unfused GEMM), calls per sample, rounds; the kept fused route
    against the unfused path (median of the per-round ratios, wins below 1 - margin, test rounds,
    wins needed, rounds planned, the first round the test counts); the route against the other
    finalist when there were two (route_other, route_median, route_faster, route_n); the verdict
    ("unfused" or "fused path <i>"); screened: every fused candidate dropped before the test. A key
    seen twice keeps the last."""
    head = re.compile(re.escape(op) + r": measured " + _KEY +
                      r" in ([\d.]+) s \(warm-up ([\d.]+) s, (\d+) calls per sample, (\d+) "
                      r"rounds\):")
    test = re.compile(r"fused/unfused per round: median (-?nan|[\d.]+), (\d+) of (\d+) test rounds "
                      r"below ([\d.]+) \((\d+) needed of (\d+) planned; \d+ rounds, the test from "
                      r"round (\d+)\)")
    route = re.compile(r"route vs path (\d+): median (-?nan|[\d.]+), faster in (\d+) of (\d+)")
    verdict = re.compile(r"-> (unfused|fused path \d+)\s*$")
    out: dict[str, dict] = {}
    for line in text.splitlines():
        m = head.search(line)
        if not m:
            continue
        d: dict = {"seconds": float(m.group(2)), "warmup_s": float(m.group(3)),
                   "calls": int(m.group(4)), "rounds": int(m.group(5))}
        t = test.search(line)
        if t:
            d.update(median=float(t.group(1)), wins=int(t.group(2)), n=int(t.group(3)),
                     below=float(t.group(4)), needed=int(t.group(5)), planned=int(t.group(6)),
                     test_from=int(t.group(7)), screened=False)
        else:
            d["screened"] = "dropped by the screen" in line
        r = route.search(line)
        if r:
            d.update(route_other=int(r.group(1)), route_median=float(r.group(2)),
                     route_faster=int(r.group(3)), route_n=int(r.group(4)))
        v = verdict.search(line)
        d["verdict"] = v.group(1) if v else None
        out[m.group(1)] = d
    return out


def route_is_peer(route: str) -> bool:
    """Whether a route ("fused <plan>" from parse_verdicts, a capture's name, or bench_fused's
    row "path") runs ag_gemm's peer-TMA kernel."""
    return "peer-TMA" in route
