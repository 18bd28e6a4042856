# Session 45, call D (branch s45-wgrad-engine; not run in session 45: the device time ran out): s45c found torch's
# one-batch bmm wrong at C = 32 on a third of the H100 even with g^T contiguous; the padded weight gradient now runs
# the engine's grouped GEMM on CUDA. cuBLAS's bmm / mm alone at a third (does nn.Linear's 2-D weight gradient break
# there too?), the weight-gradient test at the full GPU and at a third, the W = 2, 3, 4 MoE fuzz, the whole MoE suite.
#   tar xJf .bp/core.tar.xz && MKERNEL_COMMIT=<hash> BP_MAX_STEPS=200 JOBS=.ci/jobs/s45d.sh REAL_OUT=$OUT OUT=/tmp/devout TOTAL=420 bash .ci/gpu-dev
P="python3 -m pytest -q -rfEx --tb=line -p no:cacheprovider --durations=3"
jx cublas_third 30 10 "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=33 timeout 28 python3 .ci/jobs/s45_bmm_probe.py"
jx wgrad_full 30 12 "timeout 28 $P tests/ops/test_moe_cuda.py -k 'weight_gradient or gradients'"
jx wgrad_third 30 12 "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=33 timeout 28 $P tests/ops/test_moe_cuda.py -k weight_gradient"
jx fuzz_moe 100 40 "MKERNEL_FUZZ_SEED=4401 MKERNEL_FUZZ_CASES=10 timeout 98 $P tests/gpu/test_moe_ranks.py -k fuzz"
jx moe_ranks 200 60 "timeout 198 $P tests/gpu/test_moe_ranks.py -k 'not fuzz'"
