# Session 22, call B: the combine's routes carried by the dispatch (topk_weights in the routing head,
# the layout kernel writing every rank's combine words; moe_combine given them skips its all_gather).
# 1. the new tests (carried weights at w2n2, w4n4, w4n2, w2n1), MoEMLP's CUDA test (it passes the weights
#    now), the buffer, the routing kernels' tests (route() reads the packed head with a stride);
# 2. the lean bench: mkernel_combine_carried (eager and graph) beside mkernel_combine, the weighted dispatch;
# 3. every MoE test across nodes (the head's area sizing changed).
# Rule: carried lands as MoEMLP's default iff 1 and 3 pass and the carried combine is bit-equal.
#   tar xJf .bp/core.tar.xz && MKERNEL_COMMIT=<hash> JOBS=.ci/jobs/s22b.sh REAL_OUT=$OUT OUT=/tmp/devout TOTAL=540 bash .ci/gpu-dev
B="python3 benchmarks/bench_moe_ranks.py --world 2 --nodes 2 --emulate 50GB/s,3us --shapes seed_e256_top8_8k --iters 12 --lean --moe14"
M=tests/gpu/test_moe_ranks.py
P="python3 -m pytest -q -rfE --tb=short -p no:cacheprovider --durations=5"
jx carried 150 40 "timeout 148 $P $M -k 'carried_weights or mlp_cuda or buffer'"
jx routing 60 20 "timeout 58 $P tests/gpu/test_moe_routing.py"
jx bench 70 30 "timeout 68 $B"
jx moe_nodes 220 60 "timeout 218 $P $M -k 'across_emulated_nodes and not copy_engine_exchange_alone'"
