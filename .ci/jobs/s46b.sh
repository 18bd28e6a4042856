# Session 46, call B (branch s46-local-gemm-engine; not run in session 46: the device time ran out). The fused
# ops' backward GEMMs (and the replicated column linear) through mkernel._local_gemm: torch.matmul, or the engine
# where torch's half GEMM is wrong on the process's share (s46a: 16 of 48 wrong at a third of an H100).
# Checks: the routing tests whole and at a third (auto must pick the engine there: the warning in the log), the
# MLP layers and compiled MLP at W = 2, 3 under MPS (gradients vs fp32), the fused-op fuzz at W = 3; the MoE
# exchange test that failed once in s46a, alone; the engine's cost for a weight gradient vs torch's (whole GPU).
#   tar xJf .bp/core.tar.xz && MKERNEL_COMMIT=<hash> BP_MAX_STEPS=200 JOBS=.ci/jobs/s46b.sh REAL_OUT=$OUT OUT=/tmp/devout TOTAL=420 bash .ci/gpu-dev
P="python3 -m pytest -q -rfEx --tb=short -p no:cacheprovider --durations=3"
jx local_full 40 15 "timeout 38 $P tests/ops/test_local_gemm.py"
jx local_third 40 15 "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=33 timeout 38 $P -o log_cli=true tests/ops/test_local_gemm.py"
jx mlp 120 40 "timeout 118 $P tests/gpu/test_fused_ops.py -k 'mlp_layers or mlp_compiled'"
jx exchange_alone 80 30 "timeout 70 $P -v tests/gpu/test_moe_ranks.py -k exchange_alone"  # -v: the names even if cut
jx fuzz_fused 120 40 "MKERNEL_FUZZ_CASES=10 timeout 118 $P tests/gpu/test_fused_ops.py -k fuzz"
jx wgrad_cost 40 15 "timeout 38 python3 .ci/jobs/s46_wgrad_cost.py"
jx killed_rank 100 60 "timeout 95 $P -v tests/gpu/test_moe_ranks.py -k killed_rank"  # s46a's last 3 not run
