# Session 40, call C on branch s40-ring-bwd-arrival: the native ring backward consumes the K/V shards as they arrive.
# mkernel::ring_attention_backward runs the forward ring's send kernel (whole mode, side stream) and ONE launch of the
# native backward's ring mode over the virtual K/V, each CTA waiting for its key chunks' arrival flags, sources in
# arrival order (own shard first); dK/dV fp32 partials reduce-scattered after, as before. First GPU run: the native
# backward tests (BwdProblem grew), the new ring test at W = 2 / 4 (gradients vs fp32 autograd, dk / dv bit for bit
# vs the gathered path), the pinned native grad case, then bench_ring_backward's native (on arrival) and
# native_gather columns side by side. Prediction (MPS, one GPU: the all-gather is ~1-3 % of the backward there):
# native 1.01-1.04x native_gather at W = 2, a little more at W = 4.
#   tar xJf .bp/core.tar.xz && MKERNEL_DEV_BUILD=1 MKERNEL_COMMIT=<hash> JOBS=.ci/jobs/s40c.sh REAL_OUT=$OUT OUT=/tmp/devout TOTAL=575 bash .ci/gpu-dev
P="python3 -m pytest -q -rfE --tb=short -p no:cacheprovider --durations=5"
jx tests_native 60 30 "timeout 58 $P tests/attention/test_attention_backward_native.py -k 'ring or matches'"
jx ring_arrival 150 60 "timeout 148 $P tests/gpu/test_ring_attention.py -k 'on_arrival or (pinned_paths and native)'"
jx bench_w2 90 40 "timeout 88 python3 benchmarks/bench_ring_backward.py --world 2 --iters 10"
jx bench_w4 70 30 "timeout 68 python3 benchmarks/bench_ring_backward.py --world 4 --iters 8 --shapes mha_b4_h16"
