# Session 44, call B on main: the multi-rank differential fuzz under MPS (W = 2, 3, 4 ranks on one GPU): the fused
# ag_gemm / gemm_rs / gemm_ar, ring attention (forward and gradients) and the MoE dispatch + combine, seed 4401.
#   tar xJf .bp/core.tar.xz && MKERNEL_COMMIT=<hash> BP_MAX_STEPS=200 JOBS=.ci/jobs/s44b.sh REAL_OUT=$OUT OUT=/tmp/devout TOTAL=590 bash .ci/gpu-dev
P="python3 -m pytest -q -rfE --tb=short -p no:cacheprovider --durations=9"
export MKERNEL_FUZZ_SEED=4401
jx fuzz_fused 200 60 "MKERNEL_FUZZ_CASES=16 timeout 198 $P tests/gpu/test_fused_ops.py -k fuzz"
jx fuzz_ring 200 60 "MKERNEL_FUZZ_CASES=10 timeout 198 $P tests/gpu/test_ring_attention.py -k fuzz"
jx fuzz_moe 150 50 "MKERNEL_FUZZ_CASES=12 timeout 148 $P tests/gpu/test_moe_ranks.py -k fuzz"
