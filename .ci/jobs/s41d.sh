# Session 41, call D on main (final): auto's native ring rows widened (d = 128 from 1024-query shards, d = 64 causal
# from 4096; s41c), dK/dV travelling by default on one node. The ring backward tests on the final tree (auto's rows,
# the five paths and graph capture at W = 2, the killed rank before / during the backward, the pinned native grad
# cases, the W = 2 matrix / graph / grad suites) and the demo at W = 2 on the GPU.
#   tar xJf .bp/core.tar.xz && MKERNEL_DEV_BUILD=1 MKERNEL_COMMIT=<hash> JOBS=.ci/jobs/s41d.sh REAL_OUT=$OUT OUT=/tmp/devout TOTAL=420 bash .ci/gpu-dev
P="python3 -m pytest -q -rfE --tb=short -p no:cacheprovider --durations=3"
jx ring_tests 200 60 "timeout 198 $P tests/gpu/test_ring_attention.py -k 'auto_native or (on_arrival and 2) or native_ring_backward or (pinned_paths and native) or (matches_reference and 2)'"
jx demo 80 40 "timeout 78 python3 -m mkernel demo --world 2 --require-all"
