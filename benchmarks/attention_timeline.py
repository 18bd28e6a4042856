"""Where a non-causal forward tile's time goes: the measurement builds of variant bit 23
(csrc/kernels/attention/attention_variants_timeline.cu) sum, per consumer warpgroup of CTAs 0-7,
the SM cycles of each tile's phases — gap (since the previous tile's epilogue: the scheduler, the
loop), Q wait, the first KV block (S GEMM, softmax: nothing beside it), the block loop, the last
PV GEMM, the epilogue — and a kernel of their own prints them after each launch.

Rows at S = 4096 queries (b = 4, h = 32, d = 128, bf16: 4096 tiles, as bench_attention.py's
4096 row) over key lengths; per row the mean over the 16 warpgroups of cycles per tile in each
phase, the loop's cycles per block, and the per-tile cost outside the loop in units of that
block (c_t: NOTES attn13 estimated it from two sequence lengths). Also checks each measurement
build against its base variant bit for bit. Writes JSON under results/. (The print kernel prints
all 16 rows: a launch of fewer than 8 CTAs leaves the others' rows from an earlier call, so the
shapes here keep the grid full.)

    python benchmarks/attention_timeline.py [--kv-lens 2304,4096,4608,9216] [--variants 8784008,10127496]
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import sys
import tempfile

import torch

sys.path.insert(0, __file__.rsplit("/", 1)[0])
from common import commit, device_info, write_result  # noqa: E402

import mkernel  # noqa: E402

BASE = {8784008: 395400, 10127496: 1738888, 10897544: 395400, 15075464: 395400,
        25561224: 395400, 26904712: 1738888, 42338440: 395400, 43681928: 1738888}
# The epilogue in pieces (session 51): finalize (row sums, LSE, O normalised), the LSE's stores,
# the meet (O in a V stage: both warpgroups' last PV GEMMs done), then "epilogue" = the rest
# (conversion, stmatrix, fence, barrier, TMA store; a split piece's or register path's stores).
PHASES = ("gap", "qwait", "first", "loop", "lastpv", "finalize", "lse", "meet", "epilogue")
LINE = re.compile(r"mkernel-timeline variant (\d+) cta (\d+) wg (\d+) tiles (\d+) blocks (\d+) "
                  r"gap (\d+) qwait (\d+) first (\d+) loop (\d+) lastpv (\d+) epilogue (\d+) "
                  r"finalize (\d+) lse (\d+) meet (\d+)")
# Field of each phase in a parsed line (variant, cta, wg, tiles, blocks come first).
FIELD = {"gap": 5, "qwait": 6, "first": 7, "loop": 8, "lastpv": 9, "epilogue": 10,
         "finalize": 11, "lse": 12, "meet": 13}


def run(variant: int, q, k, v):
    os.environ["MKERNEL_ATTN_VARIANT"] = str(variant)
    try:
        return mkernel.attention(q, k, v, causal=False)
    finally:
        os.environ.pop("MKERNEL_ATTN_VARIANT", None)


def capture_fd1(fn):
    """fn() with file descriptor 1 (where the device printf lands) sent to a temp file: its text."""
    sys.stdout.flush()
    saved = os.dup(1)
    with tempfile.TemporaryFile(mode="w+b") as f:
        os.dup2(f.fileno(), 1)
        try:
            fn()
            torch.cuda.synchronize()  # flushes the device printf buffer
        finally:
            sys.stdout.flush()
            os.dup2(saved, 1)
            os.close(saved)
        f.seek(0)
        return f.read().decode(errors="replace")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--kv-lens", type=str, default="2304,4096,4608,9216")
    ap.add_argument("--variants", type=str, default="8784008,10127496")
    ap.add_argument("--seq", type=int, default=4096)
    args = ap.parse_args()
    b, h, d, s = max(1, 16384 // args.seq), 32, 128, args.seq
    rows = []
    for s_kv in (int(x) for x in args.kv_lens.split(",")):
        gen = torch.Generator(device="cuda").manual_seed(s_kv)
        q, k, v = (torch.randn(b, n, h, d, device="cuda", dtype=torch.bfloat16, generator=gen)
                   for n in (s, s_kv, s_kv))
        for var in (int(x) for x in args.variants.split(",")):
            want, want_lse = run(BASE[var], q, k, v)
            for _ in range(2):  # warm-up (clocks up, caches): their lines are dropped
                capture_fd1(lambda: run(var, q, k, v))
            got = {}
            text = capture_fd1(lambda: got.setdefault("r", run(var, q, k, v)))
            out, lse = got["r"]
            same = bool(torch.equal(out, want) and torch.equal(lse, want_lse))
            per_wg = [tuple(int(x) for x in m.groups()) for m in LINE.finditer(text)]
            per_wg = [r for r in per_wg if r[0] == var]
            if len(per_wg) != 16:
                raise SystemExit(f"variant {var} S_kv {s_kv}: {len(per_wg)} timeline lines, want 16:\n{text[-2000:]}")
            row = {"s": s, "s_kv": s_kv, "b": b, "h": h, "d": d, "variant": var, "base": BASE[var],
                   "bit_for_bit_base": same}
            tiles = [r[3] for r in per_wg]
            blocks = [r[4] for r in per_wg]
            row["tiles_per_wg_mean"] = statistics.mean(tiles)
            row["blocks_per_tile"] = sum(blocks) / sum(tiles)
            for ph in PHASES:
                row[f"{ph}_cycles_per_tile"] = statistics.mean(r[FIELD[ph]] / r[3] for r in per_wg)
            # Per warpgroup (0 leads the ping-pong, 1 follows): where the meet's wait falls.
            for wg in (0, 1):
                mine = [r for r in per_wg if r[2] == wg]
                row[f"wg{wg}_cycles_per_tile"] = {ph: statistics.mean(r[FIELD[ph]] / r[3] for r in mine)
                                                  for ph in PHASES}
            total = sum(row[f"{ph}_cycles_per_tile"] for ph in PHASES)
            row["total_cycles_per_tile"] = total
            # The loop walks every block but the first (the last PV GEMM is its own phase).
            loop_blocks = row["blocks_per_tile"] - 1
            row["loop_cycles_per_block"] = row["loop_cycles_per_tile"] / loop_blocks
            row["outside_loop_cycles_per_tile"] = total - row["loop_cycles_per_tile"]
            # c_t: what a tile costs beyond blocks_per_tile loop blocks, in loop blocks.
            row["c_t_blocks"] = (total - row["blocks_per_tile"] * row["loop_cycles_per_block"]) / row["loop_cycles_per_block"]
            row["spread_total_cycles"] = [min(sum(r[5:14]) for r in per_wg), max(sum(r[5:14]) for r in per_wg)]
            rows.append(row)
            print(f"S_kv={s_kv:5d} v{var}: bit-for-bit {same}  blocks/tile {row['blocks_per_tile']:.2f}  "
                  f"per tile: " + "  ".join(f"{ph} {row[f'{ph}_cycles_per_tile']:.0f}" for ph in PHASES)
                  + f"  | loop/block {row['loop_cycles_per_block']:.0f}  c_t {row['c_t_blocks']:.2f} blocks",
                  flush=True)
            for wg in (0, 1):
                print(f"    wg{wg}: " + "  ".join(f"{ph} {row[f'wg{wg}_cycles_per_tile'][ph]:.0f}" for ph in PHASES),
                      flush=True)
    payload = {"bench": "attention_timeline", "device": device_info(), "commit": commit(),
               "method": "variant bit 23 cycle sums (clock) per tile phase, consumer warpgroups of "
                         "CTAs 0-7, the third call of each row (two warm-up calls)",
               "rows": rows}
    print(write_result("attention_timeline", payload))
    if not all(r["bit_for_bit_base"] for r in rows):
        raise SystemExit("a measurement build differs from its base variant")


if __name__ == "__main__":
    main()
