# Session 32, call E: call D reproduced the W = 2 over 2 nodes stall with the default grid (62 engine CTAs + 4 send CTAs
# per rank on an H100 at 50 %: every SM of the GPU) and passed with MKERNEL_RING_GRID=48 and with MKERNEL_NET_GDR=0:
# the copier process's copies need SMs. How many must the engine leave: grids 58 / 54 (4 / 8 SMs a rank), and
# W = 4 over 2 nodes at 27 (2 a rank).
B="python3 benchmarks/bench_ring_attention.py --nodes 2 --iters 8 --timeout 70 --variants xnodes,gather"
jx g58 80 40 "MKERNEL_RING_GRID=58 timeout 78 $B --world 2"
jx g54 80 40 "MKERNEL_RING_GRID=54 timeout 78 $B --world 2"
jx g60 80 40 "MKERNEL_RING_GRID=60 timeout 78 $B --world 2"
jx w4g27 80 40 "MKERNEL_RING_GRID=27 timeout 78 $B --world 4 --shapes mha_b4_h16,gqa_b1_h32_kv8"
