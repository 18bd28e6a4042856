# For the next multi-GPU loan (nvidia-h200-x2 / nvidia-h100-x2: a rank per GPU over NVLink), prepared in session 58.
# On one GPU under MPS the W = 2 ag_gemm verdict at Llama-70B fc1 (M = 8192 gathered) is decided by whether the two
# ranks' GEMMs overlap or stagger (s57a / s58a: unfused samples 5.4-10.1 ms, fused kept 1-2 of 4 fresh verdicts);
# with a GPU per rank that noise is gone, so this asks the question for real:
# 1. multigpu.py: the fused ops beside NCCL + cuBLAS, async-TP, the GEMM alone and the collective alone (the ideal).
#    Prediction (session 24's two H200s: ag fc1 T = 8192/16384 1.00-1.03x the GEMM alone): ag fc1 within 1.05x the
#    ideal and >= 0.95x the best anchor at M = 8192 and 16384.
# 2. Four fresh first-call verdicts at fc1 (the verdict file removed before each, as in s57a).
#    Prediction: fused 4 of 4 if (1) puts the fused op >= 5 % ahead of NCCL + cuBLAS sustained; otherwise the
#    verdict may go either way and either costs < 5 %.
#   tar xJf .bp/core.tar.xz && MKERNEL_DEV_BUILD=1 BP_MAX_STEPS=100000 MKERNEL_COMMIT=<hash> JOBS=.ci/jobs/s59x2.sh \
#     REAL_OUT=$OUT OUT=/tmp/devout TOTAL=540 TAIL_LINES=30 bash .ci/gpu-dev     (kind nvidia-h100-x2; carry .bp, .whl)
# Without a pack in .bp/ (a cold machine builds ~390 s): the first call with BP_PACK=1 BP_XZ=3 and
# JOBS=/dev/null builds and returns the pack, the next (REUSE_BUILD=1, within the 30 s idle release) runs this file.
mps_stop  # a rank per GPU: no MPS (launch without --mps gives rank r GPU r)
#    With --rs-routes fused,ce: gemm_rs's copy-engine route (session 59) beside the fused kernel; prediction at Llama
#    fc2 T = 8192 / 16384: rsce_over_gemm_alone 1.01-1.06 (async-TP's 1.01-1.05 in session 22), rsce_over_rsfused
#    0.88-0.95 (the fused kernel 1.13-1.19x the GEMM alone there).
jx multigpu 240 90 "timeout 238 python3 benchmarks/multigpu.py --world 2 --only ag_gemm,gemm_rs,gemm_ar --rs-routes fused,ce --iters 10 --timeout 230"
L="python3 -m mkernel launch --timeout 90"
F="benchmarks/fused_first_call.py --ops ag_gemm"
E="env MKERNEL_CACHE_DIR=/tmp/fcv MKERNEL_FUSED_VERDICT_CACHE=1 MKERNEL_FUSED_VERBOSE=1"
for i in 1 2 3 4; do
  jx v_gpus_$i 60 40 "rm -f /tmp/fcv/fused_verdicts.json; timeout 58 $E $L --world 2 $F --label gpus$i"
done
# 3. (if the budget leaves it) ag_gemm's copy-engine route against the SM copy kernel on real NVLink, first time
#    (session 27 built it for this case: session 24's copy role ran 7-9 % over the GEMM alone at the power cap,
#    async-TP's copy engines at the GEMM alone). Prediction: ce 0.95-1.0x copy's time at fc1 T = 8192 / 16384
#    (ce_over_copy <= 1.0); if ce_over_gemm_alone <= 1.03 it becomes the whole-GPU default candidate.
jx ag_routes 150 90 "timeout 148 python3 benchmarks/multigpu.py --world 2 --only ag_gemm --ag-routes copy,ce --iters 10 --timeout 140"
