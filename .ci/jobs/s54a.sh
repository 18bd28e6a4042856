# Session 54 second call (control for s53c): the default first-call sample (no knob) on the same warm machine, verbose verdict.
L="python3 -m mkernel launch --mps --timeout 85"
jx def_w4 75 40 "timeout 73 env MKERNEL_FUSED_VERBOSE=1 $L --world 4 benchmarks/fused_power.py --ops gemm_ar --window 1.0 --rounds 2"
jx def_w2 75 40 "timeout 73 env MKERNEL_FUSED_VERBOSE=1 $L --world 2 benchmarks/fused_power.py --ops ag_gemm --window 1.0 --rounds 2"
jx k4_w4 75 40 "timeout 73 env MKERNEL_FUSED_SAMPLE_CALLS=4 MKERNEL_FUSED_VERBOSE=1 $L --world 4 benchmarks/fused_power.py --ops gemm_ar --window 1.0 --rounds 2"
