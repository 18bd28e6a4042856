# Session 58, call 3 (a fresh machine; the dev pack from call 1 restored: MKERNEL_DEV_BUILD=1 BP_MAX_STEPS=100000).
# s57a answered s56a's question (default fused 2 of 4, long 1 of 4: the defaults stay) but its rounds showed why:
# under MPS the unfused path's per-round time is bimodal (5.9-9.5 ms: the two ranks' GEMMs overlap or stagger),
# while the single-call steady times put unfused (5.3-6.5 ms) at or below fused (6.4-8.7 ms). Question: which path is
# faster sustained at W = 2 Llama fc1 on one H100 under MPS? bench_fused.py times the op (as users get it), the
# forced fused kernel, the op's pinned unfused path and collective + GEMM interleaved in one run.
# Prediction: fused_kernel within +-10 % of unfused sustained (the copy is an on-HBM move at W = 2 on one GPU), so
# either verdict costs little; if the kernel is >= 10 % faster than unfused, the verdict's sign test is too strict
# for this bimodal noise and the test statistic needs a look (NOTES "Session 58").
P="python3 -m pytest -q -rfEx --tb=short -p no:cacheprovider --durations=5"
for part in ${PARTS:-bench tests}; do
  case $part in
  bench)
    jx bench 110 60 "timeout 105 python3 benchmarks/bench_fused.py --world 2 --only llama --ops ag_gemm --budget 60 --timeout 95" ;;
  tests)  # the fused ops' remaining not-big tests (s57a ran the reduce and store ones)
    jx tests 400 60 "$P tests/gpu/test_fused_ops.py -m 'not big' -k 'not test_reduce_ops and not verdict_cache and not verdict_bucket'" ;;
  esac
done
