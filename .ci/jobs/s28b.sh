# Session 28 plan, call B (one H200, right after call A: REUSE_BUILD=1 within the 30 s the machine stays warm; cold:
# carry the same local pack). s27b's part (the ring at 4 key chunks W = 2/4/8 with the pinned paths, the 128x144
# hooked kernel and the native ring backward, a killed rank, across emulated nodes; the MoE suites the changed
# dispatch kernel touches; the single-process attention tests) plus the MoE fused dispatch at W = 4 / 8, its graph
# replay and a killed rank (MKERNEL_MOE_FUSED=1, kernels/moe/moe_fused_api.h). What to watch in the fused ones: a
# trap with kWaitARows (a tile flag never set: the side walk and the scheduler disagree, though
# tests/host/moe_fused_tiles_check.cpp says they agree) or kWaitPeerFlag at kArrive + s (a peer's sends never ended).
#   tar xJf .bp/core.tar.xz && MKERNEL_COMMIT=<hash> REUSE_BUILD=1 BP_MAX_STEPS=80 JOBS=.ci/jobs/s28b.sh REAL_OUT=$OUT OUT=/tmp/devout TOTAL=560 bash .ci/gpu-dev
R=tests/gpu/test_ring_attention.py
M=tests/gpu/test_moe_ranks.py
P="python3 -m pytest -q -rfE --tb=short -p no:cacheprovider --durations=5"
jx ring 200 90 "timeout 198 $P $R -k 'matches_reference or world_eight or bit_for_bit or pinned_paths or killed_rank_fails or fused_ring_across_emulated_nodes'"
jx moe 100 50 "timeout 98 $P $M -k 'overlapped or cuda_ranks_match_reference or graph_replay or w2n1'"
jx moe_fused 120 60 "timeout 118 $P $M -k '(ranks_fused and (4 or 8)) or graph_replay_fused or fused_killed'"
jx attn_tests 70 40 "timeout 68 $P tests/attention/test_attention_hooks.py tests/attention/test_ring_compute_alone.py"
