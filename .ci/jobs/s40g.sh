# Session 40, call G on main (final): auto's native ring rows now start at 2048-query shards (s40f: 1.12-1.45x the
# grouped calls there); formatting since s40e. The ring backward tests on the final tree (auto's rows, arrival at
# W = 2, the killed rank, the pinned native grad cases) and the demo at W = 2 on the GPU.
#   tar xJf .bp/core.tar.xz && MKERNEL_DEV_BUILD=1 MKERNEL_COMMIT=<hash> JOBS=.ci/jobs/s40g.sh REAL_OUT=$OUT OUT=/tmp/devout TOTAL=300 bash .ci/gpu-dev
P="python3 -m pytest -q -rfE --tb=short -p no:cacheprovider --durations=3"
jx ring_tests 100 50 "timeout 98 $P tests/gpu/test_ring_attention.py -k 'auto_native or on_arrival and 2 or native_ring_backward or (pinned_paths and native)'"
jx demo 80 40 "timeout 78 python3 -m mkernel demo --world 2 --require-all"
