# Session 42, call C: the backward body's host cost step by step (choice, philox placeholder, stream-capture query,
# transposes, the cuDNN / native wrappers), causal and not.
jx host_c 60 20 "timeout 58 python3 benchmarks/attention_bwd_host.py --iters 40 --causal 1 --pieces"
jx host_nc 60 20 "timeout 58 python3 benchmarks/attention_bwd_host.py --iters 40 --causal 0 --pieces"
jx nproc 20 5 "nproc; uptime; python3 -c 'import sys; print(sys.version, sys.gettrace(), sys.getprofile())'; ps -eo pid,pcpu,comm --sort=-pcpu | head -15"
