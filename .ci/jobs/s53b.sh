# Next session, second call (prepared in session 52, not run; REUSE_BUILD=1 right after s53a on the warm machine, or a
# dev build): the fused GEMM ops at the power cap (benchmarks/fused_power.py, new: the op, forced fused, unfused, the
# GEMM alone and the collective alone in sustained windows, every rank in lockstep). Under MPS on one GPU the W ranks'
# kernels share one board's 700 W: an overlap that adds power lowers the clock for both halves.
# Predictions: (1) every window at the cap (reason 0x4); (2) fused / unfused sustained at W = 2 within 10% of the short
# samples' ratio (bench_fused.py, H200 W = 2: Llama ag 1.39x, rs 1.36x), i.e. >= 1.25x; (3) fused within 1.10x of
# max(gemm, comm) at W = 4 (short samples: 1.025-1.055x the ideal on the H200). If (3) fails by more, the overlap pays
# less at the cap than in bursts and the first call's verdict (timed in bursts) is the next thing to re-judge.
#   tar xJf .bp/core.tar.xz && MKERNEL_DEV_BUILD=1 MKERNEL_COMMIT=<hash> JOBS=.ci/jobs/s53b.sh REAL_OUT=$OUT OUT=/tmp/devout TOTAL=<s> bash .ci/gpu-dev
jx fused_power_w2 150 60 "timeout 148 python3 -m mkernel launch --world 2 --mps --timeout 140 benchmarks/fused_power.py --window 1.5 --rounds 3"
jx fused_power_w4 150 60 "timeout 148 python3 -m mkernel launch --world 4 --mps --timeout 140 benchmarks/fused_power.py --window 1.5 --rounds 3"
