# Session 32, call C (main, no csrc change: the pack restores with nothing to rebuild): ring attention across
# emulated nodes with today's defaults (GPU-direct emulation, fused nodes path, 4 chunks) — its only bench
# reading is session 11's (before the GPU-direct default): tests first, then the bench at W = 2 and 4 over 2
# nodes, the link emulated at 50 GB/s.
#   tar xJf .bp/core.tar.xz && MKERNEL_COMMIT=<hash> JOBS=.ci/jobs/s32c.sh REAL_OUT=$OUT OUT=/tmp/devout TOTAL=560 bash .ci/gpu-dev
P="python3 -m pytest -q -rfE --tb=short -p no:cacheprovider --durations=3"
jx ring_nodes_tests 150 60 "timeout 148 $P tests/gpu/test_ring_attention.py -k 'across'"
jx ring_nodes2 150 60 "timeout 148 python3 benchmarks/bench_ring_attention.py --world 2 --nodes 2 --iters 8 --timeout 140"
jx ring_nodes4 150 60 "timeout 148 python3 benchmarks/bench_ring_attention.py --world 4 --nodes 2 --iters 6 --timeout 140 --shapes mha_b4_h16,gqa_b1_h32_kv8"
