# Session 41, call G on main (final): the ring backward with K/V shards longer than the queries' (non-causal; the native
# ring mode takes one length, so those take the grouped calls — before, auto's native rows checked q alone and the op
# refused them), auto's native rows, the fused paths at W = 2 and the killed-rank backward on the final tree.
#   tar xJf .bp/core.tar.xz && MKERNEL_DEV_BUILD=1 MKERNEL_COMMIT=<hash> JOBS=.ci/jobs/s41g.sh REAL_OUT=$OUT OUT=/tmp/devout TOTAL=200 bash .ci/gpu-dev
P="python3 -m pytest -q -rfE --tb=short -p no:cacheprovider --durations=3"
jx ring_tests 120 40 "timeout 118 $P tests/gpu/test_ring_attention.py -k 'auto_native or (on_arrival and 2) or native_ring_backward'"
