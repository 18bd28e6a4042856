# Session 49, call B (branch s49-cross-tile): variant 2492552 = 395400 + bit 21 (attn17, cross-tile overlap: a
# tile's last PV GEMM shares its turn with the next tile's first S GEMM, whose softmax runs under it; Q double-
# buffered, K 2 + V 3). Its tests (bit for bit 395400 on ragged / GQA / MQA / one-block / split-tail cases, the fp64
# reference), the dispatcher's variant tests, then the pinned bench at S = 4096 / 8192 / 16384 non-causal: 2492552
# beside 395400 (its base), the default (1738888 from 4096 keys) and cuDNN in one run.
# Prediction (NOTES attn16 "What is left"): most of the tile boundary's ~1 block per tile, ~+2..+3% over 395400 at
# 4096 (less the K 3 -> 2 cost, ~1%), +1..+1.5% at 8192, ~+0.5% at 16384; 4096 x cuDNN 0.955 -> ~0.975-0.985.
#   tar xJf .bp/core.tar.xz && MKERNEL_COMMIT=<hash> BP_MAX_STEPS=200 JOBS=.ci/jobs/s49b.sh REAL_OUT=$OUT OUT=/tmp/devout TOTAL=540 bash .ci/gpu-dev
P="python3 -m pytest -q -rfEx --tb=short -p no:cacheprovider --durations=3"
jx cross_tests 120 40 "timeout 115 $P -v tests/attention/test_cross_tile.py"
jx variants 60 20 "timeout 55 $P tests/attention/test_attention_engine.py -k 'default_is_the_documented or switch_reaches' tests/attention/test_lazy_rescale.py -k 'attn15_variant_matches_reference and 395400'"
jx bench_cross 150 60 "timeout 145 python3 benchmarks/bench_attention.py --variants 2492552,395400 --seqs 4096,8192,16384 --modes nc --skip-alt --iters 20"
