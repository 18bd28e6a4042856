# Session 36+, call D (prepared in session 35 on branch bwd-dq-warp, not run; no device was lent in session 35):
# the native backward's wgmma_ws_dqwarp kernel — FA3's step order (dV, then dQ once both dS are in shared memory,
# then dK, dQ's partial stored while dK's GEMM runs), a producer warp issuing dQ's bulk reduce-adds (named-barrier
# handshake per warpgroup and staging buffer), causal CTAs longest first in L2-sized sections of heads
# (bwd_tile_coord; MKERNEL_ATTN_BWD_TILE_ORDER=grid pins the old order). Also: wgmma_ws is the native default now.
# csrc changed: the backward TUs (5), attention_backward.cpp, env_knobs.cpp: BP_PACK=1 (~10 steps).
# Local ptxas (nvcc 13, sm_90a): the consumers spill nothing; the 24-register producer code 40-56 bytes at d = 128
# (wgmma_ws: 32-48), 108-168 at d = 64 (wgmma_ws: 92-108) — in the loader's loop, as before.
# Prediction (backward alone, S = 4096 / 8192, d = 128, H100): wgmma_ws_dqwarp 1.04-1.08x wgmma_ws non-causal
# (dQ's staging and its two warpgroup barriers off the tensor cores' path), 1.06-1.12x causal (+ the order: a
# list-scheduling model of the grid gives 1.03x at b = 2, S = 8192 / b = 4, S = 4096); ws_dqwarp:grid isolates the
# order. vs best SDPA: 0.85 -> ~0.90.
#   tar xJf .bp/core.tar.xz && MKERNEL_COMMIT=<hash> BP_PACK=1 JOBS=.ci/jobs/s35d.sh REAL_OUT=$OUT OUT=/tmp/devout TOTAL=560 bash .ci/gpu-dev
P="python3 -m pytest -q -rfE --tb=short -p no:cacheprovider --durations=3"
# A handshake bug hangs: one small case first, 40 s.
jx dqwarp_smoke 40 20 "timeout 38 $P tests/attention/test_attention_backward_native.py -k 'dqwarp and matches_float64 and case6-dtype0'"
jx bwd_tests 240 60 "timeout 238 $P tests/attention/test_attention_backward_native.py -k 'wgmma_ws or dqwarp or through_the_native or refuse or meta'"
jx bwd_check 100 40 "timeout 98 python3 benchmarks/attention_bwd_check.py --seqs 4096,8192 --iters 10 --kernels wgmma_ws,wgmma_ws_dqwarp --ring 2,4"
jx bwd_bench 200 60 "timeout 198 python3 benchmarks/bench_attention.py --backward --seqs 4096,8192 --iters 10 --native-kernels wgmma,wgmma_ws,wgmma_ws_dqwarp,wgmma_ws_dqwarp:grid"
