# Session 41, call E on main: the attention engine's forward on an H100 (every forward figure since session 17 was an
# H200's; issue 13's open forward row was non-causal S = 4096 at 0.980x cuDNN there). d = 128, 32 heads, causal and not,
# S = 2k..16k, against SDPA cuDNN and FA2 in the same run. No change to the engine: a measurement for the closing note.
#   tar xJf .bp/core.tar.xz && MKERNEL_DEV_BUILD=1 MKERNEL_COMMIT=<hash> JOBS=.ci/jobs/s41e.sh REAL_OUT=$OUT OUT=/tmp/devout TOTAL=300 bash .ci/gpu-dev
jx fwd 150 60 "timeout 148 python3 benchmarks/bench_attention.py --seqs 2048,4096,8192,16384 --iters 20 --skip-alt"
