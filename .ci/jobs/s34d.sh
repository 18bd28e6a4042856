# Session 34, call D (main: the split inside a node by default for shards <= 8192 keys; csrc: ring_attention.cpp
# only). (1) The whole ring test file (the default inside a node is now the split; its pinned-off case). (2) W = 2 /
# W = 4 the new default beside the split pinned off (xown0).
#   tar xJf .bp/core.tar.xz && MKERNEL_COMMIT=<hash> JOBS=.ci/jobs/s34d.sh REAL_OUT=$OUT OUT=/tmp/devout TOTAL=560 bash .ci/gpu-dev
P="python3 -m pytest -q -rfE --tb=short -p no:cacheprovider --durations=5"
B="python3 benchmarks/bench_ring_attention.py --timeout 80"
jx ring_tests 330 60 "timeout 328 $P tests/gpu/test_ring_attention.py"
jx w2 80 30 "timeout 78 $B --world 2 --iters 20 --variants xown0"
jx w4 80 30 "timeout 78 $B --world 4 --iters 20 --variants xown0 --shapes mha_b4_h16,gqa_b1_h32_kv8"
