# Session 24, call E (nvidia-h200-x2). Ring attention at W=2 with a GPU per rank: call D put the fused ring at
# 0.73-0.97x its compute-alone ceiling (0.94-1.02x under MPS), its engine phase 2-26 % over the ceiling's; are the
# K/V sent better by a send kernel (2 or 4 CTAs on a side stream) than forwarded by the engine on whole GPUs, or with
# static tiles? Pinned variants side by side with the default, SM clock / power sampled beside them.
#   tar xJf .bp/core.tar.xz && MKERNEL_COMMIT=<hash> BP_MAX_STEPS=200 JOBS=.ci/jobs/s24e.sh REAL_OUT=$OUT OUT=/tmp/devout TOTAL=200 bash .ci/gpu-dev
mps_stop
nvidia-smi --query-gpu=timestamp,index,clocks.sm,power.draw --format=csv -lms 100 > $LOGS/smi_ring.csv 2>&1 &
SMI=$!
jx ring_variants 150 60 "timeout 148 python3 benchmarks/bench_ring_attention.py --world 2 --iters 10 --variants base,kernel,send4,k-static,static,engine,c-base --no-phases --timeout 140"
kill $SMI 2>/dev/null || true
