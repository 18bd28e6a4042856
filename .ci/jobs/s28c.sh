# Session 28 plan, call C (one H200, MPS): s27c — ag_gemm's copy-engine route (the probe, its tests at W = 2/4/8, a
# killed rank, the ag / rs / ar regressions, the route timed against the forced copy kernel under MPS).
#   tar xJf .bp/core.tar.xz && MKERNEL_COMMIT=<hash> REUSE_BUILD=1 BP_MAX_STEPS=80 JOBS=.ci/jobs/s28c.sh REAL_OUT=$OUT OUT=/tmp/devout TOTAL=560 bash .ci/gpu-dev
source .ci/jobs/s27c.sh
