# Session 25, call A (one H200, MPS): the overlapped MoE dispatch (branch moe-overlap) first run. Correctness: the
# overlapped suites at W=2/4/8 + graph replay; the packed grouped GEMM and the engine hooks (the tile scheduler's
# group_begin changed every GEMM); then the MPS table overlap vs gather alone. BP_PACK=1: a pack of this build.
#   tar xJf .bp/core.tar.xz && MKERNEL_COMMIT=<hash> BP_PACK=1 BP_MAX_STEPS=400 JOBS=.ci/jobs/s25a.sh REAL_OUT=$OUT OUT=/tmp/devout TOTAL=590 bash .ci/gpu-dev
M=tests/gpu/test_moe_ranks.py
P="python3 -m pytest -q -rfE --tb=short -p no:cacheprovider --durations=3"
jx overlap 90 40 "timeout 88 $P $M -k 'overlapped'"
jx grouped 40 25 "timeout 38 $P tests/gemm/test_gemm_grouped.py"
jx hooks 40 25 "timeout 38 $P -x tests/gemm/test_gemm_hooks.py"
B="python3 benchmarks/bench_moe_ranks.py --world 2 --shapes seed_e256_top8_8k,seed_e256_top8_32k --iters 10"
jx table_overlap 45 30 "MKERNEL_MOE_GATHER_A=1 MKERNEL_MOE_OVERLAP=1 timeout 43 $B"
jx table_gather 45 30 "MKERNEL_MOE_GATHER_A=1 timeout 43 $B"
jx one_node 60 30 "timeout 58 $P $M -k 'graph_replay or w2n1'"
