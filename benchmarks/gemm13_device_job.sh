#!/usr/bin/env bash
# gemm13's device job (issue 12 item 3, M = 333): correctness of swap_128x336_wide (variant 21)
# and of session 12's regrouped ticketed variants (17-20, never run), then the M = 333 decode rows
# with them (graph replay: the decision figures), cuBLAS's kernel at 333 tokens, and the
# M = 1 / 16 / 64 guard rows (default path, bf16). A variant whose tests failed (or hung) is not
# timed, so a fault cannot lose the rows. Run from the repo root; ~125 s.
set -u
PY=${PY:-python3}
T=tests/gemm/test_gemm_swap.py
echo "== gemm13 1/5: swap_128x336_wide tests (ragged shapes, decode shapes)"
timeout 45 $PY -m pytest -q --tb=short "$T::test_gemm_swap_variant_matches_reference[21]" \
  "$T::test_gemm_swap_ticketed_at_decode_shapes[21]"
wide=$?
echo "== gemm13 rc wide=$wide"
echo "== gemm13 2/5: regrouped ticketed variants 17-20 (s12's schedule after e82aca4), graph capture, auto"
timeout 40 $PY -m pytest -q --tb=short "$T::test_gemm_swap_variant_matches_reference[17]" \
  "$T::test_gemm_swap_variant_matches_reference[18]" "$T::test_gemm_swap_variant_matches_reference[19]" \
  "$T::test_gemm_swap_variant_matches_reference[20]" "$T::test_gemm_swap_ticketed_at_decode_shapes[17]" \
  "$T::test_gemm_swap_ticketed_at_decode_shapes[18]" "$T::test_gemm_swap_ticketed_at_decode_shapes[19]" \
  "$T::test_gemm_swap_ticketed_at_decode_shapes[20]"
tk=$?
echo "== gemm13 rc ticketed=$tk"
swaps=1,10
[ "$tk" = 0 ] && { export MKERNEL_GEMM_SMALLM_S12=1; swaps=$swaps,17,18,20; }
[ "$wide" = 0 ] && { export MKERNEL_GEMM_SMALLM_S13=1; swaps=$swaps,21; }
if [ "$tk" = 0 ] && [ "$wide" = 0 ]; then
  timeout 30 $PY -m pytest -q --tb=short "$T::test_gemm_swap_under_graph_capture" \
    "$T::test_auto_at_small_m_is_correct_reproducible_and_named"
  echo "== gemm13 rc graph+auto=$? (S12=${MKERNEL_GEMM_SMALLM_S12:-0} S13=${MKERNEL_GEMM_SMALLM_S13:-0})"
fi
echo "== gemm13 3/5: M=333 decode rows, swaps $swaps (S12=${MKERNEL_GEMM_SMALLM_S12:-0} S13=${MKERNEL_GEMM_SMALLM_S13:-0})"
timeout 45 $PY benchmarks/bench_gemm.py --decode --lean --ms 333 --shapes 8192x8192,3584x8192 \
  --dtypes bf16,fp16 --swaps "$swaps" --graph-below-us 100
echo "== gemm13 rc bench333=$?"
echo "== gemm13 4/5: kernels cuBLAS and ours run at 333 tokens (bf16)"
names=benchmarks/results/gemm_kernel_names_gemm13_$(date +%Y%m%d-%H%M%S).json
nsw=1,10; [ "$wide" = 0 ] && nsw=1,10,21
timeout 25 $PY benchmarks/gemm_kernel_names.py --shapes 333x8192x8192,333x3584x8192 --dtypes bf16 \
  --swap "$nsw" --calls 20 --json "$names"
echo "== gemm13 rc names=$?"
[ -n "${OUT:-}" ] && [ -f "$names" ] && cp "$names" "$OUT"/
echo "== gemm13 5/5: guard M=1,16,64 (default path: no knobs), bf16"
unset MKERNEL_GEMM_SMALLM_S12 MKERNEL_GEMM_SMALLM_S13
timeout 35 $PY benchmarks/bench_gemm.py --decode --lean --ms 1,16,64 --shapes 8192x8192,3584x8192 \
  --dtypes bf16 --swaps 6,7,15 --graph-below-us 100
echo "== gemm13 rc guard=$?"
