# Session 45, call D on main: s45c found torch's one-batch bmm wrong at C = 32 on a third of the H100 even with g^T
# contiguous; the padded weight gradient now runs the engine's grouped GEMM on CUDA. Its test at the full GPU and at
# a third, then the W = 3 MoE fuzz on the failing seed.
#   tar xJf .bp/core.tar.xz && MKERNEL_COMMIT=<hash> BP_MAX_STEPS=200 JOBS=.ci/jobs/s45d.sh REAL_OUT=$OUT OUT=/tmp/devout TOTAL=140 bash .ci/gpu-dev
P="python3 -m pytest -q -rfEx --tb=line -p no:cacheprovider --durations=3"
jx wgrad_full 30 12 "timeout 28 $P tests/ops/test_moe_cuda.py -k 'weight_gradient or gradients'"
jx wgrad_third 30 12 "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=33 timeout 28 $P tests/ops/test_moe_cuda.py -k weight_gradient"
jx fuzz_moe3 60 25 "MKERNEL_FUZZ_SEED=4401 MKERNEL_FUZZ_CASES=10 timeout 58 $P tests/gpu/test_moe_ranks.py -k 'fuzz and 3'"
