# Session 23's job for the next nvidia-h200-x2 loan (a GPU per rank): does the gathered grouped GEMM
# (MKERNEL_MOE_GATHER_A=1: no expansion copy after the dispatch) pay where each rank has its own GPU? The one-node
# MoE table with the gather on and off in the same call (predicted at the 32k row: dispatch kernel 1.68 -> ~0.5 ms,
# GEMM +0-10 %, 0.67x -> ~0.75-0.8x compute alone), the gathered-rows test with a GPU per rank, then the
# micro-benchmark of the packed configs on GPU 0. Then session 22's fused-op rows (s22f) if time is left.
#   tar xJf .bp/core.tar.xz && MKERNEL_COMMIT=<hash> BP_MAX_STEPS=200 JOBS=.ci/jobs/s23x2.sh REAL_OUT=$OUT OUT=/tmp/devout TOTAL=585 bash .ci/gpu-dev
mps_stop
B="python3 benchmarks/bench_moe_ranks.py --world 2 --shapes seed_e256_top8_8k,mixtral_e8_top2_8k,seed_e256_top8_32k --iters 20"
jx table_gather 70 40 "MKERNEL_MOE_GATHER_A=1 timeout 68 $B"
jx table_expand 70 40 "MKERNEL_MOE_GATHER_A=0 timeout 68 $B"
jx gathered_test 60 30 "timeout 58 python3 -m pytest -q -rfE --tb=short -p no:cacheprovider tests/gpu/test_moe_ranks.py -k 'gathered_rows and 2'"
jx micro 110 90 "OUT=\$LOGS CUDA_VISIBLE_DEVICES=0 timeout 108 bash benchmarks/micro/run_gemm_gather.sh"
jx forced 120 60 "MKERNEL_FUSED=force timeout 118 python3 benchmarks/multigpu.py --world 2 --iters 10 --only ag_gemm,gemm_rs,gemm_ar --timeout 110"
