# Session 48, call A (branch s48-resident-grid = main 97b1528 + the shared resident_grid helper):
# session 47's unrun job (.ci/jobs/s47a.sh: the replicated column linear on CUDA, the routing tests at a quarter,
# the exchange test with its count from the rank program), then the collectives and the MoE exchange whose grid
# sizing moved into comm/resident_grid.h.
#   tar xJf .bp/core.tar.xz && MKERNEL_COMMIT=<hash> BP_MAX_STEPS=200 JOBS=.ci/jobs/s48a.sh REAL_OUT=$OUT OUT=/tmp/devout TOTAL=420 bash .ci/gpu-dev
P="python3 -m pytest -q -rfEx --tb=short -p no:cacheprovider --durations=3"
jx local_full 40 15 "timeout 38 $P tests/ops/test_local_gemm.py"
jx local_quarter 40 15 "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=25 timeout 38 $P -o log_cli=true tests/ops/test_local_gemm.py"
jx exchange_alone 80 30 "timeout 70 $P -v tests/gpu/test_moe_ranks.py -k exchange_alone"
jx collectives 100 40 "timeout 95 $P tests/gpu/test_collectives.py -k 'match_reference or 2-2 or 4-2 or mismatched or killed'"
jx moe_ref 80 30 "timeout 75 $P tests/gpu/test_moe_ranks.py -k 'match_reference or across_emulated_nodes_substrate_path or fused_killed'"
# The attention backward body's host excess over the bare cuDNN op (session 43: 136 µs causal), part by part.
jx bwd_host 60 25 "timeout 55 python3 benchmarks/attention_bwd_host.py --pieces --iters 30"
