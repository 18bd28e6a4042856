# Session 29, call A (one H200, cold, no build pack: the checkout was recreated and .bp/ lost): the full build
# of s28-int with BP_PACK=1 (the pack comes back for later cold calls), then the first smokes, in priority order
# (jx skips what no longer fits): the fused MoE dispatch at W=2, the native backward's warp-specialized
# kernel (a pipeline bug hangs), the native backward's tests.
#   MKERNEL_COMMIT=<hash> BP_PACK=1 JOBS=.ci/jobs/s29a.sh REAL_OUT=$OUT OUT=/tmp/devout TOTAL=585 bash .ci/gpu-dev
P="python3 -m pytest -q -rfE --tb=short -p no:cacheprovider --durations=5"
N=tests/attention/test_attention_backward_native.py
jx moe_fused_smoke 70 30 "timeout 68 $P -x tests/gpu/test_moe_ranks.py -k 'ranks_fused and 2'"
jx ws_smoke 40 20 "timeout 38 $P $N -k 'wgmma_ws and case5'"
jx bwd_tests 110 40 "timeout 108 $P $N -k 'not wgmma_ws'"
