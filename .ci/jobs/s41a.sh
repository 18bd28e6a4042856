# Session 41, call A on branch s41-travel: dK/dV travel with K/V in the fused ring backward. On arrival
# (MKERNEL_RING_BWD_ARRIVAL=1) each consumer warpgroup of the dQ-warp kernel stores its fp32 dK/dV partial straight
# into the source rank's receive area (peer memory, after the virtual K/V) and releases a flag there per 64 keys; the
# owner's sum kernel waits per tile for the W flags and sums the slots in rank order (bit for bit the reduce-scatter's
# result) into dk / dv. MKERNEL_RING_BWD_TRAVEL=0 keeps the reduce-scatter. First GPU run: the native backward's ring
# tests, the ring tests (four paths bit for bit at W = 2 / 4, the fused backward under CUDA-graph capture, a killed
# rank before and during the backward, auto's rows), then the bench's three native columns.
# Prediction (one GPU under MPS): travel / scatter 0.99-1.02x (the partials' round trip ~1 GB of HBM at W = 4).
#   tar xJf .bp/core.tar.xz && MKERNEL_DEV_BUILD=1 MKERNEL_COMMIT=<hash> JOBS=.ci/jobs/s41a.sh REAL_OUT=$OUT OUT=/tmp/devout TOTAL=575 bash .ci/gpu-dev
P="python3 -m pytest -q -rfE --tb=short -p no:cacheprovider --durations=5"
jx tests_native 60 30 "timeout 58 $P tests/attention/test_attention_backward_native.py -k 'ring'"
jx ring_tests 220 80 "timeout 218 $P tests/gpu/test_ring_attention.py -k 'on_arrival or native_ring_backward or auto_native'"
jx bench_w2 90 40 "timeout 88 python3 benchmarks/bench_ring_backward.py --world 2 --iters 10 --shapes mha_b4_h16,gqa_b1_h32_kv8 --columns native,native_scatter,native_gather"
jx bench_w4 70 30 "timeout 68 python3 benchmarks/bench_ring_backward.py --world 4 --iters 8 --shapes mha_b4_h16 --columns native,native_scatter,native_gather"
