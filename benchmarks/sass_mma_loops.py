"""The consumer block loops of every attention kernel in a `cuobjdump -sass` listing: length and mix.

Branch ring11 (session 9): the hooked zigzag causal kernel's consumer loop per K/V block was 868
instructions against 721 for the plain causal kernel and ~620 non-causal (ring10's count): every block
ran the mask test and the zigzag chunk walk. This lists, per kernel, its block loops (backward branches
whose span issues HGMMA, shortest first, each kept unless it overlaps a kept one) with the span's length
and opcode mix — HGMMA (the two GEMMs), MUFU.EX2 (the softmax), FSEL (mostly masked scores set to -inf),
IMAD.HI (FastDivmod on the vector pipe; uniform ones are UIMAD), BRA — and the fewest instructions one trip
can issue through the kernel's control flow (out-of-line code included): for a loop that branches over
its mask code, a wholly visible block's path. --not-taken holds chosen conditional branches not taken
(e.g. the zigzag kernels' `zz_world > 0` tests, whose taken side skips the zigzag code). No GPU needed:

    nvcc ... -cubin x.cu -o x.cubin && cuobjdump -sass x.cubin > x.sass
    python benchmarks/sass_mma_loops.py x.sass [--filter KvFlagHooks] [--not-taken 0x64a0,0x8ca0]

The span is the address range [branch target, branch]: code ptxas placed out of line is not in it, and
code a block skips is; the fewest-per-trip path is the closer figure for a block's cost.
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


def _predicated(text: str) -> bool:
    """Whether an instruction runs under a predicate (@P0, @!P1; @PT is always true)."""
    first = text.split()[0]
    return first.startswith("@") and first not in ("@PT",)


def shortest_iteration(ins: list[tuple[int, str]], loop: MmaLoop,
                       not_taken: frozenset[int] = frozenset()) -> tuple[int, dict[str, int]] | None:
    """The fewest instructions one trip around the loop can issue (a path from its first
    instruction to its back branch through the kernel's control flow, out-of-line code
    included), and that path's opcode counts: the per-block cost of the loop's cheapest block
    (for a loop with a mask branch, the path that skips the mask code). Conditional branches
    at the addresses in not_taken fall through (a runtime condition held fixed, e.g. the zigzag
    mode's `zz_world > 0` test, whose taken side skips the zigzag code). None if no path."""
    import heapq
    index = {addr: i for i, (addr, _) in enumerate(ins)}

    def succ(i: int) -> list[int]:
        text = ins[i][1]
        op = opcode(text)
        out = []
        if op.startswith("BRA"):
            tgt = _target(text)
            if ins[i][0] in not_taken and _predicated(text):
                tgt = None
            if tgt is not None and tgt in index:
                out.append(index[tgt])
            if not _predicated(text):
                return out
        elif op.startswith(("EXIT", "RET")) and not _predicated(text):
            return out
        if i + 1 < len(ins):
            out.append(i + 1)
        return out

    dist = {loop.first: 1}
    prev: dict[int, int] = {}
    heap = [(1, loop.first)]
    while heap:
        d, i = heapq.heappop(heap)
        if d > dist.get(i, 1 << 30):
            continue
        if i == loop.last:
            break
        for j in succ(i):
            if j == loop.first:
                continue
            if d + 1 < dist.get(j, 1 << 30):
                dist[j] = d + 1
                prev[j] = i
                heapq.heappush(heap, (d + 1, j))
    if loop.last not in dist:
        return None
    path = [loop.last]
    while path[-1] != loop.first:
        path.append(prev[path[-1]])
    ops = [opcode(ins[i][1]) for i in path]
    return len(path), {c: sum(o.startswith(c) for o in ops) for c in _COUNTED}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("sass", help="cuobjdump -sass output")
    ap.add_argument("--filter", default="", help="only kernels whose mangled name contains this")
    ap.add_argument("--not-taken", default="",
                    help="comma-separated hex addresses of conditional branches to treat as not "
                         "taken in the fewest-per-trip path (use with --filter: one kernel)")
    args = ap.parse_args(argv)
    with open(args.sass) as f:
        kernels = parse(f.read())
    not_taken = frozenset(int(a, 16) for a in args.not_taken.split(",") if a)
    for name, ins in kernels.items():
        if args.filter not in name:
            continue
        print(name[:160])
        for loop in mma_loops(ins):
            mix = " ".join(f"{k} {v}" for k, v in loop.counts.items())
            print(f"  loop {loop.length:4d} instructions at [{loop.first}, {loop.last}]: {mix}")
            best = shortest_iteration(ins, loop, not_taken)
            if best is not None:
                n, counts = best
                mix = " ".join(f"{k} {v}" for k, v in counts.items())
                print(f"       fewest per trip {n:4d} instructions: {mix}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
