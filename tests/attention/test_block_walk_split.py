"""CPU mirror of the consumer's block walk (mainloop_fwd_sm90.hpp: n_block_range, prev_block,
apply_mask's test) and of variant bit 10's split (first_masked_block, run_start,
prev_visible_block), over plain causal/non-causal shapes (ragged, s != s_kv, 128/192-row tiles,
160-key blocks, the 2-CTA cluster) and the zigzag ring mode (W = 1..8, every rank, chunks of 1-8
blocks): the split walks the same blocks in the same order, and no block of its unmasked loop is
one apply_mask would mask. The GPU tests check the kernels themselves bit for bit
(test_attention_engine.py test_split_variant_is_the_unsplit_bit_for_bit); this pins the
invariant the C++ relies on, in its own terms, where a GPU is not at hand. Keep it in step with
the C++ when either changes."""

from __future__ import annotations

import itertools


def _walks(causal, zz, seq_q, seq_kv, bm, bn, world=0, rank=0, chunk=0, cluster=1):
    """(the unsplit walk, the split walk as (block, loop)) for every query tile."""
    zz = causal and zz and world > 0
    n_total = -(-seq_kv // bn)
    for m in range(-(-seq_q // bm)):
        n_min, n_max = 0, n_total
        if causal and not zz:
            m_last = m | (cluster - 1)
            last_key = (m_last + 1) * bm - 1 + seq_kv - seq_q
            n_max = min(0 if last_key < 0 else last_key // bn + 1, n_max)

        def q_chunk():
            half, m_in = divmod(m, chunk // bm)
            return (rank if half == 0 else 2 * world - 1 - rank), m_in, half

        def k_chunk(c):
            src = (rank + 1 + (c >> 1)) % world
            return src if c % 2 == 0 else 2 * world - 1 - src

        def prev_block(n):
            n -= 1
            if zz:
                gq, m_in, _ = q_chunk()
                diag = (m_in * bm + bm - 1) // bn
                while n >= n_min:
                    c, i = divmod(n, chunk // bn)
                    gk = k_chunk(c)
                    if gk < gq:
                        break
                    if gk == gq:
                        n -= max(0, i - diag)
                        break
                    n -= i + 1
            return n

        def needs_mask(n):
            col0, shift = n * bn, m * bm + seq_kv - seq_q
            need = col0 + bn > seq_kv
            if causal:
                if zz:
                    c, _ = divmod(n, chunk // bn)
                    gq, m_in, _ = q_chunk()
                    if k_chunk(c) != gq:
                        return False
                    shift = m_in * bm + c * chunk
                need = need or col0 + bn - 1 > shift
            return need

        def first_masked_block():
            lo = seq_kv // bn
            if causal:
                if zz:
                    _, m_in, half = q_chunk()
                    return (2 * (world - 1) + half) * (chunk // bn) + (m_in * bm + 1) // bn
                reach = m * bm + seq_kv - seq_q + 1
                lo = min(lo, reach // bn if reach > 0 else 0)
            return lo

        def run_start(n):
            return n - n % (chunk // bn) if zz else n_min

        unsplit, n = [], prev_block(n_max)
        while n >= n_min:
            unsplit.append(n)
            n = prev_block(n)
        split, n = [], prev_block(n_max)
        if n >= n_min:
            split.append((n, "first"))  # the first block always goes through apply_mask
            lo = max(first_masked_block(), n_min)
            n = prev_block(n)
            while n >= lo:
                split.append((n, "masked"))
                n = prev_block(n)
            run_lo = run_start(n)
            while n >= n_min:
                split.append((n, "visible"))
                if n - 1 >= run_lo:
                    n -= 1
                else:
                    n = prev_block(n)
                    if n >= n_min:
                        run_lo = run_start(n)
        yield m, unsplit, split, needs_mask


def _check(*args, **kw):
    for m, unsplit, split, needs_mask in _walks(*args, **kw):
        assert [n for n, _ in split] == unsplit, (args, kw, m)
        assert not any(needs_mask(n) for n, loop in split if loop == "visible"), (args, kw, m)


def test_plain_split_walks_the_same_blocks_and_masks_none_it_skips() -> None:
    seqs = [1, 127, 128, 129, 300, 700, 1000, 1800, 4097]
    for causal, sq, skv in itertools.product((False, True), seqs, seqs):
        for bm, bn, cluster in ((128, 128, 1), (192, 128, 1), (128, 160, 1), (128, 128, 2)):
            _check(causal, False, sq, skv, bm, bn, cluster=cluster)


def test_zigzag_split_walks_the_same_blocks_and_masks_none_it_skips() -> None:
    for world in (1, 2, 3, 4, 8):
        for rank, chunk in itertools.product(range(world), (128, 256, 384, 1024)):
            _check(True, True, 2 * chunk, 2 * chunk * world, 128, 128, world, rank, chunk)
