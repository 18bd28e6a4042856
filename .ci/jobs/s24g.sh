# Session 24, call H (one H200, MPS): the overlapped MoE dispatch (MKERNEL_MOE_OVERLAP=1: layout launch, the sends on
# a side stream of 16 CTAs beside the grouped GEMM over this rank's own rows, then the peers' rows; gemm::Problem::
# group_begin row segments). Correctness first: the matrix/repeat suites bit for bit against the expanded path at
# W=2/4/8, graph replay; the default paths' tests and the packed grouped GEMM's (the scheduler changed); then the
# MPS table with the overlap against the gather alone if time is left.
#   tar xJf .bp/core.tar.xz && MKERNEL_COMMIT=<hash> BP_MAX_STEPS=200 JOBS=.ci/jobs/s24g.sh REAL_OUT=$OUT OUT=/tmp/devout TOTAL=400 bash .ci/gpu-dev
M=tests/gpu/test_moe_ranks.py
P="python3 -m pytest -q -rfE --tb=short -p no:cacheprovider --durations=3"
jx overlap 90 40 "timeout 88 $P $M -k 'overlapped'"
jx grouped 40 25 "timeout 38 $P tests/gemm/test_gemm_grouped.py"
B="python3 benchmarks/bench_moe_ranks.py --world 2 --shapes seed_e256_top8_8k,seed_e256_top8_32k --iters 10"
jx table_overlap 40 30 "MKERNEL_MOE_GATHER_A=1 MKERNEL_MOE_OVERLAP=1 timeout 38 $B"
jx table_gather 40 30 "MKERNEL_MOE_GATHER_A=1 timeout 38 $B"
