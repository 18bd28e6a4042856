# Session 35, call B (prepared in session 34 on branch ring-own-direct, not run): the whole mode reads the own shard
# in place (the engine's own TMA descriptors, Problem::k_own; the forwarding's step 0 from the inputs) instead of
# copying it into the virtual K/V first. Headers changed (attention_api.h, mainloop_fwd_sm90.hpp,
# kv_forward_hooks.cuh, attention_launch.cuh): every attention TU rebuilds — BP_PACK=1, and if the pack's step count
# passes BP_MAX_STEPS a full build (~520 s): then chain a second call with the new pack for the jobs.
# Local ptxas (nvcc 13, sm_90a, bf16 d128 128x128): producer spills KvFlagHooks 60/68 -> 92/84 bytes of stores,
# KvForwardHooks 172/180 -> 288/276 (the 24-register producer warpgroup); every attention TU compiles.
# Prediction: the copy phase (0.25 ms of mha s4096's 4.2 ms at W = 2 on an H100) goes: mha 1.03-1.06x, gqa ~1.01x,
# s12k ~1.02x the default-with-copy (owncopy column), unless the spills eat it.
#   tar xJf .bp/core.tar.xz && MKERNEL_COMMIT=<hash> BP_PACK=1 JOBS=.ci/jobs/s35b.sh REAL_OUT=$OUT OUT=/tmp/devout TOTAL=560 bash .ci/gpu-dev
P="python3 -m pytest -q -rfE --tb=short -p no:cacheprovider --durations=3"
B="python3 benchmarks/bench_ring_attention.py --timeout 80"
jx ring_tests 240 60 "timeout 238 $P tests/gpu/test_ring_attention.py -k 'matches_reference or world_eight or OWN_COPY or OWN_FIRST or alone or across_emulated'"
jx hooks_tests 80 30 "timeout 78 $P tests/attention/test_attention_hooks.py"
jx w2 80 30 "timeout 78 $B --world 2 --iters 20 --variants owncopy"
jx w4 80 30 "timeout 78 $B --world 4 --iters 20 --variants owncopy --shapes mha_b4_h16,gqa_b1_h32_kv8"
jx n2 70 30 "timeout 68 $B --nodes 2 --world 2 --iters 12 --variants owncopy"
