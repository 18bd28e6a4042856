# Session 46, call A: torch's half-precision GEMMs on MPS shares (s46_blas_probe.py): which shares, whether the
# BLAS library preference or the cuBLAS workspace matters, whether fp32 and the engine stay right; the single-GPU
# differential fuzz (engine GEMM, attention forward / backward) on a third of the GPU (the share a W = 3 rank
# gets: s45d found torch.mm wrong there); the doctor's new torch.half_gemm check at a third and whole; then the MoE rank tests s45d's time limit cut (the 26 after the first 38).
#   tar xJf .bp/core.tar.xz && MKERNEL_COMMIT=<hash> BP_MAX_STEPS=200 JOBS=.ci/jobs/s46a.sh REAL_OUT=$OUT OUT=/tmp/devout TOTAL=480 bash .ci/gpu-dev
P="python3 -m pytest -q -rfEx --tb=line -p no:cacheprovider --durations=3"
probe() {  # probe SHARE LIB [WS]: one process
  local env="MKERNEL_GEMM_AUTOTUNE=0 PROBE_LIB=$2 PROBE_ENGINE=$([ "$2" = default ] && echo 1 || echo 0)"
  [ "$1" != none ] && env="$env CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=$1"
  [ -n "${3:-}" ] && env="$env CUBLAS_WORKSPACE_CONFIG=$3"
  echo "== share $1 lib $2 ws ${3:--}"; eval "$env timeout 40 python3 .ci/jobs/s46_blas_probe.py" 2>&1 | tail -40
}
export -f probe
jx blas_shares 50 25 "for s in 33 100; do probe \$s default; done"
jx blas_libs 50 20 "probe 33 cublas; probe 33 default :0:0"
jx doctor 30 15 "for s in 33 100; do echo == share \$s; CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=\$s NCCL_NVLS_ENABLE=0 timeout 18 python3 -m mkernel doctor | grep -E 'half_gemm|result'; echo rc \${PIPESTATUS[0]}; done"
T="CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=33 MKERNEL_FUZZ_SEED=4601"
jx fuzz_gemm_third 60 30 "$T MKERNEL_FUZZ_CASES=40 timeout 58 $P tests/fuzz/test_fuzz_gemm.py"
jx fuzz_attn_third 60 30 "$T MKERNEL_FUZZ_CASES=40 timeout 58 $P tests/fuzz/test_fuzz_attention.py"
jx moe_rest 220 60 "timeout 218 $P \$(cat .ci/jobs/s46_moe_rest.txt)"
