# Session 40, call F on main: where else does the native ring mode win? s40c-e: the native ring backward (after the
# all-gather) ran 1.04-1.31x the grouped cuDNN calls at d = 128 with 4096- and 8192-query shards, and auto takes it
# there only (_ring_backward.native_ring_wins). This call times the rows it does not cover: d = 64 (MHA b 4 s 4096,
# GQA b 1 s 8192; the single-call native backward is 0.86-0.90x cuDNN's there) and 2048-query shards (MHA d = 128),
# at W = 2, and the short shards at W = 4. Prediction: d = 64 native/torch 0.95-1.1 (the grouped calls' overheads
# against the kernel's 10-14 % deficit); s2048 1.05-1.2x.
#   tar xJf .bp/core.tar.xz && MKERNEL_DEV_BUILD=1 MKERNEL_COMMIT=<hash> JOBS=.ci/jobs/s40f.sh REAL_OUT=$OUT OUT=/tmp/devout TOTAL=575 bash .ci/gpu-dev
jx bench_w2 150 60 "timeout 148 python3 benchmarks/bench_ring_backward.py --world 2 --iters 10 --shapes mha_b4_h16_d64,gqa_b1_h32_kv8_d64,mha_b4_h16_s2048"
jx bench_w4 90 30 "timeout 88 python3 benchmarks/bench_ring_backward.py --world 4 --iters 8 --shapes mha_b4_h16_s2048,mha_b4_h16_d64"
