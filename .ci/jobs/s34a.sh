# Session 34, call A (prepared in session 33; csrc as session 33's main: the pack in .bp/ was built at 2af19ea, since
# then clang-format lines in two attention headers and ring_attention.cpp's workspace cap changed: BP_PACK=1).
# (1) Across 2 nodes, W = 4: 2 send CTAs instead of 4 (the engine on 29 of 33 SMs instead of 27). (2) Inside a node,
# the own-shard-first split (own1) at W = 4 again (session 33's run: mha 1.08-1.11x, GQA 0.78-0.89x amid MPS noise),
# and W = 2 again. (3) The across-nodes tests with the workspace cap.
#   tar xJf .bp/core.tar.xz && MKERNEL_COMMIT=<hash> BP_PACK=1 JOBS=.ci/jobs/s34a.sh REAL_OUT=$OUT OUT=/tmp/devout TOTAL=420 bash .ci/gpu-dev
P="python3 -m pytest -q -rfE --tb=short -p no:cacheprovider --durations=3"
B="python3 benchmarks/bench_ring_attention.py --timeout 80"
jx nodes_tests 110 60 "timeout 108 $P tests/gpu/test_ring_attention.py -k 'across or OWN_FIRST'"
jx n4 70 30 "timeout 68 $B --nodes 2 --world 4 --iters 10 --variants xn2,xown0,gather --shapes mha_b4_h16,gqa_b1_h32_kv8"
jx w4 70 30 "timeout 68 $B --world 4 --iters 12 --variants own1 --shapes mha_b4_h16,gqa_b1_h32_kv8"
jx w2 80 30 "timeout 78 $B --world 2 --iters 15 --variants own1"
