# Session 57 got no machine (twelve refused starts, ~1456 of 1800 s charged, then too little left), and its checkout lost
# .bp (the build pack), .venv and build/. So the next session's first call may be cold: a full build (~520-560 s
# with MAX_JOBS=16) does not leave room for these jobs in one call. Plan:
#   call 1: `BUILD_LIMIT_S=545 BP_PACK=1 BP_XZ=3` (.ci/gpu-dev cuts the build there and packs what ninja finished,
#           exit 3; a build that ends in time packs and runs the jobs). It also returns gpu-build.ninja: commit it
#           as .ci/gpu-build.ninja, so that .ci/local-pack can compile the CUDA objects on a checkout without a pack.
#   call 2: `BP_MAX_STEPS=100000 BP_PACK=1` restores the pack, finishes the build, writes the whole pack, runs this;
#           what its budget leaves out runs in a chained warm call (REUSE_BUILD=1, within the 30 s idle release).
#   Short of device time: MKERNEL_DEV_BUILD=1 (no swapped-operand GEMM variants, ~65 % of the build) fits the
#   build and the reduce job in one call; none of these jobs needs the swapped variants (M = 8192 rows).
# Order: first the session-56 code that never ran on a GPU (correctness before tuning), then s56a's question
# (prepared in session 55, this file replaces .ci/jobs/s56a.sh): does a longer first-call measurement keep the W = 2
# ag_gemm overlap reliably? s54b, s54c and s55a measured the Llama fc1 shape (M = 8192 gathered, N = 14336,
# K = 8192) from a fresh process three times: fused twice, unfused once (median 0.893). Four fresh measurements
# each (the verdict file removed before each run, GEMM plans kept): default (0.8 s of rounds, 50 ms samples) vs
# MKERNEL_FUSED_BUDGET_S=2.5 MKERNEL_FUSED_SAMPLE_MS=100. Host simulation (NOTES "Session 56"): the default keeps
# fused ~85 %, the longer ~98 %. Prediction: default fused in 2-3 of 4, longer in 4 of 4 (+1.5-2.5 s a first call).
# Decision rule (written before the run): the longer settings become the defaults (fused_verdict::Settings) iff
# they keep fused in 4 of 4 and the default in at most 3 of 4 ("runs fused" / "runs unfused" lines). Each run also
# shows session 56's store rule: an unfused verdict below 0.95 prints "not stored for the next process".
#   PARTS="reduce store v" (default) and V_RUNS="1 2 3 4" pick what runs, e.g. PARTS=v V_RUNS="3 4".
#   tar xJf .bp/core.tar.xz && MKERNEL_COMMIT=<hash> BUILD_LIMIT_S=545 BP_PACK=1 BP_XZ=3 JOBS=.ci/jobs/s57a.sh \
#     REAL_OUT=$OUT OUT=/tmp/devout TOTAL=585 TAIL_LINES=30 bash .ci/gpu-dev      (carry .bp, .whl)
P="python3 -m pytest -q -rfEx --tb=short -p no:cacheprovider --durations=5"
for part in ${PARTS:-reduce store v}; do
  case $part in
  reduce)  # fused_glue::run_kept_path (3d8777e): gemm_rs / gemm_ar one node and gemm_ar across (emulated) nodes.
    jx reduce 200 40 "timeout 198 $P tests/gpu/test_fused_ops.py tests/gpu/test_fused_nodes.py -k '(test_reduce_ops and not 8) or test_gemm_ar_across_nodes or (test_gemm_rs_across_nodes and not coalesced)'" ;;
  store)  # the store rule (fused_verdict::storable) and the shared adopt() path of bucket reuse / stored verdicts.
    jx store 200 40 "timeout 198 $P tests/gpu/test_fused_ops.py -k 'verdict_cache_across_processes or verdict_bucket_reuse'" ;;
  v)  # s56a's measurement (the header's decision rule).
    L="python3 -m mkernel launch --mps --timeout 90"
    F="benchmarks/fused_first_call.py --ops ag_gemm"
    E="env MKERNEL_CACHE_DIR=/tmp/fcv MKERNEL_FUSED_VERDICT_CACHE=1 MKERNEL_FUSED_VERBOSE=1"
    R="rm -f /tmp/fcv/fused_verdicts.json;"
    for i in ${V_RUNS:-1 2 3 4}; do
      jx v_default_$i 60 40 "$R timeout 58 $E $L --world 2 $F --label default$i; cat /tmp/fcv/fused_verdicts.json"
      jx v_long_$i 60 40 "$R timeout 58 $E MKERNEL_FUSED_BUDGET_S=2.5 MKERNEL_FUSED_SAMPLE_MS=100 $L --world 2 $F --label long$i; cat /tmp/fcv/fused_verdicts.json"
    done ;;
  esac
done
