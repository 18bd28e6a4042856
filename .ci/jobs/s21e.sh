# Session 21, call E: MKERNEL_MOE_FINISH_AT_JOIN=1 (opt-in): the headed dispatch's finish on the caller's
# stream at the join instead of ending the send stream. Its tests (mode 3 at W=2 over 2 and W=4 over 4, mode 1),
# the defaults' regression, then the lean bench twice (candidates *_fj and phases p3_kl_fj).
#   tar xJf .bp/core.tar.xz && MKERNEL_COMMIT=<hash> JOBS=.ci/jobs/s21e.sh REAL_OUT=$OUT OUT=/tmp/devout TOTAL=360 bash .ci/gpu-dev
B="python3 benchmarks/bench_moe_ranks.py --world 2 --nodes 2 --emulate 50GB/s,3us --shapes seed_e256_top8_8k --iters 12 --lean --moe14"
M=tests/gpu/test_moe_ranks.py
P="python3 -m pytest -q -rfE --tb=short -p no:cacheprovider --durations=5"
jx fj 90 30 "timeout 88 $P $M -k finish_at_join"
jx defaults 60 30 "timeout 58 $P $M -k 'test_moe_cuda_across_emulated_nodes[2] or nodes2-dispatch'"
jx bench 60 30 "timeout 58 $B"
jx bench2 60 30 "timeout 58 $B"
