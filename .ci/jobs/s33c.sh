# Session 33, call C (no csrc change since s33b; the pack restores with 0 steps): the own-shard-first split inside a
# node (own1) against the default beside it at more iterations, W = 2 and 4, and the W = 2 over 2 nodes GQA rows
# (0.98x with the split in call B: noise or a cost?) again.
#   tar xJf .bp/core.tar.xz && MKERNEL_COMMIT=<hash> JOBS=.ci/jobs/s33c.sh REAL_OUT=$OUT OUT=/tmp/devout TOTAL=220 bash .ci/gpu-dev
B="python3 benchmarks/bench_ring_attention.py --timeout 80"
jx w2 90 40 "timeout 88 $B --world 2 --iters 15 --variants own1"
jx w4 70 30 "timeout 68 $B --world 4 --iters 10 --variants own1 --shapes mha_b4_h16,gqa_b1_h32_kv8"
jx n2 60 30 "timeout 58 $B --nodes 2 --world 2 --iters 15 --variants xown0 --shapes gqa_b1_h32_kv8,mha_b4_h16"
