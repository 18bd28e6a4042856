# Session 44, call C on main: s44b's findings fixed — gemm_grouped's a / b at an offset start (a TMA descriptor
# failure, an illegal instruction) now a ValueError; offs / counts checked on the device (a message naming the entry,
# then a trap, in a child); the bad-input fuzz again. The MoE fuzz at W = 3 / 4 again with its new diagnosis (which
# piece is off: the received rows or the gradient reaching the expert outputs) for the capacity-drop gradient miss.
#   tar xJf .bp/core.tar.xz && MKERNEL_COMMIT=<hash> BP_MAX_STEPS=200 JOBS=.ci/jobs/s44c.sh REAL_OUT=$OUT OUT=/tmp/devout TOTAL=330 bash .ci/gpu-dev
P="python3 -m pytest -q -rfEx --tb=short -p no:cacheprovider --durations=5"
mps_stop
jx bounds 80 30 "timeout 78 $P tests/gemm/test_gemm_grouped.py"
jx fuzz_bad 60 20 "MKERNEL_FUZZ_SEED=4401 MKERNEL_FUZZ_CASES=150 timeout 58 $P tests/fuzz/test_fuzz_bad_inputs.py tests/gpu/test_aligned_inputs.py"
mps_start
jx fuzz_moe 120 40 "MKERNEL_FUZZ_SEED=4401 MKERNEL_FUZZ_CASES=10 timeout 118 $P tests/gpu/test_moe_ranks.py -k 'fuzz and not 2'"
