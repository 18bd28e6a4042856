# Session 31, call G (cold; branch ring-bwd-groups): the ring backward's blocks grouped into at most three calls
# (keys concatenated): the ring grad tests at W = 2/4, the ring backward bench at W = 2 and 4.
#   tar xJf .bp/core.tar.xz && MKERNEL_COMMIT=<hash> JOBS=.ci/jobs/s31g.sh REAL_OUT=$OUT OUT=/tmp/devout TOTAL=220 bash .ci/gpu-dev
P="python3 -m pytest -q -rfE --tb=short -p no:cacheprovider --durations=3"
jx ring_grad 80 40 "timeout 78 $P tests/gpu/test_ring_attention.py -k 'matches_reference'"
jx ring_bwd2 50 30 "timeout 48 python3 benchmarks/bench_ring_backward.py --world 2 --iters 8 --timeout 45"
jx ring_bwd4 60 30 "timeout 58 python3 benchmarks/bench_ring_backward.py --world 4 --iters 6 --timeout 55"
