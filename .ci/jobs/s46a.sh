# Session 46, call A: torch's half-precision GEMMs on MPS shares (s46_blas_probe.py): which shares, which
# BLAS library preference, whether the cuBLAS workspace matters, whether fp32 and the engine stay right;
# then the MoE rank tests s45d's time limit cut (the 26 after the first 38).
#   tar xJf .bp/core.tar.xz && MKERNEL_COMMIT=<hash> BP_MAX_STEPS=200 JOBS=.ci/jobs/s46a.sh REAL_OUT=$OUT OUT=/tmp/devout TOTAL=480 bash .ci/gpu-dev
P="python3 -m pytest -q -rfEx --tb=line -p no:cacheprovider --durations=3"
probe() {  # probe SHARE LIB [WS]: one process
  local env="MKERNEL_GEMM_AUTOTUNE=0 PROBE_LIB=$2 PROBE_ENGINE=$([ "$2" = default ] && echo 1 || echo 0)"
  [ "$1" != none ] && env="$env CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=$1"
  [ -n "${3:-}" ] && env="$env CUBLAS_WORKSPACE_CONFIG=$3"
  echo "== share $1 lib $2 ws ${3:--}"; eval "$env timeout 40 python3 .ci/jobs/s46_blas_probe.py" 2>&1 | tail -40
}
export -f probe
jx blas_shares 100 40 "for s in 33 50 100; do probe \$s default; done"
jx blas_libs 110 30 "probe 33 cublas; probe 33 cublaslt; probe 33 default :0:0; probe 25 cublas; probe 50 cublas"
jx moe_rest 220 80 "timeout 218 $P \$(cat .ci/jobs/s46_moe_rest.txt)"
