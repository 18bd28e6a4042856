# Session 32, call F (csrc changed: symmetric_group.h, ring_attention.cpp, ring_kv.cu, net_path.cpp; BP_PACK=1): the fused ring
# across nodes (a) leaves 2 SMs a rank to the GPU-direct emulation's copies (call D's stall at 62 + 4 CTAs on an
# H100) and (b) sends batch 0 first (the engine's first tiles' batch; was the last batch first: call E's rows took
# the ceiling plus the whole all-gather). Tests across nodes and the single-node ring's core cases, then the bench
# at W = 2 and 4 over 2 nodes with the old order pinned beside (xlast).
#   tar xJf .bp/core.tar.xz && MKERNEL_COMMIT=<hash> BP_PACK=1 JOBS=.ci/jobs/s32f.sh REAL_OUT=$OUT OUT=/tmp/devout TOTAL=420 bash .ci/gpu-dev
P="python3 -m pytest -q -rfE --tb=short -p no:cacheprovider --durations=3"
B="python3 benchmarks/bench_ring_attention.py --nodes 2 --iters 8 --timeout 70"
jx nodes_tests 110 60 "timeout 108 $P tests/gpu/test_ring_attention.py -k 'across or matches_reference'"
jx n2 80 40 "timeout 78 $B --world 2 --variants agpath,xlast,gather"
jx n4 80 40 "timeout 78 $B --world 4 --variants xlast,gather --shapes mha_b4_h16,gqa_b1_h32_kv8"
