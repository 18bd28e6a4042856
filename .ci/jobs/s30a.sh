# Session 30, call A (cold, the build pack of 772beba in .bp/; the device came rarely this session, so this
# one call holds what the defaults' decisions need first): the MoE table fused vs gather (MPS W=2, seed 8k/32k),
# the native backward's first timing vs SDPA, the MoE auto test at W=2, the CE route's after-graph fix, the
# grouped GEMM / hooks regressions after the s28-int merge; ag_gemm's routes and the reduce ops if time is left.
#   tar xJf .bp/core.tar.xz && MKERNEL_COMMIT=<hash> BP_PACK=1 JOBS=.ci/jobs/s30a.sh REAL_OUT=$OUT OUT=/tmp/devout TOTAL=575 bash .ci/gpu-dev
P="python3 -m pytest -q -rfE --tb=short -p no:cacheprovider --durations=3"
F=tests/gpu/test_fused_ops.py
B="python3 benchmarks/bench_moe_ranks.py --world 2 --shapes seed_e256_top8_8k,seed_e256_top8_32k --iters 10"
jx table_fused 45 30 "MKERNEL_MOE_FUSED=1 timeout 43 $B"
jx table_gather 45 30 "MKERNEL_MOE_GATHER_A=1 timeout 43 $B"
jx bwd_bench 80 50 "timeout 78 python3 benchmarks/bench_attention.py --backward --seqs 8192 --iters 10 --native-kernels wgmma,wgmma_bulk_dq,mma_sync,wgmma_ws"
jx fused_auto 90 60 "timeout 88 $P tests/gpu/test_moe_ranks.py -k 'fused_auto and 2'"
jx ce_tests 40 20 "timeout 38 $P $F -k 'copy_engine and 2'"
jx grouped 40 20 "timeout 38 $P tests/gemm/test_gemm_grouped.py"
jx hooks 40 20 "timeout 38 $P -x tests/gemm/test_gemm_hooks.py"
jx ag_regress 150 40 "timeout 148 $P $F -k 'test_ag_gemm[2] or peer_tma[2] or default_route[2] or (test_reduce_ops and 2)'"
