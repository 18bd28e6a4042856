#!/usr/bin/env bash
# gemm15's device job (issue 12 item 3, M = 333; NOTES "Small M, gemm15"): correctness of swapped
# variants 24-32 (168-wide token tiles: 333 tokens in 336, cuBLAS's tile, built with the Stage2D
# mainloop, two with TMA cache hints; and the 176-wide controls with their register-stored epilogue),
# then graph-replay times against cuBLAS and today's picks (swap:1, swap:10, swap:23) at M in
# {320, 333, 384} x weights {8192x8192, 3584x8192, 8192x3584} (bf16; fp16 at M = 333: the rule needs
# both dtypes), auto with
# MKERNEL_GEMM_SMALLM_S15=1, then the kernels' names / grids / times at 333 tokens, then one verdict
# line per shape and the rule's lines. A variant whose tests failed is not timed.
# Needs the extension built from this tree (new .cu files). Run from the repo root; ~120 s typical; stops itself by BUDGET_S (145).
# gemm14's 22 and 23 (tests passed in s14run1; 23 is a default candidate below 8192 weight rows) and
# swap:0 are timed too: each 168-wide variant beside its 176-wide sibling (S14="" leaves 22,23 out).
set -u
PY=${PY:-python3}
B=${BUDGET_S:-145}  # the job's own limit: each step's timeout is what is left of it
cap() { local left=$((B - SECONDS - $2)); [ "$left" -gt "$1" ] && left=$1; [ "$left" -lt 5 ] && left=5; echo $left; }
T=tests/gemm/test_gemm_swap.py
V="24 25 26 27 28 29 30 31 32"
LOG=$(mktemp /tmp/gemm15_tests.XXXXXX)
echo "== gemm15 1/4: tests of variants 24-32 (ragged shapes; decode shapes M 333/320/337/169 x {8192,3584}x8192 and 8192x3584, both dtypes, per-tile bound) + graph capture of every variant"
sel=("$T::test_gemm_swap_168_at_decode_shapes" "$T::test_gemm_swap_under_graph_capture")
for v in $V; do sel+=("$T::test_gemm_swap_variant_matches_reference[$v]"); done
timeout 70 $PY -m pytest -q --tb=line -rA -p no:cacheprovider "${sel[@]}" >"$LOG" 2>&1
rc=$?
grep -vE "^PASSED " "$LOG"  # failures, summary (the per-test PASSED lines are counted below)
echo "== gemm15 rc tests=$rc"
ok=""
for v in $V; do
  n=$(grep -cE "^PASSED .*(\[v$v-|reference\[$v\])" "$LOG")
  if [ "$n" != 7 ] && [ "$rc" != 0 ] && [ "$SECONDS" -lt 80 ]; then  # alone: a crash fails later tests too
    timeout 25 $PY -m pytest -q --tb=line -p no:cacheprovider "$T::test_gemm_swap_variant_matches_reference[$v]" \
      "$T::test_gemm_swap_168_at_decode_shapes" -k "reference or v$v" 2>&1
    [ $? = 0 ] && n=7
  fi
  echo "== gemm15 variant $v: $n of 7 tests passed"
  [ "$n" = 7 ] && ok=$ok${ok:+,}$v
done
echo "== gemm15 passed variants: ${ok:-none}"
S14=${S14-22,23}
swaps=0,1,5,10${S14:+,$S14}${ok:+,$ok}
touch "$LOG.mark"  # the bench's JSONs are the ones newer than this
newest() { find benchmarks/results -maxdepth 1 -name 'gemm_decode_*.json' -newer "$LOG.mark" -printf '%T@ %p\n' 2>/dev/null | sort -n | tail -n 1 | cut -d' ' -f2; }
echo "== gemm15 2/4: decode rows, swaps $swaps, MKERNEL_GEMM_SMALLM_S15=1 (graph replay: the decision figures)"
MKERNEL_GEMM_SMALLM_S15=1 timeout $(cap 70 30) $PY benchmarks/bench_gemm.py --decode --lean --ms 333,320,384 \
  --shapes 8192x8192,3584x8192,8192x3584 --dtypes bf16 --swaps "$swaps" --graph-below-us 100 --rounds 2
echo "== gemm15 rc bench_bf16=$?"
j1=$(newest)
MKERNEL_GEMM_SMALLM_S15=1 timeout $(cap 30 3) $PY benchmarks/bench_gemm.py --decode --lean --ms 333 \
  --shapes 8192x8192,3584x8192,8192x3584 --dtypes fp16 --swaps "$swaps" --graph-below-us 100 --rounds 2
echo "== gemm15 rc bench_fp16=$?"
j2=$(newest)
[ "$j2" = "$j1" ] && j2=""
names=benchmarks/results/gemm_kernel_names_gemm15_$(date +%Y%m%d-%H%M%S).json
if [ "$SECONDS" -lt $((B - 22)) ]; then
  echo "== gemm15 3/4: kernels cuBLAS and ours run at 333 tokens (bf16; auto with S15)"
  MKERNEL_GEMM_SMALLM_S15=1 timeout $(cap 20 2) $PY benchmarks/gemm_kernel_names.py \
    --shapes 333x8192x8192,333x3584x8192,333x8192x3584 --dtypes bf16 --swap "1,23${ok:+,$ok}" --calls 20 --json "$names"
  echo "== gemm15 rc names=$?"
else
  echo "== gemm15 3/4: skipped (${SECONDS} s used: the budget goes to the verdicts)"
fi
echo "== gemm15 4/4: verdicts (graph replay; rule in NOTES 'Small M, gemm15')"
$PY benchmarks/gemm15_verdict.py --passed "$ok" $j1 $j2
echo "== gemm15 decode json $j1 $j2"
if [ -n "${OUT:-}" ]; then
  for f in $j1 $j2 "$names"; do [ -f "$f" ] && cp "$f" "$OUT"/; done
fi
rm -f "$LOG" "$LOG.mark"
echo "== gemm15 done in ${SECONDS} s"
exit 0
