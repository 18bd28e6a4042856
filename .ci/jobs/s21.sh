# Session 21 (branch retire20): the MoE dispatch with modes 2, 4 and 5 retired (moe_nodes.cpp, moe_net.cpp/h,
# kernels/moe/moe_net.cu: ~600 lines of code and tests removed; modes 0, 1, 3 unchanged). Every remaining
# mode's tests across nodes, the killed rank, then the lean bench. Merge into main iff every test passes and
# the bench's default / graph rows are within noise of session 20's (1.62-1.79 ms eager, 1.27-1.29 graph).
#   tar xJf .bp/core.tar.xz && MKERNEL_COMMIT=<hash> JOBS=.ci/jobs/s21.sh REAL_OUT=$OUT OUT=/tmp/devout TOTAL=420 bash .ci/gpu-dev
B="python3 benchmarks/bench_moe_ranks.py --world 2 --nodes 2 --emulate 50GB/s,3us --shapes seed_e256_top8_8k --iters 8 --lean --moe14"
M=tests/gpu/test_moe_ranks.py
P="python3 -m pytest -q -rfE --tb=short -p no:cacheprovider --durations=5"
jx moe_nodes 240 60 "timeout 238 $P $M -k 'across_emulated_nodes and not copy_engine_exchange_alone'"
jx killed 60 30 "timeout 58 $P \"$M::test_moe_killed_rank_fails_the_others_within_the_timeout\""
jx bench 26 14 "timeout 24 $B"
