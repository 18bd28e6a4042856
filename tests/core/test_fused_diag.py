"""benchmarks/fused_diag.py's timeline summary (MKERNEL_FUSED_TIMELINE lines, fused_params.h
TimelineSlot) on synthetic records: the phases come out per rank in microseconds from the first
CTA's start on any rank, and the item counts add up over the CTAs."""

from __future__ import annotations

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def load_diag():
    spec = importlib.util.spec_from_file_location("fused_diag", ROOT / "benchmarks" / "fused_diag.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def line(rank: int, ctas: list[list[int]]) -> str:
    words = " ".join(str(w) for cta in ctas for w in cta)
    return f"gemm_rs 4096 8192 1024 coop_128x256_c2x1 {rank} side=1 tail=1 | {words}"


def test_timeline_summary_phases_and_counts():
    diag = load_diag()
    t0 = 1_000_000
    # start, entered, gemm_done, tail_done, side_done, exit, side_items, tail_items (ns / counts),
    # smid, cluster
    rank0 = [[t0, t0 + 2_000, t0 + 250_000, t0 + 300_000, t0 + 240_000, t0 + 301_000, 10, 54, 4, 2],
             [t0 + 500, t0 + 2_500, t0 + 252_000, t0 + 302_000, t0 + 241_000, t0 + 303_000, 12, 52,
              5, 2]]
    rank1 = [[t0 + 1_000, t0 + 2_000, t0 + 260_000, 0, t0 + 250_000, t0 + 320_000, 0, 64, 5, 0]]
    got = diag.summarise_timeline({0: line(0, rank0), 1: line(1, rank1)})
    r0, r1 = got["rank0"], got["rank1"]
    assert r0["ctas"] == 2 and r1["ctas"] == 1
    assert r0["start_us"] == 0.2 and r0["gemm_done_us"] == 251.0 and r0["gemm_done_max_us"] == 252.0
    assert r0["side_items"] == 22 and r0["tail_items"] == 106
    assert r1["tail_done_us"] == 0.0  # no staged tail stamp on that rank
    assert r1["exit_us"] == 320.0 and r1["entered_us"] == 2.0
    assert r0["sms"] == 2 and r1["sms"] == 1 and got["shared_sms"] == 1  # SM 5 ran both ranks
    assert r0["late_ctas"] == 0
    # Concurrency: every CTA overlaps every other here; all started within 50 us of their rank's
    # first one.
    assert got["peak_ctas"] == 3 and r0["first_wave"] == 2 and r1["first_wave"] == 1


def test_timeline_concurrency_of_a_late_rank():
    diag = load_diag()
    t0 = 1_000_000
    cta = lambda start, exit_: [start, start, exit_ - 10, 0, 0, exit_, 0, 0, 0, 0]  # noqa: E731
    early = [cta(t0, t0 + 9_000_000) for _ in range(4)]
    # two CTAs at once, two more when the first two ended (the serialization under MPS)
    late = [cta(t0 + 100, t0 + 4_000_000), cta(t0 + 200, t0 + 4_000_000),
            cta(t0 + 4_001_000, t0 + 9_500_000), cta(t0 + 4_002_000, t0 + 9_500_000)]
    got = diag.summarise_timeline({0: line(0, early), 1: line(1, late)})
    assert got["peak_ctas"] == 6
    assert got["rank0"]["first_wave"] == 4 and got["rank1"]["first_wave"] == 2
    assert got["rank1"]["late_ctas"] == 2


def test_probe_summary_first_wave_and_late_arrivals():
    diag = load_diag()
    start, hold = 10_000_000, diag.PROBE_HOLD_NS
    word = lambda sm: sm | (66 << 32)  # noqa: E731  (%smid | %nsmid << 32)
    on_time = [[start - 100, start + hold, word(i), 0] for i in range(4)]
    got = diag.summarise_probe({
        0: on_time,
        1: on_time[:2] + [[start + hold + 500, start + 2 * hold, word(i), 0] for i in range(2)],
        2: [],  # a rank that did not launch
    }, start)
    assert got["first_wave"] == 6 and "rank2" not in got
    assert got["rank0"]["first_wave"] == 4 and got["rank0"]["late_arrive_us"] is None
    assert got["rank1"]["first_wave"] == 2 and got["rank1"]["late_arrive_us"] == 1000.5
    assert got["rank1"]["nsmid"] == [66] and got["rank1"]["sm_ids"] == 2
    assert got["first_wave_same_smid"] == 2  # ids 0 and 1 on both ranks at once: per-client ids


def test_pipeline_summary_of_back_to_back_launches():
    """Two ranks, three launches recorded together: rank 1 ends each call 1 ms after rank 0, and
    rank 0's next call starts when its previous one ends (0.5 ms before rank 1's), so its CTAs
    overlap the peer's previous call by 1 ms and wait at the entry barrier until rank 1 enters."""
    diag = load_diag()
    t0 = 5_000_000
    ms = 1_000_000

    def cta(start, entered, side, gemm, exit_):
        return [start, entered, gemm, 0, side, exit_, 0, 0, 0, 0]

    def launch(i, rank):
        base = t0 + i * 10 * ms
        if rank == 0:  # starts as its previous call ends (rank 0's exit at base - 1 ms)
            start = base - 1 * ms if i else base
            entered = base + 0  # the peer enters at base
            return [cta(start, entered, base + 2 * ms, base + 8 * ms, base + 9 * ms)
                    for _ in range(2)]
        return [cta(base, base + 10, base + 2 * ms, base + 9 * ms, base + 10 * ms),
                cta(base + 100_000, base + 10, base + 2 * ms, base + 9 * ms, base + 10 * ms)]

    lines = {r: [line(r, launch(i, r)) for i in range(3)] for r in (0, 1)}
    got = diag.summarise_pipeline(lines, pushed_bytes=4 * 10 ** 9)
    assert len(got["launches"]) == 3
    l0, l1 = got["launches"][0], got["launches"][1]
    assert l0["rank0"]["start_min_us"] == 0.0 and "overlap_prev_us" not in l0["rank0"]
    assert l1["rank0"]["start_min_us"] == 9000.0  # (10 - 1) ms after t0
    assert l1["rank0"]["overlap_prev_us"] == 1000.0  # rank 1's call 0 ended at 10 ms
    assert l1["rank1"]["overlap_prev_us"] == -1000.0  # started after rank 0's call 0 ended
    assert l1["rank0"]["entry_wait_us"] == 1000.0
    assert l1["rank1"]["first_wave"] == 1  # the second CTA started 100 us late
    assert l1["period_us"] == 10000.0 and got["period_us"] == 10000.0
    # 4 GB pushed between the first entry and the last copy end (2 ms - 0 or 10 ns)
    assert l0["rank0"]["copy_gbs"] == 2000.0
    assert got["peak_ctas"] == 4


def test_steady_summary_counts_partly_placed_launches():
    """The same three launches as above through summarise_steady: launch 1's smallest first
    wave is rank 1's 1 of 2 CTAs (a partly placed grid of 2), its largest overlap rank 0's
    1000 us; launch 0 has no predecessor (overlap 0, no period)."""
    diag = load_diag()
    pipe = {"launches": [
        {"rank0": {"first_wave": 2}, "rank1": {"first_wave": 2}},
        {"rank0": {"first_wave": 2, "overlap_prev_us": 1000.0},
         "rank1": {"first_wave": 1, "overlap_prev_us": -1000.0}, "period_us": 10000.0},
        {"rank0": {"first_wave": 2, "overlap_prev_us": -5.0},
         "rank1": {"first_wave": 2, "overlap_prev_us": -8.0}, "period_us": 9000.0}],
        "period_us": 9500.0, "peak_ctas": 4}
    got = diag.summarise_steady(pipe, grid=2)
    assert got["launches"][0] == {"first_wave_min": 2, "overlap_prev_max_us": 0.0,
                                  "period_us": None}
    assert got["launches"][1] == {"first_wave_min": 1, "overlap_prev_max_us": 1000.0,
                                  "period_us": 10000.0}
    assert got["launches"][2]["overlap_prev_max_us"] == -5.0
    assert got["partial_launches"] == 1
    assert got["period_us"] == 9500.0 and got["peak_ctas"] == 4
