# Session 35, call A (prepared in session 34; main's csrc = the pack's but ring_attention.cpp: one step).
# (1) mkernel.nn.ContextParallelAttention on the GPU (written in session 34 on the CPU: host tests W = 2 / 4 pass).
# (2) The ring file's one-node defaults again (the split inside a node by default since session 34).
#   tar xJf .bp/core.tar.xz && MKERNEL_COMMIT=<hash> JOBS=.ci/jobs/s35a.sh REAL_OUT=$OUT OUT=/tmp/devout TOTAL=560 bash .ci/gpu-dev
P="python3 -m pytest -q -rfE --tb=short -p no:cacheprovider --durations=3"
jx layer_test 90 30 "timeout 88 $P tests/gpu/test_ring_attention.py -k 'context_parallel'"
jx ring_w 150 30 "timeout 148 $P tests/gpu/test_ring_attention.py -k 'matches_reference or world_eight'"
