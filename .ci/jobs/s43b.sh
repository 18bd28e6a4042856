# Session 43, call B. (1) The causal default's claimed mainloop with attn15's bits 17 / 18 (137352, 268424,
# 399496; attention_variants_claimed_lazy.cu): s43a put the causal forward at 0.968 / 0.949 / 0.977x cuDNN at
# S = 24k / 28k / 32k (0.996-0.998 at 16k / 20k) with the same L2 hit rate and DRAM bytes as cuDNN's kernel and its
# tensor pipe 71.1% vs 74.6% busy at 32k: a per-block cost that shows once cuDNN's tile boundaries thin out.
# Prediction: bit 17 (lazy rescale, -49 SASS instructions a block non-causal: +1..+2% there) gives +1..+3% at
# 16k-32k causal, i.e. 32k to ~0.99-1.0x cuDNN; bit 18 +0..+1%. Rule: a variant becomes the causal default if it
# is >= 1.005x 6280 at 16k and 32k and >= 0.995x at 4k and 8k, and its tests pass.
# (2) The eager autograd through ops._AttentionFunction (merged): the attention GPU tests.
#   tar xJf .bp/core.tar.xz && MKERNEL_DEV_BUILD=1 MKERNEL_COMMIT=<hash> JOBS=.ci/jobs/s43b.sh REAL_OUT=$OUT OUT=/tmp/devout TOTAL=330 bash .ci/gpu-dev
mps_stop
P="python3 -m pytest -q -rfE --tb=short -p no:cacheprovider --durations=3"
jx lazy_tests 120 20 "timeout 118 $P tests/attention/test_lazy_rescale.py -k 'claimed'"
jx cvar 140 20 "timeout 138 python3 benchmarks/bench_attention.py --seqs 4096,8192,16384,32768 --modes c --iters 10 --skip-alt --variants 137352,268424,399496"
jx attn_tests 120 20 "timeout 118 $P tests/attention/test_attention_engine.py tests/attention/test_attention_head_dims.py -k 'grad or lse or empty_batch or compile'"
