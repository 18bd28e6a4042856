# Next session, second call (prepared in session 51, not run): ring attention's hooked kernels keep the 24 MiB L2
# sections (session 51 moved only the plain non-causal kernels to 4 MiB, where the L2 hit rate rose from 77% to 88% at
# 4096 keys and the sustained forward +3.7%). The ring's fused launch and its ceiling walk the whole sequence's keys
# (W x the shard): at W = 2 / 4 with 4096-key shards 8-16k keys a head, K/V 4-8 MiB a head, so a 24 MiB section is
# 3-6 heads.
# Prediction: l2s4 vs base (both pinned) +0..+2% non-causal mha / gqa at W = 2, c-l2s4 vs c-base likewise; causal
# within +-1% (the claimed longest-first order, as the plain causal kernel, s51d); if either fused column gains >= 1%
# at both W, the hooked kernels' default follows the plain one.
#   tar xJf .bp/core.tar.xz && MKERNEL_DEV_BUILD=1 MKERNEL_COMMIT=<hash> BP_MAX_STEPS=200 JOBS=.ci/jobs/s52b.sh REAL_OUT=$OUT OUT=/tmp/devout TOTAL=<s> bash .ci/gpu-dev
B="python3 benchmarks/bench_ring_attention.py --timeout 80"
jx w2 90 40 "timeout 88 $B --world 2 --iters 20 --variants base,l2s4,c-base,c-l2s4"
jx w4 90 40 "timeout 88 $B --world 4 --iters 20 --variants base,l2s4,c-base,c-l2s4 --shapes mha_b4_h16,gqa_b1_h32_kv8"
