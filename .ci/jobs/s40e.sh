# Session 40, call E on branch s40-ring-bwd-arrival (final defaults). s40c (H100, MPS): the native ring backward on arrival passed its
# tests (W = 2 / 4, dk / dv bit for bit vs the gathered path) and timed 0.97-1.04x the gathered launch (neutral: on one
# GPU the all-gather is cheap) — but the native ring mode itself ran 1.07-1.32x auto's grouped cuDNN calls at W = 2
# and 1.20 / 1.23x at W = 4 (fwd + bwd). So auto now takes the native ring mode at d = 128, shards >= 4096
# (_ring_backward.native_ring_wins). This call: the ring tests on the auto rows, the arrival tests, the killed-rank
# test of the backward, the W = 2 matrix suite (smaller shards: the grouped calls), then the bench with the auto /
# torch / native / native_gather columns. s40d: arrival 0.93-1.01x the gathered launch, so arrival is now opt-in and auto
# runs the gathered launch. Prediction: auto = native_gather within +-3 %, auto/torch 1.04-1.3x.
#   tar xJf .bp/core.tar.xz && MKERNEL_DEV_BUILD=1 MKERNEL_COMMIT=<hash> JOBS=.ci/jobs/s40e.sh REAL_OUT=$OUT OUT=/tmp/devout TOTAL=575 bash .ci/gpu-dev
P="python3 -m pytest -q -rfE --tb=short -p no:cacheprovider --durations=5"
jx ring_tests 240 80 "timeout 238 $P tests/gpu/test_ring_attention.py -k 'on_arrival or auto_native or native_ring_backward or (pinned_paths and native) or matches_reference'"
jx bench_w2 100 40 "timeout 98 python3 benchmarks/bench_ring_backward.py --world 2 --iters 10"
jx bench_w4 80 30 "timeout 78 python3 benchmarks/bench_ring_backward.py --world 4 --iters 8 --shapes mha_b4_h16"
