# Session 39, call A on branch bwd-mask-split (the checkout came back without .bp/: a cold dev build,
# MKERNEL_DEV_BUILD=1, BP_PACK=1 writes the pack for the next calls). Issue 13's causal backward gap: the
# probabilities' mask in its own loop copy (session 38's SASS: ptxas had if-converted it into every step).
# Prediction: causal +5-8 %, non-causal +1-3 % (GPU time, dqwarp). (1) A's rows at S = 8192, (2) the native
# backward's correctness on A (every kernel; causal, ragged keys, ring mode: both loop copies), (3) B = main's
# csrc (patch -R, incremental rebuild) and its rows, if the budget still holds them.
#   MKERNEL_DEV_BUILD=1 MKERNEL_COMMIT=<hash> BP_PACK=1 BP_XZ=3 JOBS=.ci/jobs/s39a.sh REAL_OUT=$OUT OUT=/tmp/devout TOTAL=575 bash .ci/gpu-dev
P="python3 -m pytest -q -rfE --tb=short -p no:cacheprovider --durations=3"
BENCH="python3 benchmarks/bench_attention.py --backward --seqs 8192 --iters 10 --native-kernels wgmma,wgmma_ws_dqwarp"
jx bench_a 100 60 "timeout 98 $BENCH"
jx tests_a 120 30 "timeout 118 $P tests/attention/test_attention_backward_native.py -k 'matches or ring_mode or tile_order'"
jx build_b 150 200 "patch -R -p1 < .ci/jobs/s39a_branch_csrc.patch && python3 -m pip install -v --no-build-isolation --no-deps -e . > \$LOGS/build_b.log 2>&1 && touch /tmp/b_ok"
[ -f /tmp/b_ok ] && jx bench_b 100 60 "timeout 98 $BENCH"
