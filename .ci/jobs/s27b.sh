# Session 27, call B (one H200; branch bwd-wgmma, after call A): s26a's part. The ring at 4 key chunks per shard
# (W = 2/4/8, bit for bit, the pinned paths incl. 16 chunks, the 128x144 hooked kernel and the ring backward on the
# native backward's ring mode (MKERNEL_ATTN_BWD=native, grad suite), a killed rank, across
# emulated nodes: session 25's wait defaults never ran there), the MoE suites (the token-send item as one device
# function, CombineArgs without the Phase fields), the single-process attention tests (hooks, compute-alone incl. the
# 128x144 hooked kernel), the ring bench under MPS at the new default, the gap script (ring_n144 predicted 4-7 %
# under ring_flagwait at the non-causal rows; ring_split +-2 %).
# Warm (within 30 s of call A): REUSE_BUILD=1; cold: carry call A's bp.part* in .bp/.
#   tar xJf .bp/core.tar.xz && MKERNEL_COMMIT=<hash> REUSE_BUILD=1 BP_MAX_STEPS=120 JOBS=.ci/jobs/s27b.sh REAL_OUT=$OUT OUT=/tmp/devout TOTAL=560 bash .ci/gpu-dev
R=tests/gpu/test_ring_attention.py
M=tests/gpu/test_moe_ranks.py
P="python3 -m pytest -q -rfE --tb=short -p no:cacheprovider --durations=5"
jx ring 200 90 "timeout 198 $P $R -k 'matches_reference or world_eight or bit_for_bit or pinned_paths or killed_rank_fails or fused_ring_across_emulated_nodes'"
jx moe 100 50 "timeout 98 $P $M -k 'overlapped or cuda_ranks_match_reference or graph_replay or w2n1'"
jx attn_tests 70 40 "timeout 68 $P tests/attention/test_attention_hooks.py tests/attention/test_ring_compute_alone.py"
jx bench4 60 35 "timeout 58 python3 benchmarks/bench_ring_attention.py --world 2 --iters 10 --timeout 45"
jx gap 40 25 "timeout 38 python3 benchmarks/ring_hooked_gap.py --iters 15"
