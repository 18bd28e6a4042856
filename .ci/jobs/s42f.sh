# Session 42, call F: issue 13's engine table at S = 2k-32k (d = 128, 32 heads, causal and not, b = 16384 / S, b >= 1)
# on an H100 in one process each: the forward against SDPA cuDNN / FA2, then forward + backward and the backward alone
# (wall from an idle GPU and GPU time) against SDPA cuDNN / FA2 with the native kernel's column. report.py renders both.
# ran: jx fwd 120 30 "timeout 118 python3 benchmarks/bench_attention.py --seqs 2048,4096,8192,16384,32768 --iters 20 --skip-alt"
jx bwd 260 40 "timeout 258 python3 benchmarks/bench_attention.py --backward --seqs 2048,4096,8192,16384,32768 --iters 10 --native-kernels wgmma,wgmma_ws_dqwarp"
jx fwd32c 80 20 "timeout 78 python3 benchmarks/bench_attention.py --seqs 16384,32768 --modes c --iters 20"
