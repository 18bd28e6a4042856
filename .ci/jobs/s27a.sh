# Session 27, call A (one H200; branch s27-int = bwd-wgmma (s26-pending + the native backward's wgmma kernels) + ce-ag, never run).
# The native backward's four main kernels (MKERNEL_ATTN_BWD_KERNEL): wgmma (cp.async ring, dQ by float2 atomics),
# wgmma_bulk_dq (dQ by one bulk reduce-add per 64x64 tile), wgmma_ws (warp-specialized: TMA producer, mbarrier
# pipeline, bulk dQ) and mma_sync (session 10's, 0.31x cuDNN). First a smoke of wgmma_ws alone (a pipeline bug
# hangs: 40 s cap), then every kernel's tests (ragged, GQA/MQA, causal with s != s_kv, bf16/fp16, poisoned,
# against the float64 backward; and the ring mode, attention_backward_ring, for one rank of an emulated ring of
# W = 2-4 against the masked float64 backward), then attention_bwd_check.py: its ladder per kernel (where a failing gradient's
# error sits) and the backward alone on the op (same out/lse) vs cuDNN/FA2 for the kernels that pass, and the ring
# backward's compute for one rank of W = 2 / 4 (per-block calls vs one ring-mode launch). Predicted,
# backward alone at S = 4096-8192, d = 128: wgmma 0.5-0.7x the best SDPA backward, bulk_dq +5-10 % over it, ws
# +10-20 %, mma_sync 0.3x. Last, if time is left, bench_attention --backward (fwd+bwd through autograd).
# BP_PACK=1: call B reuses the build.
#   tar xJf .bp/core.tar.xz && MKERNEL_COMMIT=<hash> BP_PACK=1 BP_MAX_STEPS=120 JOBS=.ci/jobs/s27a.sh REAL_OUT=$OUT OUT=/tmp/devout TOTAL=560 bash .ci/gpu-dev
P="python3 -m pytest -q -rfE --tb=short -p no:cacheprovider --durations=5"
N=tests/attention/test_attention_backward_native.py
jx ws_smoke 40 20 "timeout 38 $P $N -k 'wgmma_ws and case5'"
jx bwd_tests 110 40 "timeout 108 $P $N -k 'not wgmma_ws'"
K=wgmma,wgmma_bulk_dq,mma_sync
if grep -q " passed" "$LOGS/ws_smoke.log" && ! grep -q "failed\|error" "$LOGS/ws_smoke.log"; then
  K=$K,wgmma_ws
  jx bwd_ws_tests 60 30 "timeout 58 $P $N -k 'wgmma_ws'"
fi
jx bwd_check 130 60 "timeout 128 python3 benchmarks/attention_bwd_check.py --seqs 4096,8192 --iters 10 --kernels $K --ring 2,4"
jx bwd_bench 80 60 "timeout 78 python3 benchmarks/bench_attention.py --backward --seqs 8192 --iters 10 --native-kernels $K"
