# Session 29, call D (warm, REUSE_BUILD=1): benchmarks — the MoE table fused vs gather (MPS W=2), the native
# backward vs SDPA (op bench) and its per-kernel check, the ring bench.
B="python3 benchmarks/bench_moe_ranks.py --world 2 --shapes seed_e256_top8_8k,seed_e256_top8_32k --iters 10"
jx table_fused 45 30 "MKERNEL_MOE_FUSED=1 timeout 43 $B"
jx table_gather 45 30 "MKERNEL_MOE_GATHER_A=1 timeout 43 $B"
jx bwd_bench 80 50 "timeout 78 python3 benchmarks/bench_attention.py --backward --seqs 8192 --iters 10 --native-kernels wgmma,wgmma_bulk_dq,mma_sync,wgmma_ws"
jx bwd_check 130 60 "timeout 128 python3 benchmarks/attention_bwd_check.py --seqs 4096,8192 --iters 10 --kernels wgmma,wgmma_bulk_dq,mma_sync,wgmma_ws --ring 2,4"
jx bench4 60 35 "timeout 58 python3 benchmarks/bench_ring_attention.py --world 2 --iters 10 --timeout 45"
