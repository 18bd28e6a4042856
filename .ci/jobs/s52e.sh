# Session 52, fourth call: the GEMM tuner's warm-up (gemm_autotune.cpp warm_up). s52a / s52d: the tuned plan of
# 8192^3 flipped between sessions (ping_128x128_c1x2 0.945x cuBLAS sustained, coop_128x256_c2x1 1.000x) and at
# 8192x7168x8192 ping_128x128_c1x2 ran 0.899x while coop_128x256_c2x1 ran 0.982x (gemm_power.py, 700 W cap, ~1350
# MHz); the old warm-up (100 ms of the first candidate) tunes near the boost clock. New: blocks of 25 ms until the call
# time settles (>= 300 ms, <= 1500 ms). Each shape tuned in a fresh process (plan cache off) from an idle GPU with the
# old rule (WARM_MS=100) and the new, then both timed sustained against cuBLAS. Prediction: the new rule picks a
# 128x256 / 256x128 cooperative plan at all three shapes and runs 0.98-1.01x cuBLAS sustained; the warm-up trace
# shows the call time rising 20-40% (1980 -> ~1350 MHz) and settling within 300-800 ms.
# Also: s52d's one failure (ring W = 8 over emulated nodes: two ranks' cudaMalloc of 8 MiB symmetric memory out of
# memory, 8 ranks on an 80 GB H100) rerun alone.
#   tar xJf .bp/core.tar.xz && MKERNEL_DEV_BUILD=1 MKERNEL_COMMIT=<hash> BP_MAX_STEPS=200 JOBS=.ci/jobs/s52e.sh REAL_OUT=$OUT OUT=/tmp/devout TOTAL=<s> bash .ci/gpu-dev
P="python3 -m pytest -q -rfEx --tb=short -p no:cacheprovider --durations=3"
jx ring_w8 60 30 "timeout 58 $P tests/gpu/test_ring_attention.py -k 'test_ring_attention_across_emulated_nodes and 8'"
G="env MKERNEL_GEMM_PLAN_CACHE=0 MKERNEL_GEMM_AUTOTUNE_LOG=1 python3 benchmarks/gemm_power.py --window 1.5 --rounds 3"
for s in 8192,7168,8192 16384,7168,8192 8192,8192,8192; do
  n=${s//,/x}
  jx tune_old_$n 40 25 "sleep 4; MKERNEL_GEMM_AUTOTUNE_WARM_MS=100 timeout 36 $G --shapes '$s'"
  jx tune_new_$n 50 25 "sleep 4; timeout 46 $G --shapes '$s' --plans coop_128x256_c2x1/s4/m"
done
