# Session 34, call C (main with the send-CTA rule: 2-4 CTAs, a sixteenth of the rank's SMs; csrc: ring_attention.cpp
# only, one step over the pack). (1) The ring tests across nodes (W = 2 / 4 / 8: the rule's 4 / 2 / 2 CTAs).
# (2) Inside a node the own-shard-first split (own1): W = 4 twice and W = 2 once, 20 iterations (the policy).
#   tar xJf .bp/core.tar.xz && MKERNEL_COMMIT=<hash> JOBS=.ci/jobs/s34c.sh REAL_OUT=$OUT OUT=/tmp/devout TOTAL=560 bash .ci/gpu-dev
P="python3 -m pytest -q -rfE --tb=short -p no:cacheprovider --durations=3"
B="python3 benchmarks/bench_ring_attention.py --timeout 80"
jx nodes_tests 150 60 "timeout 148 $P tests/gpu/test_ring_attention.py -k 'across'"
jx w4 100 30 "timeout 98 $B --world 4 --iters 20 --variants own1 --shapes mha_b4_h16,gqa_b1_h32_kv8"
jx w4b 100 30 "timeout 98 $B --world 4 --iters 20 --variants own1 --shapes mha_b4_h16,gqa_b1_h32_kv8"
jx w2 100 30 "timeout 98 $B --world 2 --iters 20 --variants own1"
jx n4 100 30 "timeout 98 $B --nodes 2 --world 4 --iters 12 --variants xn2,xrefill0 --shapes mha_b4_h16,gqa_b1_h32_kv8"
