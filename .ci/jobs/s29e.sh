# Session 29, call E (cold, the build pack of call A in .bp/): the CE route's tests after the after-graph case's
# fix (its reference used another case's weight), then the MoE table fused vs gather (MPS W=2).
#   tar xJf .bp/core.tar.xz && MKERNEL_COMMIT=<hash> JOBS=.ci/jobs/s29e.sh REAL_OUT=$OUT OUT=/tmp/devout TOTAL=250 bash .ci/gpu-dev
P="python3 -m pytest -q -rfE --tb=short -p no:cacheprovider --durations=3"
F=tests/gpu/test_fused_ops.py
B="python3 benchmarks/bench_moe_ranks.py --world 2 --shapes seed_e256_top8_8k,seed_e256_top8_32k --iters 10"
jx ce_tests 90 30 "timeout 88 $P $F -k 'copy_engine and (2 or 8)'"
jx table_fused 45 30 "MKERNEL_MOE_FUSED=1 timeout 43 $B"
jx table_gather 45 30 "MKERNEL_MOE_GATHER_A=1 timeout 43 $B"
jx ce_tests4 50 25 "timeout 48 $P $F -k 'copy_engine and 4'"
