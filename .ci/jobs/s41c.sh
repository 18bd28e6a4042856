# Session 41, call C on main: where else the native ring mode wins now that dK/dV travel (the default on one node since
# s41b: 0.97-1.19x the reduce-scatter). Session 40 kept d = 64 and shards below 2048 queries on the grouped cuDNN calls
# (d = 64 native / grouped 0.94-1.15x, mixed). Columns: the grouped calls (torch) and the native ring mode after the
# all-gather with travel (native_gt). Prediction: d = 64 native_gt / torch 0.99-1.2x (session 40's figures + ~5 %),
# 1024-query shards 1.1-1.4x (the grouped calls' fixed costs weigh more on small calls).
#   tar xJf .bp/core.tar.xz && MKERNEL_DEV_BUILD=1 MKERNEL_COMMIT=<hash> JOBS=.ci/jobs/s41c.sh REAL_OUT=$OUT OUT=/tmp/devout TOTAL=420 bash .ci/gpu-dev
jx bench_w2 100 40 "timeout 98 python3 benchmarks/bench_ring_backward.py --world 2 --iters 10 --shapes mha_b4_h16_d64,gqa_b1_h32_kv8_d64,mha_b4_h16_s1024 --columns torch,native_gt"
jx bench_w4 90 30 "timeout 88 python3 benchmarks/bench_ring_backward.py --world 4 --iters 8 --shapes mha_b4_h16_d64,mha_b4_h16_s1024 --columns torch,native_gt"
jx bench_w2b 100 40 "timeout 98 python3 benchmarks/bench_ring_backward.py --world 2 --iters 10 --shapes mha_b4_h16_d64,gqa_b1_h32_kv8_d64,mha_b4_h16_s1024 --columns torch,native_gt"
