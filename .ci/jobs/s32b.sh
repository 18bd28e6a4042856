# Session 32, call B (branch s32-int = main + ring-own-copy + ring-bwd-groups; csrc changed: BP_PACK=1,
# attention_api.h: ~25 TUs rebuild). Ring tests first (W = 2/4/8, graphs, grads, a killed rank, the pinned
# paths), then the ring forward bench with the old own-copy path pinned beside (ownstream), then the ring
# backward bench (grouped vs per-block, column `blocks`).
#   tar xJf .bp/core.tar.xz && MKERNEL_COMMIT=<hash> BP_PACK=1 JOBS=.ci/jobs/s32b.sh REAL_OUT=$OUT OUT=/tmp/devout TOTAL=580 bash .ci/gpu-dev
P="python3 -m pytest -q -rfE --tb=short -p no:cacheprovider --durations=3"
jx ring_tests 200 90 "timeout 198 $P tests/gpu/test_ring_attention.py -k 'not across'"
jx bench_ring 90 60 "timeout 88 python3 benchmarks/bench_ring_attention.py --world 2 --iters 10 --timeout 80 --variants ownstream,base"
jx ring_bwd2 60 40 "timeout 58 python3 benchmarks/bench_ring_backward.py --world 2 --iters 8 --timeout 55"
jx bench_ring4 90 50 "timeout 88 python3 benchmarks/bench_ring_attention.py --world 4 --iters 8 --timeout 80 --variants ownstream --shapes mha_b4_h16,gqa_b1_h32_kv8"
jx ring_bwd4 60 40 "timeout 58 python3 benchmarks/bench_ring_backward.py --world 4 --iters 6 --timeout 55"
