# Session 23, call B: the gathered grouped GEMM as measured best in calls C-E (four producer warps,
# hand-addressed SW128 cp.async with the L2::128B hint, B by TMA) in the extension: the one-node MoE matrix at
# W=2/4/8 with the gathered output checked bit for bit against the expanded one (and T=0 ranks), graph replay;
# the issue-14 one-node table with the gather (default) and with MKERNEL_MOE_GATHER_A=0 in the same call;
# the packed grouped GEMM's tests.
#   tar xJf .bp/core.tar.xz && MKERNEL_COMMIT=<hash> BP_MAX_STEPS=200 BP_PACK=1 BP_XZ=1 JOBS=.ci/jobs/s23b.sh REAL_OUT=$OUT OUT=/tmp/devout TOTAL=590 bash .ci/gpu-dev
M=tests/gpu/test_moe_ranks.py
P="python3 -m pytest -q -rfE --tb=short -p no:cacheprovider --durations=5"
jx one_node 110 40 "timeout 108 $P $M -k 'cuda_ranks_match_reference or graph_replay'"
B="python3 benchmarks/bench_moe_ranks.py --world 2 --shapes seed_e256_top8_8k,mixtral_e8_top2_8k,seed_e256_top8_32k --iters 20"
jx table 60 40 "timeout 58 $B"
jx table_expand 60 40 "MKERNEL_MOE_GATHER_A=0 timeout 58 $B"
jx grouped 40 25 "timeout 38 $P tests/gemm/test_gemm_grouped.py"
