# Session 43, call C: the causal default flipped to 137352 (6280 + bit 17, the lazy O rescale; s43b: +2.0..+3.2% over
# 6280 at S = 4k-32k on an H100, 1.014-1.020x cuDNN to 16k, 0.984x at 32k). A header change: the attention kernels
# rebuild. Tests: the default is 137352 bit for bit (and not 6280), the causal forward against the fp64 reference, the
# claimed variants, the gradients through the default; then the default causal rows beside cuDNN.
#   tar xJf .bp/core.tar.xz && MKERNEL_DEV_BUILD=1 MKERNEL_COMMIT=<hash> JOBS=.ci/jobs/s43c.sh REAL_OUT=$OUT OUT=/tmp/devout TOTAL=200 bash .ci/gpu-dev
mps_stop
P="python3 -m pytest -q -rfE --tb=short -p no:cacheprovider --durations=3"
jx flip_tests 120 20 "timeout 118 $P tests/attention/test_attention_engine.py tests/attention/test_claimed_tiles.py tests/attention/test_lazy_rescale.py -k 'default_is or forward_matches or claimed or gradients_match'"
jx flip_bench 60 20 "timeout 58 python3 benchmarks/bench_attention.py --seqs 4096,16384,32768 --modes c --iters 10 --skip-alt --variants 6280"
