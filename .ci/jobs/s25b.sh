# Session 25, call B (one H200): where the ring's hooked kernel loses to the plain engine (no communication,
# one process: benchmarks/ring_hooked_gap.py), then the engine hook tests and the W=2 fused ops under MPS after
# the tile scheduler's group_begin (s25a ran only the grouped GEMM's and MoE's tests).
#   tar xJf .bp/core.tar.xz && MKERNEL_COMMIT=<hash> BP_MAX_STEPS=40 JOBS=.ci/jobs/s25b.sh REAL_OUT=$OUT OUT=/tmp/devout TOTAL=430 bash .ci/gpu-dev
P="python3 -m pytest -q -rfE --tb=short -p no:cacheprovider --durations=3"
jx ring_gap 150 60 "timeout 148 python3 benchmarks/ring_hooked_gap.py --iters 15"
jx hooks 90 40 "timeout 88 $P -x tests/gemm/test_gemm_hooks.py"
jx fused 110 50 "timeout 108 $P tests/gpu/test_fused_ops.py -k 'test_ag_gemm or test_reduce_ops or graph_replay'"
