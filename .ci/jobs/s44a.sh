# Session 44, call A on main: a full build (the swapped-operand GEMM variants too: the engine users get; the build pack
# refreshed), then the single-GPU differential fuzz (tests/fuzz: mkernel.attention forward / backward / lse gradient,
# gemm with auto and pinned options, gemm_grouped packed and padded) on 200 / 160 / 160 problems of seed 4401.
#   tar xJf .bp/core.tar.xz && MKERNEL_COMMIT=<hash> BP_MAX_STEPS=200 BP_PACK=1 BP_XZ=1 JOBS=.ci/jobs/s44a.sh REAL_OUT=$OUT OUT=/tmp/devout TOTAL=590 bash .ci/gpu-dev
mps_stop
P="python3 -m pytest -q -rfE --tb=short -p no:cacheprovider --durations=5 --maxfail=30"
jx fuzz_attn 170 40 "MKERNEL_FUZZ_SEED=4401 MKERNEL_FUZZ_CASES=200 timeout 168 $P tests/fuzz/test_fuzz_attention.py"
jx fuzz_gemm 170 40 "MKERNEL_FUZZ_SEED=4401 MKERNEL_FUZZ_CASES=160 timeout 168 $P tests/fuzz/test_fuzz_gemm.py"
