"""benchmarks/sass_tma_loops.py on synthetic SASS listings: the K/V block loop is the shortest
backward-branch loop issuing enough UTMALDG without HGMMA, its R2UR are counted, and a loop with
more R2UR than the limit fails the check (session 9: the hooked kernels' 256 R2UR per block)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def load_tool():
    spec = importlib.util.spec_from_file_location("sass_tma_loops", ROOT / "benchmarks" / "sass_tma_loops.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # its dataclass looks its module up
    spec.loader.exec_module(mod)
    return mod


def listing(name: str, body: list[str]) -> str:
    """A cuobjdump-like function listing, one instruction per 16 bytes from address 0."""
    lines = [f"\t\tFunction : {name}"]
    for i, ins in enumerate(body):
        lines.append(f"        /*{i * 16:04x}*/                   {ins} ;   /* 0x0 */")
    return "\n".join(lines)


def kernel(tma: int, r2ur_per_tma: int, hgmma_in_loop: bool = False) -> list[str]:
    """A prologue, a loop of `tma` TMA issues (each with r2ur_per_tma R2UR) branching back to
    its start, an epilogue."""
    body = ["MOV R1, c[0x0][0x28]", "S2R R0, SR_TID.X"]
    start = len(body)
    for _ in range(tma):
        body += ["@P0 ELECT P2, URZ, PT"] + ["@P2 R2UR UR8, R2"] * r2ur_per_tma
        body += ["UTMALDG.4D [UR8], [UR14], desc[UR16]"]
    if hgmma_in_loop:
        body += ["HGMMA.64x128x16.F32.BF16 R24, gdesc[UR4], R24"]
    body += ["ISETP.GT.AND P2, PT, R8, 0x1, PT", f"@P2 BRA {hex(start * 16)}", "EXIT"]
    return body


def test_counts_the_block_loop_and_flags_r2ur(tmp_path, capsys):
    tool = load_tool()
    text = "\n".join([listing("good", kernel(34, 0)), listing("bad", kernel(34, 8)),
                      listing("consumer", kernel(34, 8, hgmma_in_loop=True)),
                      listing("few", kernel(2, 8))])
    kernels = tool.parse(text)
    assert set(kernels) == {"good", "bad", "consumer", "few"}
    good = tool.issue_loop(kernels["good"], 8)
    bad = tool.issue_loop(kernels["bad"], 8)
    assert (good.tma, good.r2ur) == (34, 0) and (bad.tma, bad.r2ur) == (34, 272)
    assert bad.length == good.length + 272
    assert tool.issue_loop(kernels["consumer"], 8) is None  # HGMMA: not a producer loop
    assert tool.issue_loop(kernels["few"], 8) is None  # fewer TMAs than a K/V block
    path = tmp_path / "x.sass"
    path.write_text(text)
    assert tool.main([str(path)]) == 1
    out = capsys.readouterr().out
    assert "TOO MANY R2UR" in out and "bad" in out
    path.write_text(listing("good", kernel(34, 0)))
    assert tool.main([str(path)]) == 0


def test_shortest_loop_wins():
    """An outer (tile) loop around the block loop is longer and not the one reported."""
    tool = load_tool()
    body = ["MOV R1, c[0x0][0x28]"]
    outer = len(body)
    body += ["S2R R0, SR_TID.X"]
    inner = len(body)
    for _ in range(10):
        body += ["@P0 ELECT P2, URZ, PT", "UTMALDG.4D [UR8], [UR14], desc[UR16]"]
    body += [f"@P2 BRA {hex(inner * 16)}", "R2UR UR4, R3", f"@P3 BRA {hex(outer * 16)}", "EXIT"]
    loop = tool.issue_loop(tool.parse(listing("k", body))["k"], 8)
    assert (loop.first, loop.r2ur, loop.length) == (inner, 0, 21)
