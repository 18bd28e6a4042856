"""benchmarks/sass_mma_loops.py on synthetic SASS listings: the consumer block loops (backward
branches over HGMMA, disjoint, shortest first), their opcode mix, and the fewest instructions one
trip can issue — a branch over the mask code skipped, or (--not-taken) held not taken, and code
ptxas placed out of line (past the back branch) counted on the path that reaches it."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def load_tool():
    sys.path.insert(0, str(ROOT / "benchmarks"))  # it imports sass_tma_loops
    spec = importlib.util.spec_from_file_location("sass_mma_loops", ROOT / "benchmarks" / "sass_mma_loops.py")
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


def kernel(mask: int, out_of_line: int) -> list[str]:
    """A prologue; a block loop: 2 HGMMA, a branch over `mask` FSEL (the mask code), 4 MUFU.EX2,
    a branch to `out_of_line` instructions placed after the loop that jump back, the back branch;
    an epilogue (EXIT) and the out-of-line code."""
    body = ["MOV R1, c[0x0][0x28]", "S2R R0, SR_TID.X"]
    head = len(body)
    body += ["HGMMA.64x128x16.F32.BF16 R24, gdesc[UR4], R24", "HGMMA.64x128x16.F32.BF16 R24, gdesc[UR4], R24"]
    skip = len(body)
    body += ["@!P1 BRA 0xSKIP"] + ["FSEL R4, R4, -INF, P0"] * mask
    after_mask = len(body)
    body += ["MUFU.EX2 R5, R5"] * 4
    ool = len(body)
    body += ["@P3 BRA 0xOOL"]
    back_from_ool = len(body)
    body += ["ISETP.GT.AND P2, PT, R8, 0x1, PT", f"@P2 BRA {hex(head * 16)}", "EXIT"]
    ool_start = len(body)
    body += ["IMAD.HI.U32 R9, R9, R10, RZ"] * out_of_line + [f"BRA {hex(back_from_ool * 16)}"]
    body[skip] = f"@!P1 BRA {hex(after_mask * 16)}"
    body[ool] = f"@P3 BRA {hex(ool_start * 16)}"
    return body


def test_loop_mix_and_fewest_trip(tmp_path, capsys):
    tool = load_tool()
    text = "\n".join([listing("masked", kernel(64, 5)), listing("plain", kernel(0, 0))])
    kernels = tool.parse(text)
    ins = kernels["masked"]
    (loop,) = tool.mma_loops(ins)
    # head .. back branch: 2 HGMMA + branch + 64 FSEL + 4 EX2 + branch + ISETP + back branch
    assert loop.length == 2 + 1 + 64 + 4 + 1 + 2
    assert loop.counts["HGMMA"] == 2 and loop.counts["FSEL"] == 64 and loop.counts["MUFU.EX2"] == 4
    n, counts = tool.shortest_iteration(ins, loop)
    assert n == loop.length - 64 and counts["FSEL"] == 0  # the mask branch taken
    skip_addr, ool_addr = ins[4][0], ins[4 + 1 + 64 + 4][0]
    n, counts = tool.shortest_iteration(ins, loop, frozenset([skip_addr]))
    assert n == loop.length and counts["FSEL"] == 64  # held not taken: through the mask code
    n, counts = tool.shortest_iteration(ins, loop, frozenset([ool_addr]))
    assert n == loop.length - 64  # held not taken: stays in line
    # The out-of-line branch, when it is the only way round, is counted with its code.
    body = kernel(0, 5)
    at = next(i for i, t in enumerate(body) if t.startswith("@P3 BRA"))
    body[at] = body[at].replace("@P3 BRA", "BRA")  # unconditional: every trip goes out of line
    ool_ins = tool.parse(listing("ool", body))["ool"]
    (loop2,) = tool.mma_loops(ool_ins)
    n, counts = tool.shortest_iteration(ool_ins, loop2)
    assert counts["IMAD.HI"] == 5 and n == loop2.length + 5 + 1  # + the code and its branch back
    path = tmp_path / "x.sass"
    path.write_text(text)
    assert tool.main([str(path)]) == 0
    out = capsys.readouterr().out
    assert "masked" in out and "fewest per trip" in out
