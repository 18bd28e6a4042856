# Session 49, call C (branch s49-int = main + s49-choice-cache + s49-cross-tile): s49b's jobs, then s49a's (neither
# call could start a machine; one call carries both). Predictions in .ci/jobs/s49a.sh and s49b.sh.
#   tar xJf .bp/core.tar.xz && MKERNEL_COMMIT=<hash> BP_MAX_STEPS=200 JOBS=.ci/jobs/s49c.sh REAL_OUT=$OUT OUT=/tmp/devout TOTAL=585 TAIL_LINES=12 bash .ci/gpu-dev
P="python3 -m pytest -q -rfEx --tb=short -p no:cacheprovider --durations=3"
jx cross_tests 110 40 "timeout 105 $P -v tests/attention/test_cross_tile.py"
jx bench_cross 130 60 "timeout 125 python3 benchmarks/bench_attention.py --variants 2492552,395400 --seqs 4096,8192,16384 --modes nc --skip-alt --iters 20"
jx choice 50 20 "timeout 45 $P -v tests/attention/test_attention_engine.py -k 'choice or gradients or cuda_graph or default_is_the_documented or switch_reaches'"
jx bwd_host 50 25 "timeout 45 python3 benchmarks/attention_bwd_host.py --pieces --iters 30"
jx routing 50 20 "timeout 45 $P -v tests/attention/test_attention_backward_native.py -k 'autograd_through or backward_mode or native_mode or default_mode or auto_'"
jx graphs 120 40 "timeout 115 $P -v tests/gpu/test_moe_ranks.py tests/gpu/test_fused_ops.py -k 'graph_replay'"
