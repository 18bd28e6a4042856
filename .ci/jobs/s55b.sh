# Session 55, chained on s55a's warm machine (REUSE_BUILD=1): fused_first_call at W = 4 (fresh / stored / plans-only).
L="python3 -m mkernel launch --mps --timeout 90"
F="benchmarks/fused_first_call.py"
jx fc4_fresh 95 12 "rm -rf /tmp/fc4 && timeout 93 env MKERNEL_CACHE_DIR=/tmp/fc4 MKERNEL_FUSED_VERDICT_CACHE=1 $L --world 4 $F --label fresh"
jx fc4_stored 60 12 "timeout 58 env MKERNEL_CACHE_DIR=/tmp/fc4 MKERNEL_FUSED_VERDICT_CACHE=1 $L --world 4 $F --label stored"
jx fc4_plans 80 12 "timeout 78 env MKERNEL_CACHE_DIR=/tmp/fc4 MKERNEL_FUSED_VERDICT_CACHE=0 $L --world 4 $F --label plans-only"
