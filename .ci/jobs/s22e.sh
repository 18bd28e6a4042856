# Session 22, call E (one H200, no MPS): is the engine GEMM behind the fused ops' loss to NCCL + cuBLAS on
# the two real GPUs of call D? The per-rank GEMMs of multigpu.py's W=2 rows on a whole H200 (what each rank
# had there), engine (auto) against cuBLAS: Llama-70B fc1 gathered (T=8192, 16384), fc2 (T=8192, 16384), the
# square ag M=32768 (gathered) and rs M=32768.
#   tar xJf .bp/core.tar.xz && MKERNEL_COMMIT=<hash> JOBS=.ci/jobs/s22e.sh REAL_OUT=$OUT OUT=/tmp/devout TOTAL=200 bash .ci/gpu-dev
mps_stop
jx gemm 150 40 "timeout 148 python3 benchmarks/bench_gemm.py --no-sweep --rounds 3 --shapes 8192x14336x8192,16384x14336x8192,8192x8192x14336,16384x8192x14336,32768x1024x32768,32768x32768x512"
