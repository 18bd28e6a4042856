# Session 21, call F: mode 1's per-piece row gathers on the caller's stream (MKERNEL_MOE_HOOKS_ON_CALLER=1) with
# the finish at the join (MKERNEL_MOE_FINISH_AT_JOIN=1): the finish-at-join tests (5 cases), then the lean bench
# twice (candidates *_fj, *_fj_hc; phases p3_kl_fj, p1_kl_fj_hc).
#   tar xJf .bp/core.tar.xz && MKERNEL_COMMIT=<hash> JOBS=.ci/jobs/s21f.sh REAL_OUT=$OUT OUT=/tmp/devout TOTAL=300 bash .ci/gpu-dev
B="python3 benchmarks/bench_moe_ranks.py --world 2 --nodes 2 --emulate 50GB/s,3us --shapes seed_e256_top8_8k --iters 12 --lean --moe14"
M=tests/gpu/test_moe_ranks.py
P="python3 -m pytest -q -rfE --tb=short -p no:cacheprovider --durations=5"
jx fj 100 30 "timeout 98 $P $M -k finish_at_join"
jx bench 60 30 "timeout 58 $B"
jx bench2 60 30 "timeout 58 $B"
