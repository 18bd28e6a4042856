# Session 20 call B: the MoE dispatch's default under CUDA-graph capture becomes mode 1 (same wire as
# mode 3; 0.92x the link replayed in every session-19/20 run) and MKERNEL_MOE_FIXED_STREAMS=1 (the
# exchange's send / receive / hooks streams from mkernel's own set, created together) as an opt-in.
# Prediction (NOTES "Session 20, fixed streams"): the default-path tests pass (the graph suite now runs
# mode 1); dispatch_only_graph ~1.28 ms (0.92x, was 1.50); with fixed streams the eager dispatch moves
# toward its graph replay: mode 3 1.50-1.60 ms, mode 1 1.30-1.45 (0.80-0.90x) if queue collisions
# are what the eager calls lose; within +-3 % of the pool's if they are not.
#   tar xJf .bp/core.tar.xz && MKERNEL_COMMIT=<hash> JOBS=.ci/jobs/s20b.sh REAL_OUT=$OUT OUT=/tmp/devout TOTAL=300 bash .ci/gpu-dev
B="python3 benchmarks/bench_moe_ranks.py --world 2 --nodes 2 --emulate 50GB/s,3us --shapes seed_e256_top8_8k --iters 8 --lean --moe14"
M=tests/gpu/test_moe_ranks.py
jx default_tests 130 60 "timeout 128 python3 -m pytest -x -q -rA -p no:cacheprovider \"$M::test_moe_cuda_across_emulated_nodes[2]\" \"$M::test_moe_cuda_across_emulated_nodes[w4n4]\""
jx bench 26 14 "timeout 24 $B"
jx fixed_tests 90 40 "MKERNEL_MOE_FIXED_STREAMS=1 timeout 88 python3 -m pytest -x -q -rA -p no:cacheprovider \"$M::test_moe_cuda_across_emulated_nodes[2]\" \"$M::test_moe_cuda_across_emulated_nodes_combine_variants[pipelined-fp32]\" \"$M::test_moe_cuda_across_emulated_nodes_moe14[w2n2-p1-kl-s16]\""
