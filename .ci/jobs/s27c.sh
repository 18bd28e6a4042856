# Session 27, the copy-engine route of ag_gemm (branch ce-ag, or the integration branch; one H200, MPS): the route's
# tests at W = 2/4/8 (ragged m, return_gathered, back to back, the graph that runs the plan on the copy kernel), the
# ag_gemm suites the changed fused hooks / gate touch (the copy kernel, peer TMA, the default route), then the route
# timed against the forced copy kernel under MPS (informative: a shared GPU is not where it is for; two whole GPUs:
# .ci/jobs/s27x2.sh). What to watch: a trap naming kWaitPeerFlag (a copy that never landed: the batch copy ran on
# the SMs behind the persistent grid, or a flag write went missing) or kWaitPeerGate (the gate's barrier).
#   tar xJf .bp/core.tar.xz && MKERNEL_COMMIT=<hash> REUSE_BUILD=1 BP_MAX_STEPS=120 JOBS=.ci/jobs/s27c.sh REAL_OUT=$OUT OUT=/tmp/devout TOTAL=540 bash .ci/gpu-dev
F=tests/gpu/test_fused_ops.py
P="python3 -m pytest -q -rfE --tb=short -p no:cacheprovider --durations=5"
jx ce_probe 45 30 "timeout 43 python3 benchmarks/ce_copy_probe.py --iters 8"
jx ce_smoke 90 40 "timeout 88 $P $F -k 'copy_engine and 2'"
jx ce_tests 150 80 "timeout 148 $P $F -k 'copy_engine and (4 or 8)'"
jx ce_kill 60 30 "timeout 58 $P $F -k 'copy_engine_killed'"
jx ag_regress 150 80 "timeout 148 $P $F -k 'test_ag_gemm[2] or peer_tma[2] or default_route[2] or (test_reduce_ops and 2)'"
jx ce_bench 100 60 "timeout 98 python3 benchmarks/multigpu.py --world 2 --only ag_gemm --quick --ag-routes copy,ce --iters 8 --timeout 90"
