# Session 42, call A on main (ec6f92f): the uneven-shard gradient fix and the travel cap on the GPU (session 41 wrote
# them after its last device call), then where the attention backward's host time goes (the profiler table of one
# call of ours vs SDPA's cuDNN backward, behind a busy GPU).
#   tar xJf .bp/core.tar.xz && MKERNEL_DEV_BUILD=1 MKERNEL_COMMIT=<hash> JOBS=.ci/jobs/s42a.sh REAL_OUT=$OUT OUT=/tmp/devout TOTAL=260 bash .ci/gpu-dev
P="python3 -m pytest -q -rfE --tb=short -p no:cacheprovider --durations=3"
jx ring_tests 130 40 "timeout 128 $P tests/gpu/test_ring_attention.py -k 'auto_native or (on_arrival and 2) or native_ring_backward'"
jx bwd_host 60 20 "timeout 58 python3 benchmarks/attention_bwd_host.py --iters 30"
jx bwd_host_nc 60 20 "timeout 58 python3 benchmarks/attention_bwd_host.py --iters 30 --causal 0"
