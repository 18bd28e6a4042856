# Session 18 call C (NOTES "Session 18, moe15"): is the eager dispatch's main stream held behind the
# exchange's side streams in a shared hardware work queue (CUDA_DEVICE_MAX_CONNECTIONS, 8 by default)?
# The same lean moe14 bench twice in one run: the default environment, then 32 connections; then the
# default-path tests under 32 connections (a queue layout change must not deadlock anything).
B="python3 benchmarks/bench_moe_ranks.py --world 2 --nodes 2 --emulate 50GB/s,3us --shapes seed_e256_top8_8k --iters 8 --lean --moe14"
jx moe15_conn8 40 25 "timeout 38 $B"
jx moe15_conn32 40 25 "CUDA_DEVICE_MAX_CONNECTIONS=32 timeout 38 $B"
jx moe15_tests32 80 40 'CUDA_DEVICE_MAX_CONNECTIONS=32 timeout 78 python3 -m pytest -x -q -rA -p no:cacheprovider "tests/gpu/test_moe_ranks.py::test_moe_cuda_across_emulated_nodes_moe14[w2n2-p3-kl]" "tests/gpu/test_moe_ranks.py::test_moe_cuda_across_emulated_nodes[2]" "tests/gpu/test_moe_ranks.py::test_moe_cuda_across_emulated_nodes_moe14[w4n4-combine-early]"'
