# Session 21, call A (branch r21 = retire20 merged with main + mkernel.moe.MoEBuffer):
# 1. MoEBuffer's GPU tests (new): eager calls replaying captured graphs, bit for bit the ops'.
# 2. The lean bench with the buffer's rows beside the eager and graph rows (DeepEP's yardstick).
# 3. Every remaining dispatch mode's tests across nodes after modes 2/4/5 were retired, the killed rank.
# Merge into main iff 3 passes; the buffer lands iff 1 passes.
#   tar xJf .bp/core.tar.xz && MKERNEL_COMMIT=<hash> JOBS=.ci/jobs/s21.sh REAL_OUT=$OUT OUT=/tmp/devout TOTAL=560 bash .ci/gpu-dev
B="python3 benchmarks/bench_moe_ranks.py --world 2 --nodes 2 --emulate 50GB/s,3us --shapes seed_e256_top8_8k --iters 10 --lean --moe14"
M=tests/gpu/test_moe_ranks.py
P="python3 -m pytest -q -rfE --tb=short -p no:cacheprovider --durations=5"
jx buffer 120 40 "timeout 118 $P $M -k buffer"
jx bench 90 40 "timeout 88 $B"
jx moe_nodes 250 60 "timeout 248 $P $M -k 'across_emulated_nodes and not copy_engine_exchange_alone'"
jx killed 60 30 "timeout 58 $P \"$M::test_moe_killed_rank_fails_the_others_within_the_timeout\""
