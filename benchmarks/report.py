"""Tables and plots from benchmark JSON only: ``results/X.json`` -> ``results/X.md`` (markdown
table) and ``results/X.png`` (plot) beside it.

    python benchmarks/report.py [results/*.json ...]   # default: every JSON without a .md yet
    python benchmarks/report.py --all                  # redo every JSON under results/

GEMM and grouped-GEMM results get their own table (the ratio to the anchor per shape, the
spread over the run's rounds, the plan, the autotune's first-call cost where recorded) and a
bar plot of the ratio with the rounds' min-max as error bars; any other JSON (the host data path,
benchmarks added later) a table per section of scalar fields. The PNG needs matplotlib; without
it the plot is skipped with a message and the markdown is still written.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).resolve().parent / "results"


def _fmt(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:.4g}"
    if isinstance(v, (list, tuple)):
        return " / ".join(_fmt(x) for x in v)
    return str(v)


def _table(header: list[str], rows: list[list[Any]]) -> str:
    out = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    out += ["| " + " | ".join(_fmt(c) for c in row) + " |" for row in rows]
    return "\n".join(out)


def _head(data: dict, path: Path) -> list[str]:
    dev = data.get("device", {})
    lines = [f"# {data.get('benchmark', path.stem)}: {path.name}", ""]
    lines.append(f"- commit `{data.get('commit', 'unknown')}`, device: "
                 + ", ".join(f"{k} {v}" for k, v in dev.items()))
    for key in ("anchor", "timing", "dtype"):
        if key in data:
            lines.append(f"- {key}: {data[key]}")
    lines.append("")
    return lines


# --- GEMM ----------------------------------------------------------------------------------

def gemm_rows(data: dict) -> list[dict]:
    """Per shape: auto vs the anchor, with the spread of the per-round ratios."""
    rows = []
    for r in data["results"]:
        final = r.get("final", {})
        if "auto" in final and "cublas" in final:
            auto = final["auto"]
            ratio, cublas_tf, auto_tf = auto["ratio_vs_cublas"], final["cublas"]["tflops"], auto["tflops"]
            rounds = auto.get("round_ratios") or [ratio]
        else:  # the first runs' layout (before interleaved rounds): the ratio alone
            ratio = r["auto_ratio"]
            cublas_tf = (r.get("cublas_final") or r.get("cublas") or {}).get("tflops", float("nan"))
            auto_tf, rounds = float("nan"), [ratio]
        rows.append({
            "shape": f"{r['m']}x{r['n']}x{r['k']}", "plan": r.get("plan", ""),
            "cublas_tflops": cublas_tf, "auto_tflops": auto_tf,
            "ratio": ratio, "round_min": min(rounds), "round_max": max(rounds),
            "best": r.get("best", r.get("best_config", "")), "best_ratio": r.get("best_ratio", float("nan")),
            "autotune_first_call_s": r.get("autotune_first_call_s"),
        })
    return rows


def gemm_markdown(data: dict, path: Path) -> str:
    rows = gemm_rows(data)
    lines = _head(data, path)
    lines.append("auto = what `mkernel.gemm(a, b)` ran at that commit (the autotuned plan from 9fdd998 "
                 "on, the shape heuristic before); ratio = cuBLAS time / auto time (> 1: faster than "
                 "cuBLAS), median of the rounds; rounds: min-max of the per-round ratios (runs before "
                 "the interleaved rounds record one ratio).")
    lines.append("")
    header = ["M x N x K", "cuBLAS TF/s", "auto TF/s", "auto / cuBLAS", "rounds min-max",
              "plan", "best candidate", "best / cuBLAS"]
    has_tune = any(r["autotune_first_call_s"] is not None for r in rows)
    if has_tune:
        header.append("autotune first call (s)")
    table = []
    for r in rows:
        row = [r["shape"], r["cublas_tflops"], r["auto_tflops"], f"{r['ratio']:.3f}",
               f"{r['round_min']:.3f}-{r['round_max']:.3f}", r["plan"], r["best"],
               f"{r['best_ratio']:.3f}"]
        if has_tune:
            row.append("-" if r["autotune_first_call_s"] is None else f"{r['autotune_first_call_s']:.3f}")
        table.append(row)
    lines.append(_table(header, table))
    losing = [r["shape"] for r in rows if r["ratio"] < 1.0]
    lines += ["", f"Shapes where auto is slower than cuBLAS in this run: {', '.join(losing) or 'none'}.", ""]
    return "\n".join(lines)


def gemm_plot(data: dict, png: Path, plt) -> None:
    rows = gemm_rows(data)
    fig, ax = plt.subplots(figsize=(max(6, 1.1 * len(rows)), 4))
    xs = range(len(rows))
    ratios = [r["ratio"] for r in rows]
    err = [[r["ratio"] - r["round_min"] for r in rows], [r["round_max"] - r["ratio"] for r in rows]]
    ax.bar(xs, ratios, yerr=err, capsize=4, color=["tab:red" if v < 1 else "tab:blue" for v in ratios])
    ax.axhline(1.0, color="black", lw=0.8)
    ax.set_xticks(list(xs), [r["shape"] for r in rows], rotation=30, ha="right", fontsize=8)
    ax.set_ylabel("cuBLAS time / mkernel time")
    ax.set_title(f"mkernel.gemm (auto) vs cuBLAS, {data.get('device', {}).get('gpu', '')}, "
                 f"commit {data.get('commit', '')}", fontsize=9)
    fig.tight_layout()
    fig.savefig(png, dpi=120)
    plt.close(fig)


# --- grouped GEMM ----------------------------------------------------------------------------

def grouped_markdown(data: dict, path: Path) -> str:
    lines = _head(data, path)
    lines.append("ratio = `torch._grouped_mm` time / mkernel time (> 1: faster), median of the rounds.")
    lines.append("")
    table = []
    for r in data["results"]:
        ours = r.get("mkernel_packed") or r.get("mkernel", {})  # the first run: one layout, "mkernel"
        rounds = [a / b for a, b in zip(r["grouped_mm"].get("round_medians_ms", []),
                                        ours.get("round_medians_ms", []))] or [r["ratio"]]
        table.append([r["routing"], f"{r['experts']} x {r['tokens']} tokens, H {r['h']}, F {r['f']}",
                      r["grouped_mm"]["tflops"], ours.get("tflops", float("nan")), f"{r['ratio']:.3f}",
                      f"{min(rounds):.3f}-{max(rounds):.3f}", _fmt(r.get("ratio_padded", "-")), r.get("plan", ""),
                      "-" if r.get("autotune_first_call_s") is None else f"{r['autotune_first_call_s']:.3f}"])
    lines.append(_table(["routing", "problem", "_grouped_mm TF/s", "packed TF/s", "packed ratio",
                         "rounds min-max", "padded ratio", "plan", "autotune first call (s)"], table))
    lines.append("")
    return "\n".join(lines)


def grouped_plot(data: dict, png: Path, plt) -> None:
    rs = data["results"]
    fig, ax = plt.subplots(figsize=(6, 4))
    xs = range(len(rs))
    ax.bar([x - 0.2 for x in xs], [r["ratio"] for r in rs], width=0.4, label="packed")
    ax.bar([x + 0.2 for x in xs], [r.get("ratio_padded", 0.0) for r in rs], width=0.4, label="capacity-padded")
    ax.axhline(1.0, color="black", lw=0.8)
    ax.set_xticks(list(xs), [r["routing"] for r in rs])
    ax.set_ylabel("torch._grouped_mm time / mkernel time")
    ax.legend()
    ax.set_title(f"mkernel.gemm_grouped vs torch._grouped_mm, commit {data.get('commit', '')}", fontsize=9)
    fig.tight_layout()
    fig.savefig(png, dpi=120)
    plt.close(fig)


# --- ring attention ----------------------------------------------------------------------------

RING_CANDIDATES = [("median_ms", "mkernel"), ("step_ms", "per-step pinned"),
                   ("send4_ms", "4 send CTAs"), ("send1_ms", "1 send CTA"),
                   ("send_first_ms", "engine after the send starts"),
                   ("send_engine_ms", "forwarded by the engine"),
                   ("unfused_ms", "unfused ring"), ("compute_ms", "per-step compute alone"),
                   ("send_kernel_ms", "send kernel"), ("static_ms", "static tiles"),
                   ("kernel_static_ms", "send kernel, static tiles"), ("grid48_ms", "48-CTA grid")]


def _ring_agg_inv(r: dict) -> float | None:
    """Σ_r 1 / T_full,r: the ranks' engine_full rates summed (per unit of work); None when the
    run did not record them. Under MPS the ranks' shares can be uneven, and the slower rank's
    T_full / W (the bench's `ceiling`) is then no bound: time x this sum is the fair ratio."""
    per = r.get("per_rank")
    if not per or not all("engine_full" in m for m in per):
        return None
    return sum(1.0 / m["engine_full"] for m in per)


def ring_markdown(data: dict, path: Path) -> str:
    lines = _head(data, path)
    lines.append(f"W = {data.get('world')} ranks under MPS; ms = the slowest rank's median; "
                 "ceiling = one engine call over the whole sequence on a rank's SMs / W; "
                 "x ceiling = ceiling / mkernel (> 1: faster than the ceiling); x agg = 1 / "
                 "(mkernel ms x the sum over ranks of 1 / engine_full ms), the aggregate "
                 "ceiling (fair when the ranks' MPS shares are uneven).")
    lines.append("")
    present = [(k, name) for k, name in RING_CANDIDATES if any(k in r for r in data["rows"])]
    table = []
    for r in data["rows"]:
        inv = _ring_agg_inv(r)
        table.append([r["shape"], r["causal"], r.get("mode", "")]
                     + [r.get(k, "-") for k, _ in present]
                     + [r["ceiling_ms"], f"{r['vs_ceiling']:.3f}",
                        "-" if inv is None else f"{1.0 / (r['median_ms'] * inv):.3f}",
                        f"{r['vs_unfused']:.3f}", r.get("per_rank_ms", "-")])
    lines.append(_table(["shape", "causal", "mode"] + [f"{n} ms" for _, n in present]
                        + ["ceiling ms", "x ceiling", "x agg", "x unfused",
                           "mkernel per rank ms"], table))
    lines.append("")
    return "\n".join(lines)


def ring_plot(data: dict, png: Path, plt) -> None:
    rows = data["rows"]
    plotted = ("median_ms", "step_ms", "send4_ms", "send_first_ms", "send_engine_ms",
               "unfused_ms", "send_kernel_ms", "static_ms", "kernel_static_ms")
    present = [(k, name) for k, name in RING_CANDIDATES
               if k in plotted and any(k in r for r in rows)]
    fig, ax = plt.subplots(figsize=(max(6, 1.6 * len(rows)), 4))
    width = 0.8 / len(present)
    for i, (key, name) in enumerate(present):
        xs = [x + (i - (len(present) - 1) / 2) * width for x in range(len(rows))]
        ax.bar(xs, [0.0 if key not in r else
                    (r["ceiling_ms"] / r[key] if _ring_agg_inv(r) is None
                     else 1.0 / (r[key] * _ring_agg_inv(r))) for r in rows],
               width=width, label=name)
    ax.axhline(1.0, color="black", lw=0.8)
    ax.axhline(0.95, color="gray", lw=0.8, ls="--")
    ax.set_xticks(list(range(len(rows))),
                  [f"{r['shape']}\n{'causal' if r['causal'] else 'non-causal'}" for r in rows],
                  fontsize=8)
    ax.set_ylabel("compute-alone ceiling / time (aggregate where recorded)")
    ax.legend(fontsize=7)
    ax.set_title(f"mkernel.ring_attention, W = {data.get('world')} under MPS, commit "
                 f"{data.get('commit', '')}", fontsize=9)
    fig.tight_layout()
    fig.savefig(png, dpi=120)
    plt.close(fig)


# --- attention engine (bench_attention.py) ---------------------------------------------------

def _attn_get(r: dict, key: str, fmt: str = "") -> Any:
    """r[key] (formatted when fmt is given), "-" where an older run did not record it."""
    if key not in r:
        return "-"
    return fmt.format(r[key]) if fmt else r[key]


def _attn_label(r: dict) -> str:
    kv = f" h_kv {r['h_kv']}" if r.get("h_kv", r.get("h")) != r.get("h") else ""
    return f"S {r.get('s', '?')} b {r.get('b', '?')}{kv} {'causal' if r.get('causal') else 'non-causal'}"


def attention_markdown(data: dict, path: Path) -> str:
    """bench_attention.py's forward rows (attention_fwd) or forward + backward rows
    (attention_fwd_bwd): TFLOP/s per column and the ratios to SDPA's backends in the same run."""
    lines = _head(data, path)
    lines += [f"- timing: {data.get('method', '')}", ""]
    rows = data["rows"]
    if data.get("bench") == "attention_fwd_bwd":
        lines.append("Forward + backward (mkernel: its default backward, the row's `kernel`), the "
                     "backward alone from an idle GPU (wall: host cost counts) and the backward "
                     "alone in GPU time; TFLOP/s (backward = 2.5x the forward's FLOPs), x = the "
                     "ratio to the best SDPA backend's (> 1: faster).")
        lines.append("")
        table = [[_attn_label(r), r.get("d", "-"), r.get("backward_kernel", "-")]
                 + [_attn_get(r, k) for k in ("mkernel_tflops", "cudnn_tflops", "flash_tflops")]
                 + [_attn_get(r, k, "{:.3f}") for k in ("ratio_vs_cudnn", "ratio_vs_flash")]
                 + [_attn_get(r, "bwd_mkernel_tflops"),
                    _attn_get(r, "bwd_mkernel_ratio_vs_best_sdpa", "{:.3f}"),
                    _attn_get(r, "gpu_bwd_mkernel_tflops"),
                    _attn_get(r, "gpu_bwd_mkernel_ratio_vs_best_sdpa", "{:.3f}")] for r in rows]
        lines.append(_table(["problem", "d", "kernel", "fwd+bwd TF/s", "cuDNN", "FA2", "x cuDNN",
                             "x FA2", "bwd wall TF/s", "x best", "bwd GPU TF/s", "x best"], table))
    else:
        lines.append("Forward, GPU time (TFLOP/s = 4 b h S S_kv d, halved causal); x = SDPA's "
                     "backend time / mkernel's (> 1: faster).")
        lines.append("")
        # Opt-in tile / variant columns where the run timed them (mkernel_alt*, mkernel_v*).
        alts = sorted({k[:-len("_tflops")] for r in rows for k in r
                       if k.startswith("mkernel_") and k.endswith("_tflops") and k != "mkernel_tflops"})
        table = [[_attn_label(r), r.get("d", "-")]
                 + [_attn_get(r, k) for k in ("mkernel_tflops", "cudnn_tflops", "flash_tflops")]
                 + [_attn_get(r, k, "{:.3f}") for k in ("ratio_vs_cudnn", "ratio_vs_flash")]
                 + [_attn_get(r, f"{a}_tflops") for a in alts] for r in rows]
        lines.append(_table(["problem", "d", "mkernel TF/s", "cuDNN TF/s", "FA2 TF/s", "x cuDNN",
                             "x FA2"] + [f"{a} TF/s" for a in alts], table))
    lines.append("")
    return "\n".join(lines)


def attention_plot(data: dict, png: Path, plt) -> None:
    """TFLOP/s per problem, one bar per column (mkernel, SDPA cuDNN, SDPA FA2); for forward +
    backward runs a second panel with the backward alone in GPU time."""
    rows = data["rows"]
    both = data.get("bench") == "attention_fwd_bwd"
    panels = [("mkernel_tflops", "cudnn_tflops", "flash_tflops",
               "forward + backward" if both else "forward")]
    if both:
        panels.append(("gpu_bwd_mkernel_tflops", "gpu_bwd_cudnn_tflops", "gpu_bwd_flash_tflops",
                       "backward alone, GPU time"))
    fig, axes = plt.subplots(len(panels), 1, figsize=(max(7, 1.1 * len(rows)), 3.6 * len(panels)),
                             squeeze=False)
    for ax, (ours, cudnn, flash, title) in zip(axes[:, 0], panels):
        cols = [(ours, "mkernel"), (cudnn, "SDPA cuDNN"), (flash, "SDPA FA2")]
        width = 0.8 / len(cols)
        for i, (key, name) in enumerate(cols):
            xs = [x + (i - (len(cols) - 1) / 2) * width for x in range(len(rows))]
            ax.bar(xs, [r.get(key, 0.0) for r in rows], width=width, label=name)
        for x, r in enumerate(rows):
            if r.get(cudnn) and r.get(ours):
                ax.annotate(f"x{r[ours] / r[cudnn]:.3f}", (x - 0.4 + width / 2, r[ours]),
                            fontsize=6, ha="center", va="bottom")
        ax.set_xticks(list(range(len(rows))), [_attn_label(r).replace(" non-causal", "\nnon-causal")
                                               .replace(" causal", "\ncausal") for r in rows], fontsize=7)
        ax.set_ylabel("TFLOP/s")
        ax.set_title(f"{title}: mkernel.attention vs SDPA, d = {rows[0].get('d', '?') if rows else ''}, "
                     f"{data.get('device', {}).get('gpu', '')}, commit {data.get('commit', '')}",
                     fontsize=9)
        ax.legend(fontsize=7, loc="lower right")
    fig.tight_layout()
    fig.savefig(png, dpi=120)
    plt.close(fig)


# --- fused GEMM + communication (bench_fused.py) -----------------------------------------------

def _fused_label(r: dict) -> str:
    return f"{r['op']}\n{r['shape']}"


def fused_markdown(data: dict, path: Path) -> str:
    lines = _head(data, path)
    nodes = data.get("nodes", 1)
    where = (f" in {nodes} emulated nodes (link {data.get('emulate') or 'not shaped'})"
             if nodes > 1 else "")
    lines.append(f"W = {data.get('world')} ranks{where} on one GPU under MPS ("
                 f"{data.get('mps_share_percent')} % each); ms = the slowest rank's median. "
                 "fused = the op as users get it (path: what its per-shape choice ran); "
                 "x unfused = unfused / fused (> 1: the op is faster than the substrate collective + engine "
                 "GEMM called back to back), paired = the median of the per-round ratio; "
                 "x ideal = fused / max(GEMM alone, collective alone) (target <= 1.05 at "
                 "M >= 8192); op unfused = the op with its unfused path pinned (its ratio to "
                 "unfused: what the op's fallback adds); noise = the unfused sequence timed "
                 "twice, the ratio of the two (the run's floor on identical work).")
    if data.get("method"):
        lines.append(f"Method: {data['method']}.")
    lines.append("")
    table = []
    for r in data["rows"]:
        table.append([r["op"], r["shape"], f"{r['m']}x{r['k']}x{r['n']}", r.get("path", "-"),
                      r["fused_ms"], r.get("unfused_ms", "-"), r.get("op_unfused_ms", "-"),
                      r.get("fused_kernel_ms", "-"), r["gemm_ms"], r.get("comm_ms", "-"),
                      r.get("unfused_over_fused", "-"), r.get("unfused_over_fused_paired", "-"),
                      r.get("op_unfused_over_unfused_paired", "-"),
                      r.get("unfused_b_over_unfused_paired", "-"),
                      r.get("fused_vs_ideal", "-")])
    lines.append(_table(["op", "shape", "per rank MxKxN", "path", "fused ms", "unfused ms",
                         "op unfused ms", "fused kernel ms", "GEMM alone ms", "collective ms",
                         "x unfused", "x unfused paired", "op unfused / unfused paired",
                         "noise: unfused twice, paired", "x ideal"], table))
    lines.append("")
    plans = [[r["op"], r["shape"], r["gemm_plan"]] for r in data["rows"] if r.get("gemm_plan")]
    if plans:
        lines.append("The GEMM-alone anchor's plan (the engine's tuned plan at this share):")
        lines.append("")
        lines.append(_table(["op", "shape", "engine plan"], plans))
        lines.append("")
    if data.get("placement"):
        pl = data["placement"]
        lines.append(f"Placement probe (2-CTA clusters, one CTA per SM, {data.get('world')} ranks "
                     f"at once; {pl['share_sms']} SMs per rank): largest grid whole on every "
                     f"rank = {pl['best_c2_grid']} (3/4 rule: {pl['default_co_grid']}).")
        lines.append("")
        lines.append(_table(["cluster", "grid", "first wave per rank (reps)", "whole"],
                            [[p["cluster"], p["grid"], str(p["first_wave_per_rank"]), p["whole"]]
                             for p in pl["probes"]]))
        lines.append("")
    names = sorted({k[len("fused_"):-len("_ms")] for r in data["rows"] for k in r
                    if k.startswith("fused_") and k.endswith("_ms")
                    and k not in ("fused_ms", "fused_kernel_ms")})
    if names or any("gemm_hooked_co_ms" in r for r in data["rows"]):
        lines.append("Variants (knobs: " + ", ".join(f"{k} = {v}" for k, v in
                                                     (data.get("variants") or {}).items())
                     + "; hooked = the fused config's GEMM alone on the co-resident grid, "
                       "each call after a device barrier):")
        lines.append("")
        head = ["op", "shape", "fused ms", "x ideal"]
        for n in names:
            head += [f"{n} ms", f"{n} x ideal", f"{n} / fused paired", f"{n} same bits"]
        head += ["hooked GEMM ms", "hooked / GEMM alone"]
        body = []
        for r in data["rows"]:
            if not any(f"fused_{n}_ms" in r for n in names) and "gemm_hooked_co_ms" not in r:
                continue
            line = [r["op"], r["shape"], r["fused_ms"], r.get("fused_vs_ideal", "-")]
            for n in names:
                line += [r.get(f"fused_{n}_ms", "-"), r.get(f"fused_{n}_vs_ideal", "-"),
                         r.get(f"fused_{n}_over_fused_paired", "-"),
                         r.get(f"fused_{n}_same_bits", "-")]
            hk = r.get("gemm_hooked_co_ms")
            line += [hk if hk else "-", hk / r["gemm_ms"] if hk else "-"]
            body.append(line)
        lines.append(_table(head, body))
        lines.append("")
    picks = [r["choice"] for r in data["rows"] if isinstance(r.get("choice"), dict)]
    if picks:  # bench_fused peer_choice (fused16): ag_gemm's auto route vs both kernels forced
        lines.append("ag_gemm's route (MKERNEL_FUSED_AG_PEER_TMA=auto: the op's first call "
                     "measured both kernels and the unfused path) against each kernel forced "
                     "(copy: =0, peer-TMA: =1); op / best forced = the op over the faster forced "
                     "kernel:")
        lines.append("")
        lines.append(_table(
            ["op", "shape", "op ran", "faster forced", "picked it", "op ms", "copy ms",
             "peer ms", "peer / copy paired", "op / best forced"],
            [[c["op"], c["shape"], c["route"], c["forced_faster"], c["picked_faster"],
              c["op_ms"], c["copy_ms"], c["peer_ms"],
              c["peer_over_copy_paired"] if c.get("peer_over_copy_paired") is not None else "-",
              c["op_over_best_forced"]] for c in picks]))
        lines.append("")
    tls = [r for r in data["rows"] if isinstance(r.get("timeline"), dict)
           and r["timeline"].get("launches")]
    if tls:
        lines.append("Timelines (4 calls back to back with per-CTA stamps, the op's plan; per "
                     "launch: the smallest first wave over the ranks / CTAs per rank, the GEMM "
                     "phase (first start -> last tile stored), the tail after it (-> last exit), "
                     "ag_gemm's slowest copy rate; us):")
        lines.append("")
        lines.append(_table(
            ["op", "shape", "first wave / grid", "GEMM phase us", "tail us", "copy GB/s",
             "period us"],
            [[r["op"], r["shape"],
              " ".join(f"{lc['first_wave_min']}/{lc['ctas']}" for lc in r["timeline"]["launches"]),
              [lc["gemm_phase_us"] for lc in r["timeline"]["launches"]],
              [lc["tail_us"] for lc in r["timeline"]["launches"]],
              [lc["copy_gbs_min"] for lc in r["timeline"]["launches"]
               if lc.get("copy_gbs_min") is not None] or "-",
              r["timeline"].get("period_us")] for r in tls]))
        lines.append("")
    return "\n".join(lines)


def fused_plot(data: dict, png: Path, plt) -> None:
    rows = [r for r in data["rows"] if "unfused_over_fused" in r]
    fig, axes = plt.subplots(2, 1, figsize=(max(7, 0.75 * len(rows)), 7), sharex=True)
    xs = list(range(len(rows)))
    width = 0.4
    ax = axes[0]
    ax.bar([x - width / 2 for x in xs], [r["unfused_over_fused"] for r in rows], width=width,
           label="unfused / fused (medians)")
    ax.bar([x + width / 2 for x in xs],
           [r.get("unfused_over_fused_paired", r["unfused_over_fused"]) for r in rows],
           width=width, label="paired per round")
    ax.axhline(1.0, color="black", lw=0.8)
    ax.set_ylabel("x faster than unfused")
    ax.legend(fontsize=7)
    ax = axes[1]
    # Side by side per shape, each over the overlap ideal max(GEMM alone, collective alone):
    # the op (gray where it ran unfused), the unfused sequence, and the two anchors.
    w3 = 0.2
    ax.bar([x - 1.5 * w3 for x in xs], [r["fused_vs_ideal"] for r in rows], width=w3,
           color=["tab:gray" if r.get("path", "fused").startswith("unfused") else "tab:green"
                  for r in rows], label="fused (gray: ran unfused)")
    ax.bar([x - 0.5 * w3 for x in xs], [r["unfused_ms"] / r["ideal_ms"] for r in rows], width=w3,
           color="tab:red", label="unfused")
    ax.bar([x + 0.5 * w3 for x in xs], [r["gemm_ms"] / r["ideal_ms"] for r in rows], width=w3,
           color="tab:blue", label="GEMM alone")
    ax.bar([x + 1.5 * w3 for x in xs], [r["comm_ms"] / r["ideal_ms"] for r in rows], width=w3,
           color="tab:orange", label="collective alone")
    ax.axhline(1.0, color="black", lw=0.8)
    ax.axhline(1.05, color="gray", lw=0.8, ls="--")
    ax.set_ylabel("time / overlap ideal")
    ax.legend(fontsize=7, ncol=4)
    ax.set_xticks(xs, [_fused_label(r) for r in rows], fontsize=7, rotation=60, ha="right")
    nodes = data.get("nodes", 1)
    axes[0].set_title(f"mkernel fused ops, W = {data.get('world')}"
                      + (f", {nodes} emulated nodes ({data.get('emulate')})" if nodes > 1 else "")
                      + " under MPS, commit "
                      f"{data.get('commit', '')}", fontsize=9)
    fig.tight_layout()
    fig.savefig(png, dpi=120)
    plt.close(fig)


# --- anything else -----------------------------------------------------------------------------

def _scalars(d: dict, prefix: str = "") -> dict:
    out = {}
    for k, v in d.items():
        if isinstance(v, (int, float, str, bool)) and not (isinstance(v, str) and len(v) > 80):
            out[prefix + k] = v
        elif isinstance(v, dict) and not prefix:
            out.update(_scalars(v, f"{k}."))
    return out


def generic_sections(data: dict) -> list[tuple[str, list[dict]]]:
    sections = []
    for key, value in data.items():
        if key == "device":
            continue
        if isinstance(value, list) and value and all(isinstance(x, dict) for x in value):
            sections.append((key, [_scalars(x) for x in value]))
        elif isinstance(value, dict) and _scalars(value):
            sections.append((key, [_scalars(value)]))
    return sections


def generic_markdown(data: dict, path: Path) -> str:
    lines = _head(data, path)
    for name, rows in generic_sections(data):
        cols = list(dict.fromkeys(c for r in rows for c in r))
        lines += [f"## {name}", "", _table(cols, [[r.get(c, "") for c in cols] for r in rows]), ""]
    return "\n".join(lines)


RENDERERS = {"gemm": (gemm_markdown, gemm_plot), "grouped_gemm": (grouped_markdown, grouped_plot),
             "ring_attention": (ring_markdown, ring_plot), "fused": (fused_markdown, fused_plot),
             "attention": (attention_markdown, attention_plot)}


def report(path: Path) -> tuple[Path, Path | None]:
    """Writes path.md (always) and path.png (when matplotlib is there and the benchmark has a
    plot); returns them."""
    data = json.loads(path.read_text())
    if isinstance(data, list):  # a bare row list (gemm_kernel_names.py before session 13)
        data = {"rows": data}
    kind = data.get("benchmark") or ("ring_attention" if path.name.startswith("ring_attention_")
                                     else None)  # session 6's ring JSON has no "benchmark"
    if kind is None and data.get("bench") in ("fused", "attention_fwd", "attention_fwd_bwd"):
        kind = "attention" if data["bench"].startswith("attention") else "fused"  # named "bench"
    markdown, plot = RENDERERS.get(kind, (generic_markdown, None))
    md = path.with_suffix(".md")
    md.write_text(markdown(data, path))
    if plot is None or data.get("rows") == []:  # a run that failed before its first row: no plot
        return md, None
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print(f"report: matplotlib is not installed: no plot for {path.name} (pip install matplotlib)",
              file=sys.stderr)
        return md, None
    png = path.with_suffix(".png")
    plot(data, png, plt)
    return md, png


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("json", nargs="*", type=Path)
    ap.add_argument("--all", action="store_true", help="every JSON under results/, even with a .md")
    args = ap.parse_args(argv)
    paths = args.json or sorted(p for p in RESULTS.glob("*.json")
                                if args.all or not p.with_suffix(".md").exists())
    for p in paths:
        md, png = report(p)
        print(f"report: {md}" + (f", {png}" if png else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
