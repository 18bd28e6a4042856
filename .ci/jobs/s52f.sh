# Session 52, last call: the GPU tests that run the GEMM tuner, with its new warm-up (897042d) and plan key (599a2bb):
# the tuned plan cached and exact, tuning never stalls another shape's call, the plan file.
P="python3 -m pytest -q -rfEx --tb=short -p no:cacheprovider --durations=5"
jx tests 150 30 "timeout 148 $P tests/gemm/test_gemm_autotune.py tests/gemm/test_gemm_tuning_stalls.py tests/gemm/test_gemm_plan_cache.py"
