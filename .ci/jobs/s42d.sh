# Session 42, call D: mkernel.attention's backward on torch's kernels as one C++ op (mkernel::attention_backward_sdpa,
# cuDNN-or-FA2 decided inside with its own cached check): its tests, the ring's per-block and other-head-dim backward
# through it, then the host cost by part and the backward's wall time from an idle GPU against SDPA's own.
P="python3 -m pytest -q -rfE --tb=short -p no:cacheprovider --durations=3"
jx attn_tests 150 40 "timeout 148 $P tests/attention/test_attention_engine.py tests/attention/test_attention_backward_native.py -k 'grad or sdpa or choice or auto or native_rows or mode'"
jx ring_tests 150 40 "timeout 148 $P tests/gpu/test_ring_attention.py -k 'matches_reference or other_head_dims or layer'"
jx host_c 60 20 "timeout 58 python3 benchmarks/attention_bwd_host.py --iters 40 --causal 1"
jx host_nc 60 20 "timeout 58 python3 benchmarks/attention_bwd_host.py --iters 40 --causal 0"
jx bwd_bench 120 40 "timeout 118 python3 benchmarks/bench_attention.py --backward --seqs 2048,4096 --iters 10 --native-kernels wgmma"
