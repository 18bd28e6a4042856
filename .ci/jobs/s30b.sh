# Session 30, call B (warm after s29e, REUSE_BUILD=1): the rest of the measurements session 29 could not run —
# the CE route's bench against the copy kernel (W = 2 under MPS), the native backward's per-kernel check (ladders,
# vs cuDNN / FA2, ring mode at W = 2/4), the ring bench and the hooked-ring gap, the MoE fused table at the
# Mixtral-like shape, the CE route at W = 4 after its test fix.
#   MKERNEL_COMMIT=<hash> REUSE_BUILD=1 JOBS=.ci/jobs/s30b.sh REAL_OUT=$OUT OUT=/tmp/devout TOTAL=570 bash .ci/gpu-dev
# Order (session 30; s30a ran the W=2 auto test): the MoE auto verdict at W=4 and the fused rows first (the default's decision), then the backward
# check and the CE bench; the ring bench, gap and CE W=4/8 tests run if the call's budget is left.
P="python3 -m pytest -q -rfE --tb=short -p no:cacheprovider --durations=3"
F=tests/gpu/test_fused_ops.py
jx fused_auto4 100 60 "timeout 98 $P tests/gpu/test_moe_ranks.py -k 'fused_auto and 4'"
jx table_auto 60 40 "MKERNEL_MOE_FUSED=auto MKERNEL_FUSED_VERBOSE=1 timeout 58 python3 benchmarks/bench_moe_ranks.py --world 2 --shapes seed_e256_top8_8k,seed_e256_top8_32k --iters 10"
jx mixtral_fused 50 30 "MKERNEL_MOE_FUSED=1 timeout 48 python3 benchmarks/bench_moe_ranks.py --world 2 --shapes mixtral_e8_top2_8k --iters 10"
jx mixtral_gather 50 30 "MKERNEL_MOE_GATHER_A=1 timeout 48 python3 benchmarks/bench_moe_ranks.py --world 2 --shapes mixtral_e8_top2_8k --iters 10"
jx bwd_check 130 60 "timeout 128 python3 benchmarks/attention_bwd_check.py --seqs 4096,8192 --iters 10 --kernels wgmma,wgmma_bulk_dq,mma_sync,wgmma_ws --ring 2,4"
jx ce_bench 100 60 "timeout 98 python3 benchmarks/multigpu.py --world 2 --only ag_gemm --quick --ag-routes copy,ce --iters 8 --timeout 90"
jx bench_ring 60 35 "timeout 58 python3 benchmarks/bench_ring_attention.py --world 2 --iters 10 --timeout 45"
jx gap 40 25 "timeout 38 python3 benchmarks/ring_hooked_gap.py --iters 15"
jx ce_tests4 50 25 "timeout 48 $P $F -k 'copy_engine and (4 or 8)'"
