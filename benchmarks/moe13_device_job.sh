#!/usr/bin/env bash
# moe13's device job (benchmarks/NOTES.md "MoE, moe13"; budget 80 s, build excluded): the MoE bench
# across 2 emulated nodes (W=2, GPU-direct default, 50GB/s,3us) at the seed shape, --lean (the op with
# and without MKERNEL_MOE_DISPATCH_GATHER=counted, the dispatch alone = MKERNEL_MOE_DISPATCH_ONLY=1,
# the combine, the GEMM alone, the link paths alone), once per copier submission (plain, then ce).
# Each run prints its rows live; the last lines are one SUMMARY line per run and the verdict inputs.
# Run from the repo root: bash benchmarks/moe13_device_job.sh
set -u
cd "$(dirname "$0")/.."
export OUT="${OUT:-$(mktemp -d)}"
rows="$OUT/moe_ranks_rows.jsonl"
rc_plain=skipped rc_ce=skipped
for submit in plain ce; do
  left=$((78 - SECONDS))
  if [ "$left" -lt 20 ]; then echo "STEP bench_$submit skipped ($left s left)"; continue; fi
  [ "$left" -gt 38 ] && left=38
  t0=$SECONDS
  MKERNEL_NET_GDR_COPIER_SUBMIT=$submit timeout "$left" python3 benchmarks/bench_moe_ranks.py --world 2 \
    --nodes 2 --emulate 50GB/s,3us --shapes seed_e256_top8_8k --iters 10 --lean
  rc=$?
  echo "STEP bench_$submit rc=$rc ($((SECONDS - t0)) s)"
  eval "rc_$submit=$rc"
done
python3 - "$rows" <<'PY'
import json, sys
try:
    rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
except OSError:
    rows = []
f = lambda v, nd=2: "n/a" if v is None else f"{v:.{nd}f}"
for r in rows:
    m = lambda n: (r.get(n) or {}).get("median_ms")
    print(f"SUMMARY moe13 submit={r.get('copier_submit_env') or 'default'}: "
          f"dispatch_only {f(m('mkernel_dispatch_only'), 3)} ms = {f(r.get('mkernel_dispatch_only_link_ratio'))}x link, "
          f"counted {f(m('mkernel_dispatch_only_counted'), 3)} ms = {f(r.get('mkernel_dispatch_only_counted_link_ratio'))}x; "
          f"combine {f(m('mkernel_combine'), 3)} ms = {f(r.get('mkernel_combine_link_ratio'))}x (wire "
          f"{f(r.get('mkernel_combine_wire_link_ratio'))}x); op {f(m('mkernel_dispatch_gemm'), 3)} / counted "
          f"{f(m('mkernel_dispatch_gemm_counted'), 3)} ms (speed-up {f(r.get('dispatch_speedup_counted'), 3)}); "
          f"op-GEMM ratio {f(r.get('dispatch_link_ratio_wall'))}x / counted {f(r.get('dispatch_link_ratio_wall_counted'))}x; "
          f"exchange_gather alone {f((r.get('link_paths', {}).get('link_exchange_gather') or {}).get('gbs_per_rank'), 1)} GB/s; "
          f"rows equal {r.get('counted_rows_equal_default')} {r.get('dispatch_only_rows_equal_recv')}", flush=True)
if not rows:
    print("SUMMARY moe13: no rows (see the STEP lines and the bench output above)")
PY
echo "SUMMARY moe13 rc: plain=$rc_plain ce=$rc_ce in ${SECONDS} s"
