# Session 23, call A: builds the gathered-A grouped GEMM (gemm::Problem::a_row_map: the producer warp
# cp.asyncs each packed row where it lies, B by TMA as before) and the one-node dispatch without its
# expansion copy (recv_x null when no weight gradient is asked for). Tests: the packed grouped GEMM
# (unchanged path), the one-node MoE matrix at W=2/4/8 with the new bit-for-bit check of the gathered
# output against the expanded one, graph replay; then the issue-14 one-node table with the gather (default)
# and with MKERNEL_MOE_GATHER_A=0 (the expansion) in the same call.
#   tar xJf .bp/core.tar.xz && MKERNEL_COMMIT=<hash> BP_MAX_STEPS=200 BP_PACK=1 BP_XZ=1 JOBS=.ci/jobs/s23a.sh REAL_OUT=$OUT OUT=/tmp/devout TOTAL=585 bash .ci/gpu-dev
M=tests/gpu/test_moe_ranks.py
P="python3 -m pytest -q -rfE --tb=short -p no:cacheprovider --durations=5"
jx one_node 150 40 "timeout 148 $P $M -k 'cuda_ranks_match_reference or graph_replay'"
jx grouped 60 20 "timeout 58 $P tests/gemm/test_gemm_grouped.py"
B="python3 benchmarks/bench_moe_ranks.py --world 2 --shapes seed_e256_top8_8k,mixtral_e8_top2_8k,seed_e256_top8_32k --iters 20"
jx table 110 50 "timeout 108 $B"
jx table_expand 110 50 "MKERNEL_MOE_GATHER_A=0 timeout 108 $B"
