# Session 32, call D (main, warm or pack): call C's W = 2 over 2 nodes bench failed (rank 0's GPU-direct copy
# "not done on the GPU" in the second fused call, after the all-gather path's candidate; W = 4 over 2 nodes and the
# across-nodes tests passed). Is it reproducible, and what moves it: the default again (mha only), the engine's
# grid smaller (room for a copy kernel: the SM-starvation reading), the host-staged link (no copier).
B="python3 benchmarks/bench_ring_attention.py --world 2 --nodes 2 --iters 8 --timeout 70"
jx d_default 80 40 "timeout 78 $B --shapes mha_b4_h16 --variants xnodes,gather"
jx d_grid48 80 40 "MKERNEL_RING_GRID=48 timeout 78 $B --shapes mha_b4_h16 --variants xnodes,gather"
jx d_nogdr 80 40 "MKERNEL_NET_GDR=0 timeout 78 $B --shapes mha_b4_h16 --variants xnodes,gather"
jx d_agfirst 80 40 "timeout 78 $B --shapes mha_b4_h16,gqa_b1_h32_kv8 --variants agpath,xnodes,gather"
