# Session 20 call D: the MoE dispatch's defaults after calls B-C (mode 1 under capture; the graphed exchange and
# the fixed streams removed) and MKERNEL_MOE_OP_STREAM_PRIORITY=high in the bench; then a regression sweep of
# the single-GPU suites and the core multi-rank ones (no change of theirs since their last GPU runs; one call).
# Prediction (NOTES "Session 20"): every test passes; dispatch_only_hp within +-3 % of the default (the
# queue reading again) unless priority moves the caller-side work off the exchange's queues (then ~1.5 ms).
#   tar xJf .bp/core.tar.xz && MKERNEL_COMMIT=<hash> JOBS=.ci/jobs/s20d.sh REAL_OUT=$OUT OUT=/tmp/devout TOTAL=560 bash .ci/gpu-dev
B="python3 benchmarks/bench_moe_ranks.py --world 2 --nodes 2 --emulate 50GB/s,3us --shapes seed_e256_top8_8k --iters 8 --lean --moe14"
M=tests/gpu/test_moe_ranks.py
F=tests/gpu/test_fused_ops.py
R=tests/gpu/test_ring_attention.py
P="python3 -m pytest -q -rfE --tb=short -p no:cacheprovider --durations=8"
jx moe_defaults 80 40 "timeout 78 $P \"$M::test_moe_cuda_across_emulated_nodes[2]\" \"$M::test_moe_cuda_across_emulated_nodes[w4n4]\" \"$M::test_moe_cuda_graph_replay[2]\""
jx bench 26 14 "timeout 24 $B"
jx fused_core 150 60 "MKERNEL_OP_TIMEOUT=20 timeout 148 $P \"$F::test_ag_gemm[2]\" \"$F::test_ag_gemm[8]\" \"$F::test_reduce_ops[rs-4]\" \"$F::test_reduce_ops[ar-2]\" \"$F::test_reduce_ops[ar-8]\" \"$F::test_mlp_layers[2]\" \"$F::test_graph_replay[4]\" \"$F::test_mlp_compiled[compile-2]\""
jx attention 110 40 "timeout 108 $P tests/attention"
jx gemm 90 40 "timeout 88 $P tests/gemm"
jx ops 60 30 "timeout 58 $P tests/ops"
jx ring 50 30 "timeout 48 $P \"$R::test_ring_attention_matches_reference[4]\" \"$R::test_fused_ring_across_emulated_nodes[2]\""
