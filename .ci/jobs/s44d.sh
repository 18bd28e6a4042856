# Session 44, call D on main: the MoE capacity-drop w1-gradient NaN at W = 3 (s44b / s44c: the received rows and the
# gradient reaching the expert outputs both check out row by row, the w1 gradient is NaN): the weight-gradient step
# instrumented (moe_rank_checks.wgrad_probe).
#   tar xJf .bp/core.tar.xz && MKERNEL_COMMIT=<hash> BP_MAX_STEPS=200 JOBS=.ci/jobs/s44d.sh REAL_OUT=$OUT OUT=/tmp/devout TOTAL=200 bash .ci/gpu-dev
jx probe 120 40 "timeout 118 python3 .ci/jobs/s44d_probe.py"
