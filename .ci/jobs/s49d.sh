# Session 49, call D (branch s49-work = s49-int + bit 22 + a compile-time Q stage in the block walk): both cross-tile
# variants' tests, then the pinned bench at S = 4096 / 8192 / 16384 non-causal: 2492552 (Q double-buffered, K 2 + V 3;
# block loop 641 / 643 SASS instructions vs 395400's 631) and 6686856 (+ bit 22: one Q stage, K 3 + V 3, Q released in
# the tile's last block step, its load latency exposed at the boundary; loop 657) beside 395400, the default and cuDNN.
# Prediction: 2492552 +1..+2% over 395400 at 4096 (the boundary's ~3% less the loop's +1.6% instructions), ~0 at
# 8192 / 16384; 6686856 -1..+1% at 4096 (the boundary's saving less the exposed Q latency and +4% loop instructions),
# -1..-3% above.
#   tar xJf .bp/core.tar.xz && MKERNEL_COMMIT=<hash> BP_MAX_STEPS=200 JOBS=.ci/jobs/s49d.sh REAL_OUT=$OUT OUT=/tmp/devout TOTAL=585 TAIL_LINES=12 bash .ci/gpu-dev
P="python3 -m pytest -q -rfEx --tb=short -p no:cacheprovider --durations=3"
jx cross_tests 120 40 "timeout 115 $P -v tests/attention/test_cross_tile.py"
jx bench_cross 150 60 "timeout 145 python3 benchmarks/bench_attention.py --variants 2492552,6686856,395400 --seqs 4096,8192,16384 --modes nc --skip-alt --iters 20"
jx choice 50 20 "timeout 45 $P -v tests/attention/test_attention_engine.py -k 'choice or gradients or cuda_graph or default_is_the_documented or switch_reaches'"
jx bwd_host 50 25 "timeout 45 python3 benchmarks/attention_bwd_host.py --pieces --iters 30"
jx graphs 120 40 "timeout 115 $P -v tests/gpu/test_moe_ranks.py tests/gpu/test_fused_ops.py -k 'graph_replay'"
