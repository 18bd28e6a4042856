# Session 30, call C (cold; .bp/ = call A's pack of e99930d, nothing to rebuild): the gather path's table beside
# call A's fused table (same session, same card kind), the native backward's first timing, the MoE auto test at
# W=2 (its fallback after the fused kernel lost), the grouped GEMM / hooks regressions. ~300 s of jobs.
#   tar xJf .bp/core.tar.xz && MKERNEL_COMMIT=<hash> JOBS=.ci/jobs/s30c.sh REAL_OUT=$OUT OUT=/tmp/devout TOTAL=320 bash .ci/gpu-dev
P="python3 -m pytest -q -rfE --tb=short -p no:cacheprovider --durations=3"
B="python3 benchmarks/bench_moe_ranks.py --world 2 --shapes seed_e256_top8_8k,seed_e256_top8_32k --iters 10"
jx table_gather 45 30 "MKERNEL_MOE_GATHER_A=1 timeout 43 $B"
jx bwd_bench 80 50 "timeout 78 python3 benchmarks/bench_attention.py --backward --seqs 8192 --iters 10 --native-kernels wgmma,wgmma_bulk_dq,mma_sync,wgmma_ws"
jx fused_auto 90 60 "timeout 88 $P tests/gpu/test_moe_ranks.py -k 'fused_auto and 2'"
jx grouped 40 20 "timeout 38 $P tests/gemm/test_gemm_grouped.py"
jx hooks 40 20 "timeout 38 $P -x tests/gemm/test_gemm_hooks.py"
