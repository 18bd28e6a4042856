# Session 54, fourth call (BP_PACK=1: a fresh build pack of this commit's sources, so the next sessions' cold builds
# skip the ~6 steps changed since s52d's pack). The job: power_windows' untimed lead-in window. Prediction:
# fused_power W=4 ag_gemm / gemm_ar, the op within 1% of the better of forced fused / unfused (s54b: 1.7-2.4%,
# all of it the op's round-0 window, the first after the idle second).
L="python3 -m mkernel launch --mps --timeout 75"
jx fp_w4 80 40 "timeout 78 env MKERNEL_FUSED_VERBOSE=1 $L --world 4 benchmarks/fused_power.py --ops ag_gemm,gemm_ar --window 1.0 --rounds 2"
