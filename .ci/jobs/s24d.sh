# Session 24, call D (nvidia-h200-x2). (1) ring attention at W=2 with a GPU per rank (first real-NVLink figures);
# (2) `mkernel demo --require-all` at W=2 on the two GPUs (the MoE gather now on by default there);
# (3) the multigpu Llama rows again with the GPUs' SM clock and power sampled every 50 ms beside them (does the
# fused kernel's 1.07-1.09x the GEMM alone under sustained calls follow the clocks?).
#   tar xJf .bp/core.tar.xz && MKERNEL_COMMIT=<hash> BP_MAX_STEPS=200 JOBS=.ci/jobs/s24d.sh REAL_OUT=$OUT OUT=/tmp/devout TOTAL=400 bash .ci/gpu-dev
mps_stop
jx ring 150 60 "timeout 148 python3 benchmarks/bench_ring_attention.py --world 2 --iters 10 --timeout 140"
jx demo 90 40 "timeout 88 python3 -m mkernel demo --world 2 --require-all"
jx smi_multigpu 120 60 "(nvidia-smi --query-gpu=timestamp,index,clocks.sm,power.draw,temperature.gpu --format=csv -lms 50 > \$LOGS/smi.csv &) ; sleep 0.5; timeout 110 python3 benchmarks/multigpu.py --world 2 --iters 10 --only ag_gemm,gemm_rs --timeout 100; pkill -f 'nvidia-smi --query' || true"
