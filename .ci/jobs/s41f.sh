# Session 41, call F on main (final tree): every one-node ring attention test (the forward matrix at W = 2 / 4 / 8, graphs,
# the pinned paths, other head dims, the layer, the compute-alone op, killed ranks, the backward's paths) after
# auto's native rows widened to 1024-query shards and d = 64 causal and dK/dV travelling became the default.
#   tar xJf .bp/core.tar.xz && MKERNEL_DEV_BUILD=1 MKERNEL_COMMIT=<hash> JOBS=.ci/jobs/s41f.sh REAL_OUT=$OUT OUT=/tmp/devout TOTAL=400 bash .ci/gpu-dev
P="python3 -m pytest -q -rfE --tb=short -p no:cacheprovider --durations=8"
jx ring_tests 300 120 "timeout 298 $P tests/gpu/test_ring_attention.py -k 'not across'"
