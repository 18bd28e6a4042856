# Session 19 call F: moe18 (MKERNEL_MOE_DISPATCH_PIPELINE=5: mode 3's exchange releasing a device
# word per landed piece from its next wait launch, the other ranks' rows gathered by one launch as
# they land) and the killed-rank tests across 2 emulated nodes (dispatch; the pipelined combine).
# Prediction (NOTES "Session 19, moe18"): p5 tests pass; dispatch only eager 1.35-1.50 ms
# (0.78-0.87x; mode 3 ~1.6), graph 1.25-1.35 (mode 1's 1.27). If p5 is slow like mode 4 (~2 ms),
# gather_landed is what makes mode 4 slow.
#   tar xJf .bp/core.tar.xz && MKERNEL_COMMIT=<hash> JOBS=.ci/jobs/s19e.sh REAL_OUT=$OUT OUT=/tmp/devout TOTAL=220 bash .ci/gpu-dev
B="python3 benchmarks/bench_moe_ranks.py --world 2 --nodes 2 --emulate 50GB/s,3us --shapes seed_e256_top8_8k --iters 8 --lean --moe14"
M=tests/gpu/test_moe_ranks.py
T="$M::test_moe_cuda_across_emulated_nodes_moe14"
jx p5_tests 60 30 "timeout 58 python3 -m pytest -x -q -rA -p no:cacheprovider \"$T[w2n2-p5-kl]\" \"$T[w2n2-p5-kl-sync]\" \"$T[w2n2-p5]\" \"$T[w4n4-p5-kl]\""
grep -q "job p5_tests: rc=0" "$summary" || export BENCH_MOE14_DROP=p5
jx bench 26 14 "timeout 24 $B"
jx kill_tests 70 40 "timeout 68 python3 -m pytest -q -rA -p no:cacheprovider \"$M::test_moe_killed_rank_fails_the_others_within_the_timeout\""
