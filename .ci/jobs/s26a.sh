# Session 26, call A (one H200; branch s26-pending): the whole mode's default of 4 key chunks per shard (session 25
# call E: the hooked launch 5-13 % faster in the ceiling, the fused ring under MPS within +-1.6 %). The ring tests
# at the new default (W = 2/4/8, graphs, gradients, the pinned paths, a killed rank), the old 16 pinned, the gap
# script, and the bench under MPS at 4. The branch also has the MoE dispatch's token-send item as one
# device function (the layout and send launches shared a copy) and CombineArgs without the Phase fields a text
# replace had copied into it: the MoE tests at the end. And the opt-in 128x144 hooked kernel
# (MKERNEL_RING_BLOCK_N=144: flags by keys, the send kernel): its compute-alone and ring tests, the gap script's
# ring_n144 (predicted 4-7 % under ring_flagwait at the non-causal rows, the plain 128x144 kernel's lead) and
# ring_split (the causal split loops, s10run1 not faster; now that the waits are cheap: +-2 %). Merge when green.
#   tar xJf .bp/core.tar.xz && MKERNEL_COMMIT=<hash> BP_MAX_STEPS=60 JOBS=.ci/jobs/s26a.sh REAL_OUT=$OUT OUT=/tmp/devout TOTAL=595 bash .ci/gpu-dev
R=tests/gpu/test_ring_attention.py
M=tests/gpu/test_moe_ranks.py
P="python3 -m pytest -q -rfE --tb=short -p no:cacheprovider --durations=5"
jx attn_tests 70 40 "timeout 68 $P tests/attention/test_attention_hooks.py tests/attention/test_ring_compute_alone.py"
jx ring 190 90 "timeout 148 $P $R -k 'matches_reference or world_eight or bit_for_bit or pinned_paths or killed_rank_fails or fused_ring_across_emulated_nodes'"
jx gap 40 25 "timeout 38 python3 benchmarks/ring_hooked_gap.py --iters 15"
jx moe 90 50 "timeout 88 $P $M -k 'overlapped or cuda_ranks_match_reference or graph_replay or w2n1'"
jx bench4 50 35 "timeout 48 python3 benchmarks/bench_ring_attention.py --world 2 --iters 10 --timeout 45"
