# Session 51, call G: the backward at the power cap (attention_power.py --backward, new: the backward alone through a
# retained graph, sustained windows, the SM clock beside). The default backward on CUDA: the engine's native kernel
# (wgmma_ws_dqwarp) non-causal at d = 128 from 4096 keys (1.01-1.09x cuDNN's in GPU time, sessions 37-38), cuDNN's
# kernel on our LSE causal (GPU-time parity, session 31).
# Predictions (before the run): every backward at the 700 W cap; non-causal 4096 / 8192 the default 1.00-1.05x cuDNN's
# sustained; causal 8192 0.99-1.01x (the same kernel: only the glue differs).
#   tar xJf .bp/core.tar.xz && MKERNEL_DEV_BUILD=1 MKERNEL_COMMIT=<hash> BP_MAX_STEPS=200 JOBS=.ci/jobs/s51g.sh REAL_OUT=$OUT OUT=/tmp/devout TOTAL=<s> TAIL_LINES=20 bash .ci/gpu-dev
jx bwd_nc4096 45 30 "timeout 43 python3 benchmarks/attention_power.py --backward --seq 4096 --variants 0 --backends cudnn --window 1.5 --rounds 3"
jx bwd_nc8192 45 30 "timeout 43 python3 benchmarks/attention_power.py --backward --seq 8192 --variants 0 --backends cudnn --window 1.5 --rounds 3"
jx bwd_c8192 45 30 "timeout 43 python3 benchmarks/attention_power.py --backward --causal --seq 8192 --variants 0 --backends cudnn --window 1.5 --rounds 3"
