# Session 41, call B on branch s41-travel. s41a (H100, MPS): the fused ring backward (K/V on arrival + dK/dV travelling)
# passed its tests at W = 2 / 4 (dk / dv bit for bit vs the reduce-scatter paths, CUDA-graph replay) and ran 1.02-1.11x
# the same launch with the reduce-scatter, 0.99-1.07x the gathered launch + reduce-scatter (auto's path). Now travel
# works after the all-gather too and is the default on one node (MKERNEL_RING_BWD_TRAVEL=0 pins the reduce-scatter):
# auto = gather + travel. This call: the native ring tests, the ring tests (five paths bit for bit at W = 2 / 4, graph
# capture on arrival and gathered, killed rank before / during the backward, auto's rows), then the bench with the
# four native columns and auto, twice at W = 2. Prediction: native_gt / native_gather 1.02-1.08x, auto = native_gt.
#   tar xJf .bp/core.tar.xz && MKERNEL_DEV_BUILD=1 MKERNEL_COMMIT=<hash> JOBS=.ci/jobs/s41b.sh REAL_OUT=$OUT OUT=/tmp/devout TOTAL=575 bash .ci/gpu-dev
P="python3 -m pytest -q -rfE --tb=short -p no:cacheprovider --durations=5"
C=auto,native,native_scatter,native_gather,native_gt
jx tests_native 60 30 "timeout 58 $P tests/attention/test_attention_backward_native.py -k 'ring'"
jx ring_tests 200 80 "timeout 198 $P tests/gpu/test_ring_attention.py -k 'on_arrival or native_ring_backward or auto_native or (pinned_paths and native)'"
jx bench_w2 80 40 "timeout 78 python3 benchmarks/bench_ring_backward.py --world 2 --iters 10 --shapes mha_b4_h16,gqa_b1_h32_kv8,mha_b4_h16_s2048 --columns $C"
jx bench_w2b 80 40 "timeout 78 python3 benchmarks/bench_ring_backward.py --world 2 --iters 10 --shapes mha_b4_h16,gqa_b1_h32_kv8,mha_b4_h16_s2048 --columns $C"
jx bench_w4 80 30 "timeout 78 python3 benchmarks/bench_ring_backward.py --world 4 --iters 8 --shapes mha_b4_h16,mha_b4_h16_s2048 --columns $C"
