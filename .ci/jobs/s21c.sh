# Session 21, call C: MoEBuffer with the combine's fast path (graphs keyed by y / handle / weights
# addresses, each keeping its handle alive) and MoEMLP(inference_max_tokens=...); its GPU tests, the
# MoE layer / graph tests, then the lean bench twice.
#   tar xJf .bp/core.tar.xz && MKERNEL_COMMIT=<hash> JOBS=.ci/jobs/s21c.sh REAL_OUT=$OUT OUT=/tmp/devout TOTAL=330 bash .ci/gpu-dev
B="python3 benchmarks/bench_moe_ranks.py --world 2 --nodes 2 --emulate 50GB/s,3us --shapes seed_e256_top8_8k --iters 12 --lean --moe14"
M=tests/gpu/test_moe_ranks.py
P="python3 -m pytest -q -rfE --tb=short -p no:cacheprovider --durations=5"
jx buffer 110 40 "timeout 108 $P $M -k buffer"
jx moe_layer 80 30 "timeout 78 $P $M -k 'graph_replay or test_moe_cuda_across_emulated_nodes[2]'"
jx bench 60 30 "timeout 58 $B"
jx bench2 60 30 "timeout 58 $B"
