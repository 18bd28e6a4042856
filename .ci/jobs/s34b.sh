# Session 34, call B (main + the refill merged; the pack in .bp/ is call A's: nothing to rebuild but the bench).
# (1) Across 2 nodes the send kernel's CTAs with the refill on: 4 (default) vs 1 / 2 / 3, W = 2 and W = 4 (twice:
# MPS noise at W = 4). (2) MoE seed 8k under MPS W = 2, 40 iterations, twice (issue 14's noisy row).
#   tar xJf .bp/core.tar.xz && MKERNEL_COMMIT=<hash> JOBS=.ci/jobs/s34b.sh REAL_OUT=$OUT OUT=/tmp/devout TOTAL=560 bash .ci/gpu-dev
B="python3 benchmarks/bench_ring_attention.py --timeout 80"
jx n2 90 30 "timeout 88 $B --nodes 2 --world 2 --iters 15 --variants xn1,xn2,xn3"
jx n4 90 30 "timeout 88 $B --nodes 2 --world 4 --iters 12 --variants xn1,xn2,xn3"
jx n4b 90 30 "timeout 88 $B --nodes 2 --world 4 --iters 12 --variants xn2,xn3"
jx moe8k 80 30 "timeout 78 python3 benchmarks/bench_moe_ranks.py --world 2 --shapes seed_e256_top8_8k --iters 40"
jx moe8kb 80 30 "timeout 78 python3 benchmarks/bench_moe_ranks.py --world 2 --shapes seed_e256_top8_8k --iters 40"
