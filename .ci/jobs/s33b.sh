# Session 33, call B (csrc changed: the attention kernel glue, mainloop, scheduler, hooks, launch; ring_attention.cpp;
# BP_PACK=1): the whole mode's own-shard-first split (every tile's own-shard keys as a first item, claimed for all
# tiles before any peer key; the second item resumes the saved softmax state). Default across nodes; knob
# MKERNEL_RING_OWN_FIRST. Tests: the split pinned inside a node (bit for bit the ceiling, graphs), across nodes (on
# by default, and pinned off), the killed rank across nodes; then the bench across 2 nodes (W = 2, 4) with the split
# pinned off beside, and inside a node (W = 2) with it pinned on beside.
#   tar xJf .bp/core.tar.xz && MKERNEL_COMMIT=<hash> BP_PACK=1 JOBS=.ci/jobs/s33b.sh REAL_OUT=$OUT OUT=/tmp/devout TOTAL=500 bash .ci/gpu-dev
P="python3 -m pytest -q -rfE --tb=short -p no:cacheprovider --durations=3"
B="python3 benchmarks/bench_ring_attention.py --iters 8 --timeout 70"
jx own_tests 170 60 "timeout 168 $P tests/gpu/test_ring_attention.py -k 'OWN_FIRST or across or bit_for_bit'"
jx n2 80 40 "timeout 78 $B --nodes 2 --world 2 --variants xown0,gather"
jx n4 80 40 "timeout 78 $B --nodes 2 --world 4 --variants xown0,gather --shapes mha_b4_h16,gqa_b1_h32_kv8"
jx w2 90 40 "timeout 88 $B --world 2 --variants own1"
