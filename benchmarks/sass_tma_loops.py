"""The TMA issue loop of every kernel in a `cuobjdump -sass` listing: its length and R2UR count.

Session 9 (ring10): the hooked attention kernels' producer ran 20-29% slower for two sessions because
ptxas, after a change in the load lane's tile loop, formed every TMA's operands with R2UR inside each
TMA's issue (elect) loop — 256 R2UR per K/V block instead of 5, the block loop 464 -> 628
instructions — while every CPU-side check (ptxas's register/spill report, the consumer mainloop's
SASS) looked the same. This reports, per kernel, the shortest loop (a backward branch) that issues at
least --min-tma UTMALDG and runs no HGMMA (the producer's K/V block loop) and fails when its R2UR
count exceeds --max-r2ur. No GPU needed:

    nvcc ... -cubin x.cu -o x.cubin && cuobjdump -sass x.cubin > x.sass
    python benchmarks/sass_tma_loops.py x.sass [--max-r2ur 32]
"""

from __future__ import annotations

import argparse
import re
import sys
from dataclasses import dataclass

_FUNC = re.compile(r"Function : (\S+)")
_INS = re.compile(r"^\s*/\*([0-9a-f]{4,})\*/\s+(.*?)\s*;")
_TARGET = re.compile(r"0x([0-9a-f]+)")


@dataclass
class Loop:
    """A loop of a kernel: [first, last] instruction indices, its length and opcode counts."""
    first: int
    last: int
    tma: int
    r2ur: int

    @property
    def length(self) -> int:
        return self.last - self.first + 1


def opcode(ins: str) -> str:
    """The opcode of one SASS instruction (its predicate, if any, dropped)."""
    parts = ins.split()
    return parts[1] if parts[0].startswith("@") and len(parts) > 1 else parts[0]


def parse(text: str) -> dict[str, list[tuple[int, str]]]:
    """Kernel name -> [(address, instruction)] in listing order."""
    kernels: dict[str, list[tuple[int, str]]] = {}
    current = None
    for line in text.splitlines():
        m = _FUNC.search(line)
        if m:
            current = m.group(1)
            kernels[current] = []
            continue
        m = _INS.match(line)
        if m and current is not None:
            kernels[current].append((int(m.group(1), 16), m.group(2)))
    return kernels


def issue_loop(ins: list[tuple[int, str]], min_tma: int) -> Loop | None:
    """The shortest backward-branch loop with >= min_tma UTMALDG and no HGMMA, or None."""
    index = {addr: i for i, (addr, _) in enumerate(ins)}
    best = None
    for last, (addr, text) in enumerate(ins):
        if not opcode(text).startswith("BRA"):
            continue
        m = _TARGET.search(text)
        if m is None or int(m.group(1), 16) > addr or int(m.group(1), 16) not in index:
            continue
        first = index[int(m.group(1), 16)]
        ops = [opcode(t) for _, t in ins[first:last + 1]]
        tma = sum(o.startswith("UTMALDG") for o in ops)
        if tma < min_tma or any(o.startswith("HGMMA") for o in ops):
            continue
        loop = Loop(first, last, tma, sum(o == "R2UR" for o in ops))
        if best is None or loop.length < best.length:
            best = loop
    return best


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("sass", help="cuobjdump -sass output")
    ap.add_argument("--min-tma", type=int, default=8, help="UTMALDG in a K/V block loop (default 8)")
    ap.add_argument("--max-r2ur", type=int, default=32, help="fail above this many R2UR in the loop")
    args = ap.parse_args(argv)
    with open(args.sass) as f:
        kernels = parse(f.read())
    bad = 0
    for name, ins in kernels.items():
        loop = issue_loop(ins, args.min_tma)
        if loop is None:
            continue
        flag = "TOO MANY R2UR" if loop.r2ur > args.max_r2ur else "ok"
        bad += loop.r2ur > args.max_r2ur
        print(f"{flag:13s} loop {loop.length:4d} instructions, {loop.tma:2d} UTMALDG, "
              f"{loop.r2ur:3d} R2UR  {name}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
