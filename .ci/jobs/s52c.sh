# Session 52, second call (REUSE_BUILD=1 on the warm machine): what s52a.sh's first call left (see its header for the
# predictions) and s52b.sh's ring rows (see its header).
jx fwd_c32768 60 30 "timeout 58 python3 benchmarks/attention_power.py --causal --seq 32768 --variants 0,0:12,0:8 --backends cudnn --window 1.5 --rounds 3"
jx fwd_nc2048 45 30 "timeout 43 python3 benchmarks/attention_power.py --seq 2048 --variants 0,133256,395400 --backends cudnn --window 1.5 --rounds 3"
jx gemm_power 120 40 "timeout 118 python3 benchmarks/gemm_power.py --shapes '333,8192,8192;333,8192,3584;333,3584,8192;8192,8192,8192' --swizzles 1,8 --window 1.5 --rounds 3"
B="python3 benchmarks/bench_ring_attention.py --timeout 80"
jx w2 90 40 "timeout 88 $B --world 2 --iters 20 --variants base,l2s4,c-base,c-l2s4"
jx w4 90 40 "timeout 88 $B --world 4 --iters 20 --variants base,l2s4,c-base,c-l2s4 --shapes mha_b4_h16,gqa_b1_h32_kv8"
