# Session 31, call C (warm after s31b, REUSE_BUILD=1): the ring backward bench after its fix, the hooks regression
# with room.
P="python3 -m pytest -q -rfE --tb=short -p no:cacheprovider --durations=3"
jx ring_bwd 120 50 "timeout 118 python3 benchmarks/bench_ring_backward.py --world 2 --iters 8 --timeout 110"
jx hooks 120 20 "timeout 118 $P -x tests/gemm/test_gemm_hooks.py"
