# Session 18 call G (NOTES "Session 18, moe15"): MKERNEL_MOE_OP_STREAM=1 (the dispatch and the combine
# across nodes on mkernel's own stream): its test (matrix, repeats, graph replay), then the lean bench with
# the knob, then without (the same build, back to back).
B="python3 benchmarks/bench_moe_ranks.py --world 2 --nodes 2 --emulate 50GB/s,3us --shapes seed_e256_top8_8k --iters 8 --lean --moe14"
jx opstream_test 22 14 'MKERNEL_MOE_OP_STREAM=1 timeout 20 python3 -m pytest -x -q -rA -p no:cacheprovider "tests/gpu/test_moe_ranks.py::test_moe_cuda_across_emulated_nodes_moe14[w2n2-p3-kl]"'
jx opstream_bench 16 12 "MKERNEL_MOE_OP_STREAM=1 timeout 15 $B"
jx opstream_base 16 12 "timeout 15 $B"
