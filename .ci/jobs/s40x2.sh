# For the next multi-GPU loan (nvidia-h200-x2 / h100-x2, a GPU per rank, NVLink): the ring backward's K/V on arrival
# where it is for. Session 40 on one H100 under MPS: the native ring mode on arrival 0.93-1.035x the launch after the
# all-gather (median 0.99; the shards moved through the same HBM), so MKERNEL_RING_BWD_ARRIVAL=1 stayed opt-in; the
# native ring mode itself 1.04-1.48x the grouped cuDNN calls (auto's default at d = 128 from 2048-query shards).
# Over NVLink the all-gather of K/V (2 x b x s x h_kv x d x 2 bytes a peer) is the part arrival hides: predicted
# native / native_gather 1.02-1.08x at the MHA rows (W = 2), more with more GPUs. Then the arrival tests with a GPU
# per rank. bench_ring_backward picks a GPU per rank when there are >= W of them (no MPS).
#   tar xJf .bp/core.tar.xz && MKERNEL_COMMIT=<hash> JOBS=.ci/jobs/s40x2.sh REAL_OUT=$OUT OUT=/tmp/devout TOTAL=540 bash .ci/gpu-dev
mps_stop
P="python3 -m pytest -q -rfE --tb=short -p no:cacheprovider --durations=3"
jx ring_bwd_w2 120 60 "timeout 118 python3 benchmarks/bench_ring_backward.py --world 2 --iters 10 --shapes mha_b4_h16,gqa_b1_h32_kv8,mha_b4_h16_s2048"
mps_start
jx arrival_tests 120 60 "timeout 118 $P tests/gpu/test_ring_attention.py -k 'on_arrival or native_ring_backward'"
