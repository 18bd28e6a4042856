# Session 31, call B (warm after s31a, REUSE_BUILD=1): the Mixtral-like MoE rows, the auto verdict at W=4, the ring
# bench and the hooked-ring gap, the ring backward per block on cuDNN (its tests and its bench vs FA2 / native), the CE route at W=4/8, the hooks regression.
#   MKERNEL_COMMIT=<hash> REUSE_BUILD=1 JOBS=.ci/jobs/s31b.sh REAL_OUT=$OUT OUT=/tmp/devout TOTAL=575 bash .ci/gpu-dev
P="python3 -m pytest -q -rfE --tb=short -p no:cacheprovider --durations=3"
F=tests/gpu/test_fused_ops.py
jx ring_grad 90 50 "timeout 88 $P tests/gpu/test_ring_attention.py -k 'matches_reference or ATTN_BWD'"
jx ring_bwd 90 50 "timeout 88 python3 benchmarks/bench_ring_backward.py --world 2 --iters 8 --timeout 80"
jx mixtral_fused 50 30 "MKERNEL_MOE_FUSED=1 timeout 48 python3 benchmarks/bench_moe_ranks.py --world 2 --shapes mixtral_e8_top2_8k --iters 10"
jx mixtral_gather 50 30 "MKERNEL_MOE_GATHER_A=1 timeout 48 python3 benchmarks/bench_moe_ranks.py --world 2 --shapes mixtral_e8_top2_8k --iters 10"
jx table_auto 60 40 "MKERNEL_MOE_FUSED=auto MKERNEL_FUSED_VERBOSE=1 timeout 58 python3 benchmarks/bench_moe_ranks.py --world 2 --shapes seed_e256_top8_8k,seed_e256_top8_32k --iters 10"
jx fused_auto4 100 60 "timeout 98 $P tests/gpu/test_moe_ranks.py -k 'fused_auto and 4'"
jx bench_ring 60 35 "timeout 58 python3 benchmarks/bench_ring_attention.py --world 2 --iters 10 --timeout 45"
jx gap 40 25 "timeout 38 python3 benchmarks/ring_hooked_gap.py --iters 15"
jx ce_tests4 50 25 "timeout 48 $P $F -k 'copy_engine and (4 or 8)'"
jx hooks 40 20 "timeout 38 $P -x tests/gemm/test_gemm_hooks.py"
