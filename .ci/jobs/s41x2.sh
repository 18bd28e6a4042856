# For the next multi-GPU loan (nvidia-h200-x2 / h100-x2, a GPU per rank, NVLink): the fused ring backward where it is
# for (replaces s40x2). Session 41 on one H100 under MPS: dK/dV travelling inside the launch 0.97-1.19x the
# reduce-scatter after it (the default on one node now), K/V on arrival on top of it 0.94-1.03x the gathered launch
# (opt-in: on one GPU the gather is cheap and four send kernels share the SMs). Over NVLink the all-gather of K/V
# (2 x b x s x h_kv x d x 2 bytes a peer) is the part arrival hides, and travel's stores cross the link during the
# kernel instead of after it: predicted native (arrival + travel) / native_gt (gathered + travel) 1.02-1.08x at the MHA
# rows (W = 2), native_gt / native_gather 1.03-1.10x. Then the ring backward's tests with a GPU per rank.
# bench_ring_backward picks a GPU per rank when there are >= W of them (no MPS).
#   tar xJf .bp/core.tar.xz && MKERNEL_COMMIT=<hash> JOBS=.ci/jobs/s41x2.sh REAL_OUT=$OUT OUT=/tmp/devout TOTAL=540 bash .ci/gpu-dev
mps_stop
P="python3 -m pytest -q -rfE --tb=short -p no:cacheprovider --durations=3"
C=auto,torch,native,native_scatter,native_gather,native_gt
jx ring_bwd_w2 120 60 "timeout 118 python3 benchmarks/bench_ring_backward.py --world 2 --iters 10 --shapes mha_b4_h16,gqa_b1_h32_kv8,mha_b4_h16_s2048,mha_b4_h16_s1024 --columns $C"
mps_start
jx ring_tests 150 60 "timeout 148 $P tests/gpu/test_ring_attention.py -k 'on_arrival or native_ring_backward or auto_native'"
