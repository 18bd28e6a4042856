# Session 55: the fused verdict cache across processes (csrc/fused_verdict_store.h, choose_path).
#   tar xJf .bp/core.tar.xz && MKERNEL_COMMIT=<hash> BP_MAX_STEPS=80 JOBS=.ci/jobs/s55a.sh \
#     REAL_OUT=$OUT OUT=/tmp/devout TOTAL=560 TAIL_LINES=30 bash .ci/gpu-dev      (carry .bp, .whl)
# Predictions: (1) test_verdict_cache_across_processes[2] passes: group 2 runs both ops' second bucket M on
# the stored verdict (no "measured" line, the same route as group 1), group 3 (ranks but 0 on an empty
# directory) measures again; test_verdict_bucket_reuse (the suite's refactor) and the plan cache tests pass.
# (2) fused_first_call W=2 at the Llama shapes: "fresh" first call 2.5-5 s per op (the GEMM tuner's warm-up +
# the paired rounds), "stored" < 0.3 s per op (no tuning, no rounds: allocation + one all-gather + the call),
# "plans-only" (verdict cache off, GEMM plans stored) 1-2.5 s (the rounds alone).
P="python3 -m pytest -q -rfEx --tb=short -p no:cacheprovider --durations=5"
L="python3 -m mkernel launch --mps --timeout 90"
F="benchmarks/fused_first_call.py"
jx store 200 40 "timeout 198 $P tests/gpu/test_fused_ops.py -k 'verdict_cache_across_processes or verdict_bucket_reuse' tests/gemm/test_gemm_plan_cache.py"
jx fc_fresh 95 12 "rm -rf /tmp/fc && timeout 93 env MKERNEL_CACHE_DIR=/tmp/fc MKERNEL_FUSED_VERDICT_CACHE=1 $L --world 2 $F --label fresh"
jx fc_stored 60 12 "timeout 58 env MKERNEL_CACHE_DIR=/tmp/fc MKERNEL_FUSED_VERDICT_CACHE=1 $L --world 2 $F --label stored"
jx fc_plans 80 12 "timeout 78 env MKERNEL_CACHE_DIR=/tmp/fc MKERNEL_FUSED_VERDICT_CACHE=0 $L --world 2 $F --label plans-only"
