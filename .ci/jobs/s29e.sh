# Session 29, call E (cold, the build pack of call A in .bp/): the CE route's tests after the after-graph case's
# fix (its reference used another case's weight), the regressions the s28-int changes could touch and calls A-D
# did not run (the grouped GEMM and hooks after the scheduler's group_b_head; ag_gemm's default / peer-TMA routes
# and the reduce ops after warp_copy and the gate's reset), then the MoE table fused vs gather (MPS W=2).
#   tar xJf .bp/core.tar.xz && MKERNEL_COMMIT=<hash> JOBS=.ci/jobs/s29e.sh REAL_OUT=$OUT OUT=/tmp/devout TOTAL=250 bash .ci/gpu-dev
P="python3 -m pytest -q -rfE --tb=short -p no:cacheprovider --durations=3"
F=tests/gpu/test_fused_ops.py
B="python3 benchmarks/bench_moe_ranks.py --world 2 --shapes seed_e256_top8_8k,seed_e256_top8_32k --iters 10"
jx ce_tests 40 20 "timeout 38 $P $F -k 'copy_engine and 2'"
jx grouped 40 20 "timeout 38 $P tests/gemm/test_gemm_grouped.py"
jx hooks 40 20 "timeout 38 $P -x tests/gemm/test_gemm_hooks.py"
jx table_fused 45 30 "MKERNEL_MOE_FUSED=1 timeout 43 $B"
jx table_gather 45 30 "MKERNEL_MOE_GATHER_A=1 timeout 43 $B"
jx bwd_bench 80 50 "timeout 78 python3 benchmarks/bench_attention.py --backward --seqs 8192 --iters 10 --native-kernels wgmma,wgmma_bulk_dq,mma_sync,wgmma_ws"
jx ag_regress 150 60 "timeout 148 $P $F -k 'test_ag_gemm[2] or peer_tma[2] or default_route[2] or (test_reduce_ops and 2)'"
