"""The across-nodes decision rules of benchmarks/NOTES.md "xnode3", applied to bench_fused
--nodes-lean logs (their ROW / GATE lines), so that the verdict is mechanical and written before
the run:

    python benchmarks/fused_nodes_verdict.py xn3_w4.log xn3_w2.log

1. Per-op default across nodes (fused_common.h k<Op>NodesByDefault) flips on iff both the W=4 and the
   W=2 rows of the op are present and: (C) no error in the row and kernel_rel_vs_unfused <= 1e-2;
   (T1) fused_ms <= 1.05 x unfused_ms in every row; (T2) in at least one row the path is "fused ..."
   and fused_ms <= 0.90 x unfused_ms or fused_kernel_aligned_ms <= 0.90 x unfused_aligned_ms.
2. The GPU gate across emulated nodes (kGpuGateAgGemmByDefault) flips on iff both GATE lines (W=4, W=2) are
   present, gpugate_same_bits, no kWaitPeerExit record in the logs, and in one world both
   kernel_gpugate_over_kernel_paired <= 0.95 and fused_kernel_gpugate_ms <= 0.95 x fused_kernel_ms
   (medians), the other world's paired ratio <= 1.02.
3. The op-vs-kernel gap's reading per ag_gemm row: (a) co-tenancy, (b) carried state, (c) none.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

REL_MAX = 1e-2
NO_LOSS = 1.05
GAIN = 0.90
WORLDS = (4, 2)


def parse(texts: list[str]) -> tuple[list[dict], list[dict], bool]:
    """(ROW records, GATE records, whether any log holds a kWaitPeerExit / peer-exit wait record)."""
    rows, gates, peer_exit_wait = [], [], False
    for text in texts:
        for line in text.splitlines():
            if line.startswith("ROW "):
                rows.append(json.loads(line[4:]))
            elif line.startswith("GATE "):
                gates.append(json.loads(line[5:]))
            elif "kWaitPeerExit" in line or "previous fused kernel to exit" in line:
                peer_exit_wait = True
    return rows, gates, peer_exit_wait


def op_verdict(op: str, rows: list[dict]) -> tuple[bool, list[str]]:
    """Rule 1 for `op` over its rows (any worlds): (flip, reasons)."""
    mine = {r["world"]: r for r in rows if r["op"] == op}
    why = []
    missing = [w for w in WORLDS if w not in mine]
    if missing:
        return False, [f"no row at W={w}" for w in missing]
    gain = False
    for w in WORLDS:
        r = mine[w]
        rel = r.get("kernel_rel_vs_unfused")
        if not isinstance(rel, (int, float)) or rel > REL_MAX:
            why.append(f"W={w}: kernel_rel_vs_unfused {rel!r} (C fails)")
        if r["fused_ms"] > NO_LOSS * r["unfused_ms"]:
            why.append(f"W={w}: fused {r['fused_ms']:.2f} ms > {NO_LOSS} x unfused "
                       f"{r['unfused_ms']:.2f} (T1 fails)")
        aligned_gain = ("fused_kernel_aligned_ms" in r and "unfused_aligned_ms" in r
                        and r["fused_kernel_aligned_ms"] <= GAIN * r["unfused_aligned_ms"])
        if str(r.get("path", "")).startswith("fused") and (
                r["fused_ms"] <= GAIN * r["unfused_ms"] or aligned_gain):
            gain = True
    if not gain:
        why.append("no row where the op runs fused and gains >= 10 % (T2 fails)")
    return not why, why or ["C, T1, T2 hold"]


def gate_verdict(gates: list[dict], peer_exit_wait: bool) -> tuple[bool, list[str]]:
    """Rule 2: (flip, reasons)."""
    mine = {g["world"]: g for g in gates}
    why = [f"no GATE line at W={w}" for w in WORLDS if w not in mine]
    if peer_exit_wait:
        why.append("a peer-exit wait record in the logs")
    if why:
        return False, why
    ratios = sorted(mine[w]["kernel_gpugate_over_kernel_paired"] for w in WORLDS)
    if not all(mine[w].get("gpugate_same_bits") for w in WORLDS):
        why.append("gated output differs from the ungated kernel's")
    # The gain must show both round by round (paired) and in the medians, in the same world.
    wins = [w for w in WORLDS if mine[w]["kernel_gpugate_over_kernel_paired"] <= 0.95
            and mine[w]["fused_kernel_gpugate_ms"] <= 0.95 * mine[w]["fused_kernel_ms"]]
    if not wins or ratios[1] > 1.02:
        why.append(f"kernel_gpugate_over_kernel_paired {ratios} (want one world <= 0.95 paired "
                   f"and by medians, the other <= 1.02 paired)")
    return not why, why or [f"paired {ratios}, gain at W={wins}"]


def gap_reading(row: dict, gate: dict | None) -> str:
    """Rule 3 for an ag_gemm row (and its GATE line, if any)."""
    op, kern = row["fused_ms"], row["fused_kernel_ms"]
    parts = [f"op/kernel {op / kern:.2f}"]
    if gate is not None:
        gk = gate["fused_kernel_gpugate_ms"]
        aligned = row.get("fused_kernel_aligned_ms")
        if gk <= 0.85 * gate["fused_kernel_ms"] and aligned and abs(gk / aligned - 1) <= 0.15:
            parts.append("(a) co-tenancy: the gate brings the kernel to its aligned figure")
    prev = row.get("fused_by_prev_r0") or {}
    if prev.get("other") and prev.get("fused") and prev["other"] >= 1.5 * prev["fused"]:
        parts.append("(b) state carried from the previous figure")
    if 0.9 <= op / kern <= 1.1:
        parts.append("op and kernel agree within 10 %")
    return "; ".join(parts)


def main(paths: list[str]) -> None:
    rows, gates, wait = parse([Path(p).read_text(errors="replace") for p in paths])
    for op, const in (("ag_gemm", "kAgGemmNodesByDefault"), ("gemm_rs", "kGemmRsNodesByDefault"),
                      ("gemm_ar", "kGemmArNodesByDefault")):
        flip, why = op_verdict(op, rows)
        print(f"{const}: {'FLIP ON' if flip else 'stay off'} — {'; '.join(why)}")
    flip, why = gate_verdict(gates, wait)
    print(f"kGpuGateAgGemmByDefault: {'FLIP ON' if flip else 'stay off'} — {'; '.join(why)}")
    by_world = {g["world"]: g for g in gates}
    for r in rows:
        if r["op"] == "ag_gemm":
            print(f"gap W={r['world']}: {gap_reading(r, by_world.get(r['world']))}")


if __name__ == "__main__":
    main(sys.argv[1:])
