# Session 54, third call: the test rounds' samples lengthened to ~50 ms of the fastest path
# (fused_verdict::Settings::sample_ms; s53c: 8-call samples kept fused at W=2 ag_gemm where 2-call ones kept
# unfused, the op then 1.15x slower sustained). Predictions: fused_power W=2 and W=4 without knobs, every op
# within 3% of the better of forced fused / forced unfused at all six rows (the verbose line: "8 calls per
# sample" at the Llama shapes, measurement ~2 s); the fused ops' GPU tests (verdict agreement across ranks,
# default route) still pass.
P="python3 -m pytest -q -rfEx --tb=short -p no:cacheprovider --durations=5"
L="python3 -m mkernel launch --mps --timeout 110"
jx fp_w2 115 40 "timeout 113 env MKERNEL_FUSED_VERBOSE=1 $L --world 2 benchmarks/fused_power.py --window 1.0 --rounds 2"
jx fp_w4 115 40 "timeout 113 env MKERNEL_FUSED_VERBOSE=1 $L --world 4 benchmarks/fused_power.py --window 1.0 --rounds 2"
jx tests 160 40 "timeout 158 $P tests/gpu/test_fused_ops.py -k 'default_route or (test_ag_gemm and not peer and not copy and not default and not 8)'"
