# Session 31, call A (cold; .bp/ = the pack of main's csrc, nothing to rebuild): the measurements sessions 29-30
# could not run, most decision-bearing first — the native backward vs SDPA (issue 13's default), the MoE auto
# test at W=2 (issue 14), the gather path's table, the CE route vs the copy kernel (issue 12), the backward check.
#   tar xJf .bp/core.tar.xz && MKERNEL_COMMIT=<hash> JOBS=.ci/jobs/s31a.sh REAL_OUT=$OUT OUT=/tmp/devout TOTAL=575 bash .ci/gpu-dev
P="python3 -m pytest -q -rfE --tb=short -p no:cacheprovider --durations=3"
B="python3 benchmarks/bench_moe_ranks.py --world 2 --shapes seed_e256_top8_8k,seed_e256_top8_32k --iters 10"
jx bwd_bench 80 50 "timeout 78 python3 benchmarks/bench_attention.py --backward --seqs 8192 --iters 10 --native-kernels wgmma,wgmma_bulk_dq,mma_sync,wgmma_ws"
jx fused_auto 90 60 "timeout 88 $P tests/gpu/test_moe_ranks.py -k 'fused_auto and 2'"
jx table_gather 45 30 "MKERNEL_MOE_GATHER_A=1 timeout 43 $B"
jx ce_bench 100 60 "timeout 98 python3 benchmarks/multigpu.py --world 2 --only ag_gemm --quick --ag-routes copy,ce --iters 8 --timeout 90"
jx bwd_check 130 60 "timeout 128 python3 benchmarks/attention_bwd_check.py --seqs 4096,8192 --iters 10 --kernels wgmma,wgmma_bulk_dq,mma_sync,wgmma_ws --ring 2,4"
jx grouped 40 20 "timeout 38 $P tests/gemm/test_gemm_grouped.py"
