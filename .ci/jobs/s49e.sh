# Session 49, call E (branch s49-work): one lean call for what s49c / s49d carried (neither could start a machine; 674 s
# of device budget left). The cross-tile variants' tests (2492552, 6686856 bit for bit 395400), the pinned bench at
# S = 4096 / 8192 non-causal (predictions in .ci/jobs/s49d.sh), then the choice cache's GPU tests and the backward
# body's host pieces (prediction in .ci/jobs/s49a.sh).
#   tar xJf .bp/core.tar.xz && MKERNEL_COMMIT=<hash> BP_MAX_STEPS=200 JOBS=.ci/jobs/s49e.sh REAL_OUT=$OUT OUT=/tmp/devout TOTAL=<s> TAIL_LINES=12 bash .ci/gpu-dev
P="python3 -m pytest -q -rfEx --tb=short -p no:cacheprovider --durations=3"
jx cross_tests 90 30 "timeout 85 $P -v -x tests/attention/test_cross_tile.py"
jx bench_cross 100 50 "timeout 95 python3 benchmarks/bench_attention.py --variants 2492552,6686856,395400 --seqs 4096,8192 --modes nc --skip-alt --iters 15"
jx choice 45 20 "timeout 40 $P -v tests/attention/test_attention_engine.py -k 'choice or gradients or default_is_the_documented'"
jx bwd_host 45 25 "timeout 40 python3 benchmarks/attention_bwd_host.py --pieces --iters 25"
