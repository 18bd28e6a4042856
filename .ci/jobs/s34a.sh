# Session 34, call A (prepared in session 33 on branch ring-refill, not run; csrc changed since the pack in .bp/ (built
# at 2af19ea): attention_launch.cuh / attention_api.h (the split's flags zeroed by the caller), two clang-format
# lines, ring_attention.cpp (the refill, the workspace cap): BP_PACK=1, expect a full build if > 40 steps — then
# chain the next call within 30 s with the new pack).
# (1) Tests across nodes: the refill (default on the branch) and the split, each pinned off too; the split inside a
# node. (2) Across 2 nodes W = 2 / 4: the refill pinned off beside (xrefill0); W = 4 also 2 send CTAs (xn2).
# (3) Inside a node the own-shard-first split (own1) at W = 4 and W = 2 again.
#   tar xJf .bp/core.tar.xz && MKERNEL_COMMIT=<hash> BP_PACK=1 JOBS=.ci/jobs/s34a.sh REAL_OUT=$OUT OUT=/tmp/devout TOTAL=560 bash .ci/gpu-dev
P="python3 -m pytest -q -rfE --tb=short -p no:cacheprovider --durations=3"
B="python3 benchmarks/bench_ring_attention.py --timeout 80"
jx nodes_tests 150 60 "timeout 148 $P tests/gpu/test_ring_attention.py -k 'across or OWN_FIRST'"
jx n2 70 30 "timeout 68 $B --nodes 2 --world 2 --iters 12 --variants xrefill0,xown0,gather"
jx n4 70 30 "timeout 68 $B --nodes 2 --world 4 --iters 10 --variants xrefill0,xn2,gather --shapes mha_b4_h16,gqa_b1_h32_kv8"
jx w4 70 30 "timeout 68 $B --world 4 --iters 12 --variants own1 --shapes mha_b4_h16,gqa_b1_h32_kv8"
jx w2 80 30 "timeout 78 $B --world 2 --iters 15 --variants own1"
