# Session 44, call B on main: the gemm refusal fix (s44a's one fuzz failure: splits > 1 on ping_128x128_c1x2 was a
# launch failure), the bad-input mutation fuzz (gemm's messages now name a / b, not x / w), the gemm fuzz again on a second seed with the refusals listed (-rx), then the multi-rank
# differential fuzz under MPS (W = 2, 3, 4 ranks on one GPU): the fused ag_gemm / gemm_rs / gemm_ar, ring attention
# (forward and gradients) and the MoE dispatch + combine, seed 4401.
#   tar xJf .bp/core.tar.xz && MKERNEL_COMMIT=<hash> BP_MAX_STEPS=200 JOBS=.ci/jobs/s44b.sh REAL_OUT=$OUT OUT=/tmp/devout TOTAL=590 bash .ci/gpu-dev
P="python3 -m pytest -q -rfEx --tb=short -p no:cacheprovider --durations=5"
jx splitk 60 20 "timeout 58 $P tests/gemm/test_gemm_splitk.py -k rejected"
jx fuzz_bad 60 20 "MKERNEL_FUZZ_SEED=4401 MKERNEL_FUZZ_CASES=150 timeout 58 $P tests/fuzz/test_fuzz_bad_inputs.py tests/gpu/test_aligned_inputs.py"
export MKERNEL_FUZZ_SEED=4401
jx fuzz_fused 150 60 "MKERNEL_FUZZ_CASES=14 timeout 148 $P tests/gpu/test_fused_ops.py -k fuzz"
jx fuzz_ring 170 60 "MKERNEL_FUZZ_CASES=8 timeout 168 $P tests/gpu/test_ring_attention.py -k fuzz"
jx fuzz_moe 120 40 "MKERNEL_FUZZ_CASES=10 timeout 118 $P tests/gpu/test_moe_ranks.py -k fuzz"
jx fuzz_gemm2 100 40 "MKERNEL_FUZZ_SEED=4402 MKERNEL_FUZZ_CASES=100 timeout 98 $P --maxfail=20 tests/fuzz/test_fuzz_gemm.py"
jx fuzz_attn2 60 30 "MKERNEL_FUZZ_SEED=4402 MKERNEL_FUZZ_CASES=150 timeout 58 $P --maxfail=20 tests/fuzz/test_fuzz_attention.py"
