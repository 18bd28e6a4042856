# Session 19 call E: moe17's routes decoded inside the partials' kernel (one pack launch + the
# all_gather instead of ~22 ATen launches before the exchange), combine piece counts 8 / 4 beside
# 16, and the demo with all five ops (MoE dispatch + combine, ring attention) on the GPU.
# Prediction (NOTES "Session 19, moe17"): combine eager 1.80-1.95 ms (call D 2.025), the graph
# replay unchanged ~1.49; pc8 within +-0.05 ms of pc16.
#   tar xJf .bp/core.tar.xz && MKERNEL_COMMIT=<hash> JOBS=.ci/jobs/s19d.sh REAL_OUT=$OUT OUT=/tmp/devout TOTAL=480 bash .ci/gpu-dev
B="python3 benchmarks/bench_moe_ranks.py --world 2 --nodes 2 --emulate 50GB/s,3us --shapes seed_e256_top8_8k --iters 8 --lean --moe14"
M=tests/gpu/test_moe_ranks.py
jx combine_tests 110 50 "timeout 108 python3 -m pytest -x -q -rA -p no:cacheprovider \"$M::test_moe_cuda_across_emulated_nodes[2]\" $M::test_moe_cuda_across_emulated_nodes_combine_variants \"$M::test_moe_cuda_across_emulated_nodes_copy_engine_exchange[4-4]\" \"$M::test_moe_cuda_across_emulated_nodes_narrow_partials[2]\""
jx bench 30 16 "timeout 28 $B"
jx demo_w4n2 90 40 "timeout 88 python3 -m mkernel demo --world 4 --nodes 2 --require-all"
jx demo_w2n2 90 40 "timeout 88 python3 -m mkernel demo --world 2 --nodes 2 --require-all"
jx defaults 140 70 "timeout 138 python3 -m pytest -q -rA -p no:cacheprovider $M -k \"test_moe_cuda_across_emulated_nodes and not moe14 and not pipelined and not combine_variants\""
