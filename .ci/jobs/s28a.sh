# Session 28 plan, call A (one H200; branch s28-int = s27-int (s26-pending, the native backward, the copy-engine
# route) + the CE route's review fixes + moe-fused; never run). The build comes from a pack made on the CPU machine
# (.ci/local-pack: every CUDA object compiled here by the GPU machine's own command lines, nvcc 13.0.88): the GPU
# machine should rebuild only the changed host files and link — the summary's "ninja would run N step(s)" says it
# (predicted 20-40; more than BP_MAX_STEPS means the local objects were not accepted and it builds everything).
# Then s27a.sh (sourced; its BP_PACK line does not apply here): the native backward's four kernels (smoke of wgmma_ws first: a pipeline bug hangs), their tests,
# attention_bwd_check.py (per-kernel ladders, backward alone vs cuDNN / FA2, the ring mode at W = 2 / 4), the op bench.
#   tar xJf .bp/core.tar.xz && MKERNEL_COMMIT=<hash> BP_MAX_STEPS=80 JOBS=.ci/jobs/s28a.sh REAL_OUT=$OUT OUT=/tmp/devout TOTAL=560 bash .ci/gpu-dev
source .ci/jobs/s27a.sh
P="python3 -m pytest -q -rfE --tb=short -p no:cacheprovider --durations=5"
jx moe_fused_smoke 70 40 "timeout 68 $P -x tests/gpu/test_moe_ranks.py -k 'ranks_fused and 2'"
