# Session 42, call B: the attention call's host cost by part (forward, autograd backward, the backward body, the
# kernel op alone, an empty autograd.grad), causal (cuDNN's kernel) and non-causal (the native kernel), twice each.
P="python3 -m pytest -q -rfE --tb=short -p no:cacheprovider --durations=3"
jx host_c 60 20 "timeout 58 python3 benchmarks/attention_bwd_host.py --iters 40 --causal 1"
jx host_nc 60 20 "timeout 58 python3 benchmarks/attention_bwd_host.py --iters 40 --causal 0"
jx host_c2 60 20 "timeout 58 python3 benchmarks/attention_bwd_host.py --iters 40 --causal 1 --s 2048 --b 8"
