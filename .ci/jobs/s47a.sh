# Session 47, call B (branch s46-local-gemm-engine + the exchange test's count fix): the routing tests with the
# replicated column linear's new one, whole and at a quarter (auto must pick the engine: the warning in the log);
# the MoE exchange test alone, its count now from the rank program (s47 call A: every case right, count wrong).
#   tar xJf .bp/core.tar.xz && MKERNEL_COMMIT=<hash> BP_MAX_STEPS=200 JOBS=.ci/jobs/s47a.sh REAL_OUT=$OUT OUT=/tmp/devout TOTAL=200 bash .ci/gpu-dev
P="python3 -m pytest -q -rfEx --tb=short -p no:cacheprovider --durations=3"
jx local_full 40 15 "timeout 38 $P tests/ops/test_local_gemm.py"
jx local_quarter 40 15 "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=25 timeout 38 $P -o log_cli=true tests/ops/test_local_gemm.py"
jx exchange_alone 80 30 "timeout 70 $P -v tests/gpu/test_moe_ranks.py -k exchange_alone"
