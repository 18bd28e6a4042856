# Session 42, call E: the backward body A/B in one run (session 41's Python body vs mkernel::attention_backward_sdpa),
# three readings each at S = 4096 and 2048 causal (cuDNN's kernel).
for i in 1 2 3; do
jx host_c$i 40 10 "timeout 38 python3 benchmarks/attention_bwd_host.py --iters 40 --causal 1"
done
jx host_c2k 40 10 "timeout 38 python3 benchmarks/attention_bwd_host.py --iters 40 --causal 1 --s 2048 --b 8"
