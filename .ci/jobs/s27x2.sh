# For the next nvidia-h200-x2 loan (after s27c passed on one H200): ag_gemm's copy-engine route with a GPU per rank,
# where it is for. Session 24: at Llama-70B fc1 the copy role's kernel ran 1.07-1.09x the GEMM alone in sustained
# calls on the two power-capped H200s (0.93x NCCL + cuBLAS, 0.89-0.93x async-TP), async-TP at ~the GEMM alone.
# Predicted: the route within 1.00-1.03x the GEMM alone at fc1 T=8192/16384 and >= 1.0x the best anchor there; on the
# square family M <= 16384 no faster than the copy kernel (its N is small: the GEMM consumes rows faster than one
# copy engine brings them). Then s25x2's MoE / ring rows.
#   tar xJf .bp/core.tar.xz && MKERNEL_COMMIT=<hash> BP_MAX_STEPS=400 JOBS=.ci/jobs/s27x2.sh REAL_OUT=$OUT OUT=/tmp/devout TOTAL=540 bash .ci/gpu-dev
mps_stop
P="python3 -m pytest -q -rfE --tb=short -p no:cacheprovider --durations=3"
jx ce_probe 45 30 "timeout 43 python3 benchmarks/ce_copy_probe.py --iters 8"
jx ce_two_gpus 200 120 "timeout 198 python3 benchmarks/multigpu.py --world 2 --only ag_gemm --ag-routes copy,peer,ce --iters 12 --timeout 190"
jx ce_demo 60 40 "MKERNEL_FUSED_AG_COPY_ENGINE=1 timeout 58 python3 -m mkernel demo --world 2 --require-all"
source .ci/jobs/s25x2.sh
