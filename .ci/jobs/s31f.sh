# Session 31, call F (cold): the backward's host path trimmed (a cached philox placeholder, no materialized lse
# gradient): the engine's attention tests (CUDA), the host enqueue diagnostic, the backward bench, the ring grads.
#   tar xJf .bp/core.tar.xz && MKERNEL_COMMIT=<hash> JOBS=.ci/jobs/s31f.sh REAL_OUT=$OUT OUT=/tmp/devout TOTAL=260 bash .ci/gpu-dev
P="python3 -m pytest -q -rfE --tb=short -p no:cacheprovider --durations=3"
jx attn_tests 90 40 "timeout 88 $P tests/attention/test_attention_engine.py tests/attention/test_attention_cpu.py"
jx bwd_host 45 30 "timeout 43 python3 benchmarks/attention_bwd_host.py --iters 40"
jx bwd_bench 80 50 "timeout 78 python3 benchmarks/bench_attention.py --backward --seqs 4096,8192 --iters 10 --native-kernels wgmma"
jx ring_grad 50 30 "timeout 48 $P tests/gpu/test_ring_attention.py -k 'matches_reference and 2'"
