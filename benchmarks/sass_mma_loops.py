"""The consumer block loops of every attention kernel in a `cuobjdump -sass` listing: length and mix.

Branch ring11 (session 9): the hooked zigzag causal kernel's consumer loop per K/V block was 868
instructions against 721 for the plain causal kernel and ~620 non-causal (ring10's count): every block
ran the mask test and the zigzag chunk walk. This lists, per kernel, each innermost loop (a backward
branch whose span issues HGMMA and holds no shorter such loop) with its length and the instructions
that tell the loops apart: HGMMA (the two GEMMs), MUFU.EX2 (the softmax), FSEL (masked scores set to
-inf), IMAD.HI (FastDivmod: the zigzag chunk arithmetic), BRA (branches). No GPU needed:

    nvcc ... -cubin x.cu -o x.cubin && cuobjdump -sass x.cubin > x.sass
    python benchmarks/sass_mma_loops.py x.sass [--filter KvFlagHooks]

The span is the address range [branch target, branch]: code ptxas placed out of line (after the
branch) is not counted, so compare kernels built alike, not absolute costs.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass

from sass_tma_loops import opcode, parse

_TARGET_PREFIX = "0x"
_COUNTED = ("HGMMA", "MUFU.EX2", "FSEL", "IMAD.HI", "BRA")


@dataclass
class MmaLoop:
    """A block loop (issues HGMMA): [first, last] instruction indices and opcode counts."""
    first: int
    last: int
    counts: dict[str, int]

    @property
    def length(self) -> int:
        return self.last - self.first + 1


def _target(text: str) -> int | None:
    """The address a branch instruction jumps to, if it names one."""
    for tok in text.replace(",", " ").split():
        if tok.startswith(_TARGET_PREFIX):
            try:
                return int(tok, 16)
            except ValueError:
                return None
    return None


def mma_loops(ins: list[tuple[int, str]]) -> list[MmaLoop]:
    """The disjoint shortest backward-branch loops that issue HGMMA, in listing order."""
    index = {addr: i for i, (addr, _) in enumerate(ins)}
    spans = []
    for last, (addr, text) in enumerate(ins):
        if not opcode(text).startswith("BRA"):
            continue
        tgt = _target(text)
        if tgt is None or tgt > addr or tgt not in index:
            continue
        first = index[tgt]
        if any(opcode(t).startswith("HGMMA") for _, t in ins[first:last + 1]):
            spans.append((first, last))
    # Shortest first, each kept unless it overlaps a kept one: the block loops (the tile loop's
    # span overlaps them, ptxas may enter it inside a block loop's span).
    kept: list[tuple[int, int]] = []
    for first, last in sorted(set(spans), key=lambda s: s[1] - s[0]):
        if all(last < k[0] or first > k[1] for k in kept):
            kept.append((first, last))
    loops = []
    for first, last in sorted(kept):
        ops = [opcode(t) for _, t in ins[first:last + 1]]
        counts = {c: sum(o.startswith(c) for o in ops) for c in _COUNTED}
        loops.append(MmaLoop(first, last, counts))
    return loops


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("sass", help="cuobjdump -sass output")
    ap.add_argument("--filter", default="", help="only kernels whose mangled name contains this")
    args = ap.parse_args(argv)
    with open(args.sass) as f:
        kernels = parse(f.read())
    for name, ins in kernels.items():
        if args.filter not in name:
            continue
        print(name[:160])
        for loop in mma_loops(ins):
            mix = " ".join(f"{k} {v}" for k, v in loop.counts.items())
            print(f"  loop {loop.length:4d} instructions at [{loop.first}, {loop.last}]: {mix}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
