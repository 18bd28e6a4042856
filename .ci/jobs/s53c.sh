# Prepared in session 53 (third call, not run): how long must the first-call measurement's samples be? s53b (fused_power, H100 under MPS) had
# the unfused path 1.3-1.5x slower in sustained windows than in choose_path's samples (2 calls after a lead-in at the
# Llama shapes) while the fused path took the same time in both, so the op kept unfused where fused ran 1.11x (ag W=2)
# / 1.39x (gemm_ar W=4) faster sustained.
# Predictions: (1) fused_sample_length: the unfused path's ms per call grows with the calls per sample (2 -> 32) toward
# its sustained figure (W=2 ag 8.0 ms, W=4 ar 10.2 ms), the fused path's stays within 5% of its sustained one (7.2 /
# 7.3 ms) at every n; fused/unfused crosses below 0.99 by n = 8. (2) With MKERNEL_FUSED_SAMPLE_CALLS=8 the op's verdict
# at W=4 gemm_ar and W=2 ag_gemm is fused ("runs fused" in the verbose line) and the op's sustained time within 3% of
# the forced fused one. If (1) holds but (2) does not, the test's rounds are the next suspect; if (1) fails (samples
# stay short of the steady state at every n), the steady state needs the host running ahead (a full queue), not length.
#   tar xJf .bp/core.tar.xz && MKERNEL_COMMIT=<hash> BP_MAX_STEPS=60 JOBS=.ci/jobs/s53c.sh REAL_OUT=$OUT OUT=/tmp/devout TOTAL=<s> bash .ci/gpu-dev
# NOT RUN in session 53 (four refused starts used 1000 s of the budget; the last 333 s could not start a machine):
# the next session's first call. Build from the pack (BP_MAX_STEPS=60, ~170 s), then ~330 s of jobs: TOTAL=540.
# If the prediction holds, the change is the default sample (calls_per_sample: at least ~8 calls or ~50 ms at the
# Llama shapes), checked by rerunning s53b's fused_power.py at W = 2 / 4 without the knob (op within 3% of the
# better of fused / unfused at all six rows).
L="python3 -m mkernel launch --mps --timeout 85"
jx len_w4 90 40 "timeout 88 $L --world 4 benchmarks/fused_sample_length.py --ops gemm_ar,ag_gemm --calls 2,4,8,32 --reps 4"
jx knob_w4 75 40 "timeout 73 env MKERNEL_FUSED_SAMPLE_CALLS=8 MKERNEL_FUSED_VERBOSE=1 $L --world 4 benchmarks/fused_power.py --ops gemm_ar --window 1.0 --rounds 2"
jx len_w2 80 40 "timeout 78 $L --world 2 benchmarks/fused_sample_length.py --ops ag_gemm,gemm_ar --calls 2,4,8,32 --reps 4"
jx knob_w2 75 40 "timeout 73 env MKERNEL_FUSED_SAMPLE_CALLS=8 MKERNEL_FUSED_VERBOSE=1 $L --world 2 benchmarks/fused_power.py --ops ag_gemm --window 1.0 --rounds 2"
