# Session 45, call C on main (s45b trimmed to what the remaining device time holds): the MoE weight-gradient fix
# (issue 14). cuBLAS alone at the full GPU, the weight-gradient test at the full GPU and at a third, the W = 2, 3, 4
# fuzz on the failing seed and a new one, then the rest of the multi-rank MoE suite if time is left.
#   tar xJf .bp/core.tar.xz && MKERNEL_COMMIT=<hash> BP_MAX_STEPS=200 JOBS=.ci/jobs/s45c.sh REAL_OUT=$OUT OUT=/tmp/devout TOTAL=330 bash .ci/gpu-dev
P="python3 -m pytest -q -rfEx --tb=short -p no:cacheprovider --durations=5"
jx bmm_full 30 10 "timeout 28 python3 .ci/jobs/s45_bmm_probe.py"
jx moe_cuda 90 30 "timeout 88 $P tests/ops/test_moe_cuda.py -k 'weight_gradient or gradients'"
jx wgrad_third 40 15 "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=33 timeout 38 $P tests/ops/test_moe_cuda.py -k weight_gradient"
jx fuzz_moe 100 40 "MKERNEL_FUZZ_SEED=4401 MKERNEL_FUZZ_CASES=10 timeout 98 $P tests/gpu/test_moe_ranks.py -k fuzz"
jx fuzz_moe2 100 40 "MKERNEL_FUZZ_SEED=4503 MKERNEL_FUZZ_CASES=12 timeout 98 $P tests/gpu/test_moe_ranks.py -k fuzz"
jx moe_ranks 200 60 "timeout 198 $P tests/gpu/test_moe_ranks.py -k 'not fuzz'"
