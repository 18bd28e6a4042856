# Session 30, call D (cold, ~130 s of jobs: the budget's remainder): the native backward's first timing vs SDPA,
# then the gather path's table beside call A's fused one.
#   tar xJf .bp/core.tar.xz && MKERNEL_COMMIT=<hash> JOBS=.ci/jobs/s30d.sh REAL_OUT=$OUT OUT=/tmp/devout TOTAL=130 bash .ci/gpu-dev
B="python3 benchmarks/bench_moe_ranks.py --world 2 --shapes seed_e256_top8_8k,seed_e256_top8_32k --iters 10"
jx bwd_bench 75 45 "timeout 73 python3 benchmarks/bench_attention.py --backward --seqs 8192 --iters 10 --native-kernels wgmma,wgmma_bulk_dq,mma_sync,wgmma_ws"
jx table_gather 45 30 "MKERNEL_MOE_GATHER_A=1 timeout 43 $B"
