# Session 28 plan, call D (one H200, MPS; after A-C, with what is left of the session): the GEMM regressions the
# scheduler change touches (packed groups, hooks), then the MoE tables fused vs the gather path (moe-fused's
# prediction: fused >= the gather path's x compute alone, 0.91x / 0.95x at seed 8k / 32k in session 25), then
# the ring bench at the 4-chunk default and the gap script (s27b's timing part).
#   tar xJf .bp/core.tar.xz && MKERNEL_COMMIT=<hash> REUSE_BUILD=1 BP_MAX_STEPS=80 JOBS=.ci/jobs/s28d.sh REAL_OUT=$OUT OUT=/tmp/devout TOTAL=560 bash .ci/gpu-dev
P="python3 -m pytest -q -rfE --tb=short -p no:cacheprovider --durations=3"
jx grouped 40 25 "timeout 38 $P tests/gemm/test_gemm_grouped.py"
jx hooks 40 25 "timeout 38 $P -x tests/gemm/test_gemm_hooks.py"
B="python3 benchmarks/bench_moe_ranks.py --world 2 --shapes seed_e256_top8_8k,seed_e256_top8_32k --iters 10"
jx table_fused 45 30 "MKERNEL_MOE_FUSED=1 timeout 43 $B"
jx table_gather 45 30 "MKERNEL_MOE_GATHER_A=1 timeout 43 $B"
jx table_default 45 30 "timeout 43 $B"
jx bench4 60 35 "timeout 58 python3 benchmarks/bench_ring_attention.py --world 2 --iters 10 --timeout 45"
jx gap 40 25 "timeout 38 python3 benchmarks/ring_hooked_gap.py --iters 15"
