# Session 21, call G: the new defaults (mode 1 eagerly, the headed gather's finish at the join, mode 1's row
# gathers on the caller's stream). Every MoE test across emulated nodes (the previous stream placement pinned
# in its own test), the killed rank, the buffer and MoEMLP tests, then the lean bench (the session-20 default
# as candidate mkernel_dispatch_only_s20).
#   tar xJf .bp/core.tar.xz && MKERNEL_COMMIT=<hash> JOBS=.ci/jobs/s21g.sh REAL_OUT=$OUT OUT=/tmp/devout TOTAL=420 bash .ci/gpu-dev
B="python3 benchmarks/bench_moe_ranks.py --world 2 --nodes 2 --emulate 50GB/s,3us --shapes seed_e256_top8_8k --iters 12 --lean --moe14"
M=tests/gpu/test_moe_ranks.py
P="python3 -m pytest -q -rfE --tb=short -p no:cacheprovider --durations=5"
jx bench 60 30 "timeout 58 $B"
jx moe_nodes 220 60 "timeout 218 $P $M -k 'across_emulated_nodes and not copy_engine_exchange_alone'"
jx rest 90 30 "timeout 88 $P $M -k 'killed_rank or buffer or mlp_cuda'"
