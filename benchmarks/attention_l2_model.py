"""An LRU model of the attention forward's K/V reads under its persistent schedule, on the CPU: how
much of the causal kernel's K/V traffic an L2 of a given size would serve, by S.

The schedule is tile_scheduler.hpp's linear order (L2 sections of (batch, head) pairs whose K + V
fit a 24 MiB budget, query blocks longest first within a section), claimed by 132 CTAs one tile
at a time as they finish; a tile of query block m walks KV blocks m, m - 1, ..., 0 (the diagonal
first, mainloop_fwd_sm90.hpp), one block per time unit. Every read of a 64 KiB K + V block
(128 keys, d = 128, bf16) gets its exact LRU stack distance (distinct blocks read since its last
read); a read hits an L2 of C blocks when that distance is below C. A model, not the hardware: equal
block times, a fully associative LRU L2, no Q / O traffic. Session 42 wrote it to test the L2
explanation of the causal forward's 0.96x cuDNN at S = 32768 (NOTES "Session 42").

    python benchmarks/attention_l2_model.py [S ...]   # default 8192 16384 32768; b = 16384 / S
"""

from __future__ import annotations

import heapq
import sys

import numpy as np

BLOCK = 128  # query rows and keys per block
BLOCK_BYTES = BLOCK * 128 * 2 * 2  # K + V of one KV block, d = 128, bf16
L2_BUDGET = 24 << 20  # tile_scheduler.hpp kL2SectionBytesWide (the causal kernels)
CTAS = 132
HEADS = 32
TOKENS = 16384


def reads(s: int, batch: int) -> np.ndarray:
    """The K/V block ids in the order the CTAs read them."""
    mb = s // BLOCK
    bh_total = HEADS * batch
    sec = max(1, min(bh_total, L2_BUDGET // (s * 128 * 2 * 2)))
    order = []
    for s0 in range(0, bh_total, sec):
        sb = min(sec, bh_total - s0)
        for r in range(mb * sb):
            m = r // sb
            order.append((s0 + r - m * sb, mb - 1 - m))
    events = []
    free = [(0, c) for c in range(CTAS)]
    for bh, m in order:
        t, c = heapq.heappop(free)
        events += [(t + i, bh * mb + n) for i, n in enumerate(range(m, -1, -1))]
        heapq.heappush(free, (t + m + 1, c))
    events.sort()
    return np.array([e[1] for e in events], dtype=np.int64)


def hit_rates(seq: np.ndarray, capacities: list[int]) -> dict[int, float]:
    """The fraction of reads whose LRU stack distance is below each capacity (in blocks)."""
    n = len(seq)
    tree = np.zeros(n + 1, dtype=np.int64)  # Fenwick tree: 1 at the latest read of each block

    def add(i: int, v: int) -> None:
        i += 1
        while i <= n:
            tree[i] += v
            i += i & -i

    def prefix(i: int) -> int:
        total, i = 0, i + 1
        while i > 0:
            total += int(tree[i])
            i -= i & -i
        return total

    last: dict[int, int] = {}
    dist = np.full(n, -1, dtype=np.int64)
    for t, key in enumerate(seq.tolist()):
        p = last.get(key)
        if p is not None:
            dist[t] = prefix(t - 1) - prefix(p)
            add(p, -1)
        add(t, 1)
        last[key] = t
    return {c: float(np.mean((dist >= 0) & (dist < c))) for c in capacities}


def main() -> None:
    seqs = [int(x) for x in sys.argv[1:]] or [8192, 16384, 32768]
    caps_mb = (4, 8, 16, 25, 50)
    print("S, b, reads, hit rate by L2 size (MB)")
    for s in seqs:
        seq = reads(s, max(1, TOKENS // s))
        rates = hit_rates(seq, [mb * (1 << 20) // BLOCK_BYTES for mb in caps_mb])
        print(s, max(1, TOKENS // s), len(seq),
              "  ".join(f"{mb} MB {r:.3f}" for mb, r in zip(caps_mb, rates.values())), flush=True)


if __name__ == "__main__":
    main()
