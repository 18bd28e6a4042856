# Session 28 (no GPU; branch moe-fused = s27-int + the MoE fused dispatch): the dispatch's sends and the grouped GEMM
# in one persistent kernel (MKERNEL_MOE_FUSED=1, kernels/moe/moe_fused_api.h), never run. The tile scheduler and the
# hooked kernel changed (group_b_head, Work::tile, producer_wait_work): every GEMM translation unit rebuilds, hence
# the packed / hooks / dense suites after the fused ones. First a 60 s smoke at W=2 (a protocol bug hangs until the
# op timeout: the wait record names the flag — kWaitARows: a tile flag never set, kWaitPeerFlag: an arrival), then
# W=4/8, graph replay, a killed rank, the GEMM regressions, then the MPS table fused vs the default path.
# Predicted (MPS, W=2, seed 8k / 32k): fused >= the gather path's x compute alone (0.91x / 0.95x in session 25),
# i.e. the dispatch kernel's 0.18 / 0.46 ms mostly hidden; on two whole GPUs (s25x2 rows) 0.85x -> ~0.93x.
#   tar xJf .bp/core.tar.xz && MKERNEL_COMMIT=<hash> BP_PACK=1 BP_MAX_STEPS=400 JOBS=.ci/jobs/s28m.sh REAL_OUT=$OUT OUT=/tmp/devout TOTAL=590 bash .ci/gpu-dev
M=tests/gpu/test_moe_ranks.py
P="python3 -m pytest -q -rfE --tb=short -p no:cacheprovider --durations=3"
jx fused_smoke 70 40 "timeout 68 $P -x $M -k 'ranks_fused and 2'"
jx fused 120 60 "timeout 118 $P $M -k '(ranks_fused and (4 or 8)) or graph_replay_fused or fused_killed'"
jx grouped 40 25 "timeout 38 $P tests/gemm/test_gemm_grouped.py"
jx hooks 40 25 "timeout 38 $P -x tests/gemm/test_gemm_hooks.py"
jx moe_default 60 30 "timeout 58 $P $M -k 'cuda_ranks_match_reference and 2 or gathered_rows and 2 or overlapped_rows and 2'"
B="python3 benchmarks/bench_moe_ranks.py --world 2 --shapes seed_e256_top8_8k,seed_e256_top8_32k --iters 10"
jx table_fused 45 30 "MKERNEL_MOE_FUSED=1 timeout 43 $B"
jx table_gather 45 30 "MKERNEL_MOE_GATHER_A=1 timeout 43 $B"
