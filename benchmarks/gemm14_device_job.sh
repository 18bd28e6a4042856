#!/usr/bin/env bash
# gemm14's device job (issue 12 item 3, M = 333): correctness of swapped variants 22-23 (the
# structure of cuBLAS's 333-token kernels with 176-wide token tiles: swap_128x176_c1x2, 5 stages,
# the weight tile multicast to both token tiles; swap_64x176_c4x2, 7 stages, non-persistent), then
# the M = 333 decode rows with them against cuBLAS and today's picks (swap:1 at 8192^2, swap:10 at
# 3584x8192; graph replay: the decision figures), then the kernels' names / grids / registers /
# times. A variant whose tests failed is not timed. Needs the extension rebuilt (new .cu files).
# Run from the repo root; ~100 s.
set -u
PY=${PY:-python3}
T=tests/gemm/test_gemm_swap.py
echo "== gemm14 1/3: variants 22-23 tests (ragged shapes; decode shapes 333/317/177/169 x {8192,3584} x 8192, both dtypes)"
swaps=0,1,10
for v in 22 23; do
  timeout 35 $PY -m pytest -q --tb=short "$T::test_gemm_swap_variant_matches_reference[$v]" \
    "$T::test_gemm_swap_cublas_structure_at_decode_shapes" -k "reference or v$v" 2>&1
  rc=$?
  echo "== gemm14 rc variant $v=$rc"
  [ "$rc" = 0 ] && swaps=$swaps,$v
done
echo "== gemm14 2/3: M=333 decode rows, swaps $swaps (graph replay)"
MKERNEL_GEMM_SMALLM_S14=1 timeout 55 $PY benchmarks/bench_gemm.py --decode --lean --ms 333 \
  --shapes 8192x8192,3584x8192 --dtypes bf16,fp16 --swaps "$swaps" --graph-below-us 100
echo "== gemm14 rc bench333=$?"
echo "== gemm14 3/3: kernels cuBLAS and ours run at 333 tokens (bf16)"
names=benchmarks/results/gemm_kernel_names_gemm14_$(date +%Y%m%d-%H%M%S).json
timeout 25 $PY benchmarks/gemm_kernel_names.py --shapes 333x8192x8192,333x3584x8192 --dtypes bf16 \
  --swap "$swaps" --calls 20 --json "$names"
echo "== gemm14 rc names=$?"
[ -n "${OUT:-}" ] && [ -f "$names" ] && cp "$names" "$OUT"/
newest=$(ls -t benchmarks/results/gemm_decode_*.json 2>/dev/null | head -n 1)
[ -n "${OUT:-}" ] && [ -n "$newest" ] && cp "$newest" "$OUT"/ && echo "== gemm14 decode json $newest"
exit 0
