# Session 22, call F (nvidia-h200-x2, when lent again): why do the fused ops lose to NCCL + cuBLAS on two real
# GPUs (call D: Llama-70B fc1 ag 0.89x, fc2 rs 0.85x the anchor, 1.19x the overlap ideal) when the engine GEMM
# runs at cuBLAS speed on a whole H200 (call E: 0.96-1.05x)? The same multigpu rows with the fused path forced
# (MKERNEL_FUSED=force) and with mkernel's unfused path (MKERNEL_FUSED=off: the substrate's collective + the
# engine GEMM), Llama rows and the square M=16384/32768 rows, beside the anchors of the same run.
#   tar xJf .bp/core.tar.xz && MKERNEL_COMMIT=<hash> JOBS=.ci/jobs/s22f.sh REAL_OUT=$OUT OUT=/tmp/devout TOTAL=400 bash .ci/gpu-dev
mps_stop
jx forced 150 40 "MKERNEL_FUSED=force timeout 148 python3 benchmarks/multigpu.py --world 2 --iters 10 --only ag_gemm,gemm_rs,gemm_ar --timeout 140"
jx unfused 150 40 "MKERNEL_FUSED=off timeout 148 python3 benchmarks/multigpu.py --world 2 --iters 10 --only ag_gemm,gemm_rs,gemm_ar --timeout 140"
