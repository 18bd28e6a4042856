# Session 24, call A (nvidia-h200-x2: a GPU per rank). (1) The one-node MoE table with the gathered grouped GEMM
# on and off in the same call (predicted at the 32k row: 0.67x -> ~0.75-0.8x compute alone with the gather);
# (2) the gathered-rows test with the 4-pointer batches re-applied (54be757); (3) fused_diag's agfc1 + orders
# sections on whole GPUs: where ag_gemm fc1 / gemm_rs fc2 lose 10-19 % to the overlap ideal (s22 call D);
# (4) the gather micro-benchmark (256-row tiles: predicted 0.65-0.75x -> ~0.9x) if time is left.
#   tar xJf .bp/core.tar.xz && MKERNEL_COMMIT=<hash> BP_MAX_STEPS=200 JOBS=.ci/jobs/s24a.sh REAL_OUT=$OUT OUT=/tmp/devout TOTAL=590 bash .ci/gpu-dev
mps_stop
B="python3 benchmarks/bench_moe_ranks.py --world 2 --shapes seed_e256_top8_8k,mixtral_e8_top2_8k,seed_e256_top8_32k --iters 20"
jx table_gather 70 40 "MKERNEL_MOE_GATHER_A=1 timeout 68 $B"
jx table_expand 70 40 "MKERNEL_MOE_GATHER_A=0 timeout 68 $B"
jx gathered_test 60 30 "timeout 58 python3 -m pytest -q -rfE --tb=short -p no:cacheprovider tests/gpu/test_moe_ranks.py -k 'gathered_rows and 2'"
jx diag 150 60 "timeout 148 python3 benchmarks/fused_diag.py --world 2 --sections agfc1,orders --timeout 140"
jx micro 110 90 "OUT=\$LOGS CUDA_VISIBLE_DEVICES=0 timeout 108 bash benchmarks/micro/run_gemm_gather.sh"
