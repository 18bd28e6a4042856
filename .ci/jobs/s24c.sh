# Session 24, call C (nvidia-h200-x2). (1) fused_diag agfc1 again (the baseline's 3.23 vs 2.81 ms spread: repeated
# and at 12 calls per sample); (2) multigpu.py W=2 at the defaults, all rows beside NCCL + cuBLAS and async-TP
# (call D of session 22: ag fc1 0.89x, rs fc2 0.85x the best anchor); (3) the fused ops forced, Llama rows.
#   MKERNEL_COMMIT=<hash> BP_MAX_STEPS=200 JOBS=.ci/jobs/s24c.sh REAL_OUT=$OUT OUT=/tmp/devout TOTAL=590 bash .ci/gpu-dev
mps_stop
jx diag 60 30 "timeout 58 python3 benchmarks/fused_diag.py --world 2 --sections agfc1 --timeout 55"
jx multigpu 330 100 "timeout 328 python3 benchmarks/multigpu.py --world 2 --iters 10 --only ag_gemm,gemm_rs,gemm_ar --timeout 320"
