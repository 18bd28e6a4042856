"""python/mkernel/_fused_verdicts.py reads choose_path's stderr lines (csrc/fused_common.cpp,
MKERNEL_FUSED_VERBOSE=1) for the GPU tests and bench_fused (fused16: which of ag_gemm's copy /
peer-TMA / unfused paths the group kept, and what a graph capture ran). Lines as the library
prints them, a TORCH_WARN prefix on the fallback's; no extension or GPU needed."""

from __future__ import annotations

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("fused_verdicts_under_test",
                                               ROOT / "python" / "mkernel" / "_fused_verdicts.py")
fv = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(fv)

SQUARE = "M=8192 N=1024 K=16384 BFloat16 W=2 peertma=auto"
FC1 = "M=8192 N=14336 K=8192 BFloat16 W=2 peertma=auto"
SMALL = "M=256 N=512 K=256 BFloat16 W=4 peertma=auto"
GATHERED = "M=256 N=512 K=256 BFloat16 W=4 peertma=auto/copy-only"

TEXT = f"""\
mkernel.ag_gemm: measured {SQUARE} in 0.512 s (2 calls per sample): coop_128x256_c2x1 grid 0 2750.0 us (own 2740.1); coop_128x256_c2x1 grid 48 gated 2800.0 us (own 2790.0); coop_128x256_c2x1 peer-TMA grid 0 2040.0 us (own 2030.0); coop_128x256_c2x1 peer-TMA grid 48 gated 2100.0 us (own 2090.0); unfused 3500.0 us (own 3490.0); -> fused path 2
mkernel.ag_gemm: runs fused coop_128x256_c2x1 peer-TMA order 0/0 grid 0 (the share) at {SQUARE} (2040.0 us vs unfused 3500.0 us, slowest rank)
mkernel.ag_gemm: peer-TMA kernel launched (config coop_128x256_c2x1)
mkernel.ag_gemm: runs fused coop_128x256_c2x1 order 0/0 grid 48 at {FC1} (6240.0 us vs unfused 9000.0 us, slowest rank, launch gate)
[W1203 07:41:02.123456789 fused_common.cpp:990] Warning: mkernel.ag_gemm: runs unfused (the substrate's collective + the engine GEMM): measured not faster than the unfused path (by the 3% margin) at {SMALL} (fused 60.000000 us vs 58.000000 us, slowest rank) (function note_fallback)
mkernel.gemm_rs: runs fused coop_128x256_c2x1 order 0/0 grid 48 at M=16384 N=8192 K=7168 BFloat16 W=4 (1.0 us vs unfused 2.0 us, slowest rank)
mkernel.ag_gemm: graph capture at {SQUARE}: the cached verdict, path 2 (coop_128x256_c2x1 grid 0 peer-TMA)
mkernel.ag_gemm: graph capture at {GATHERED}: no verdict cached (unmeasured), path 0 (coop_128x256_c2x1 grid 0 copy)
"""


def test_verdicts_by_key() -> None:
    v = fv.parse_verdicts(TEXT)
    assert v == {SQUARE: "fused coop_128x256_c2x1 peer-TMA order 0/0 grid 0 (the share)",
                 FC1: "fused coop_128x256_c2x1 order 0/0 grid 48",
                 SMALL: "unfused"}
    assert fv.route_is_peer(v[SQUARE]) and not fv.route_is_peer(v[FC1])
    assert not fv.route_is_peer(v[SMALL])
    # another op's lines are its own
    assert list(fv.parse_verdicts(TEXT, "mkernel.gemm_rs")) == ["M=16384 N=8192 K=7168 BFloat16 W=4"]


def test_captures() -> None:
    c = fv.parse_captures(TEXT)
    assert c == [{"key": SQUARE, "cached": True, "path": 2,
                  "name": "coop_128x256_c2x1 grid 0 peer-TMA"},
                 {"key": GATHERED, "cached": False, "path": 0,
                  "name": "coop_128x256_c2x1 grid 0 copy"}]
    assert fv.route_is_peer(c[0]["name"]) and not fv.route_is_peer(c[1]["name"])


def test_nothing_to_read() -> None:
    assert fv.parse_verdicts("") == {} and fv.parse_captures("no such line\n") == []


def test_fused17_lines() -> None:
    """The fallback and fused lines as fused17 writes them (csrc/fused_common.cpp: "with
    confidence", the test's figures; "slowest rank per round")."""
    text = (
        "[W1203 10:01:02.123456789 fused_common.cpp:955] Warning: mkernel.ag_gemm: runs unfused "
        "(the substrate's collective + the engine GEMM): measured not faster than the unfused "
        f"path with confidence at {FC1} (fused 13776.6 us vs unfused 14272.0 us, slowest rank "
        "per round; fused/unfused per round: median 0.981, 3 of 5 test rounds below 0.99 (5 "
        "needed of 5 planned; 6 rounds, the test from round 2); route vs path 3: median 0.990, "
        "faster in 3 of 4) (function note_fallback)\n"
        f"mkernel.ag_gemm: runs fused coop_128x256_c2x1 peer-TMA order 0/0 grid 48 at {SQUARE} "
        "(1996.4 us vs unfused 3359.9 us, slowest rank per round, launch gate)\n")
    assert fv.parse_verdicts(text) == {
        FC1: "unfused", SQUARE: "fused coop_128x256_c2x1 peer-TMA order 0/0 grid 48"}


def test_bucket_reuse_lines() -> None:
    """A shape that reuses its M bucket's verdict (session 54, csrc/fused_common.cpp choose_path)
    reads as that shape's verdict, fused or unfused, not as the measured shape's."""
    k0 = "M=4096 N=14336 K=8192 BFloat16 W=2 peertma=auto"
    k1 = "M=3000 N=14336 K=8192 BFloat16 W=2 peertma=auto"
    r0 = "M=8192 N=8192 K=7168 BFloat16 W=2 one-shot"
    r1 = "M=6000 N=8192 K=7168 BFloat16 W=2 one-shot"
    text = (f"mkernel.ag_gemm: runs fused coop_128x256_c2x1 grid 48 peer-TMA at {k1} (its M bucket's "
            f"verdict, measured at {k0})\n"
            f"mkernel.gemm_ar: runs unfused (its M bucket's verdict) at {r1} (measured at {r0})\n")
    v = fv.parse_verdicts(text)
    assert v == {k1: "fused coop_128x256_c2x1 grid 48 peer-TMA"} and fv.route_is_peer(v[k1])
    assert fv.parse_verdicts(text, "mkernel.gemm_ar") == {r1: "unfused"}
