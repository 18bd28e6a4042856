# Session 45, call A on main: the MoE capacity-drop w1-gradient NaN at W = 3 (issue 14).
#   tar xJf .bp/core.tar.xz && MKERNEL_COMMIT=<hash> BP_MAX_STEPS=200 JOBS=.ci/jobs/s45a.sh REAL_OUT=$OUT OUT=/tmp/devout TOTAL=330 bash .ci/gpu-dev
jx bmm_third 60 20 "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=33 timeout 58 python3 .ci/jobs/s45_bmm_probe.py"
jx probe 120 40 "timeout 118 python3 .ci/jobs/s44d_probe.py"
# The same probe with every launch synchronous: a race between launches of one rank disappears there.
jx probe_blocking 120 40 "CUDA_LAUNCH_BLOCKING=1 timeout 118 python3 .ci/jobs/s44d_probe.py"
