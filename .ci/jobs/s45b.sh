# Session 45, call B on main: the MoE weight-gradient fix (issue 14: torch's bmm of a transposed half-precision view
# with one batch was wrong on a third of an H100, s45a; the padded weight gradient now hands it g^T contiguous).
# cuBLAS alone at the full GPU, the new weight-gradient test at the full GPU and at a third, then the W = 2, 3, 4 fuzz
# on the failing seed and two new ones, then the whole multi-rank MoE suite.
#   tar xJf .bp/core.tar.xz && MKERNEL_COMMIT=<hash> BP_MAX_STEPS=200 JOBS=.ci/jobs/s45b.sh REAL_OUT=$OUT OUT=/tmp/devout TOTAL=500 bash .ci/gpu-dev
P="python3 -m pytest -q -rfEx --tb=short -p no:cacheprovider --durations=5"
jx bmm_full 60 20 "timeout 58 python3 .ci/jobs/s45_bmm_probe.py"
jx moe_cuda 120 40 "timeout 118 $P tests/ops/test_moe_cuda.py"
jx wgrad_third 60 20 "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=33 timeout 58 $P tests/ops/test_moe_cuda.py -k weight_gradient"
jx fuzz_moe 120 40 "MKERNEL_FUZZ_SEED=4401 MKERNEL_FUZZ_CASES=10 timeout 118 $P tests/gpu/test_moe_ranks.py -k fuzz"
jx fuzz_moe2 120 40 "MKERNEL_FUZZ_SEED=4503 MKERNEL_FUZZ_CASES=12 timeout 118 $P tests/gpu/test_moe_ranks.py -k fuzz"
jx moe_ranks 240 60 "timeout 238 $P tests/gpu/test_moe_ranks.py -k 'not fuzz'"
