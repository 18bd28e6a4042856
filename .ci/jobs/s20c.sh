# Session 20 call C: MKERNEL_MOE_EXCHANGE_GRAPH=1 (opt-in): the headed gather's send and receive
# sequences captured once as two CUDA graphs and replayed at every eager call, copies re-pointed.
# Prediction (NOTES "Session 20, the exchange as graphs"): tests pass; eager dispatch only mode 1
# 1.30-1.45 ms (0.80-0.90x the link; was 1.60), mode 3 1.50-1.60 (was 1.68-1.79); if the host's issue is
# not what the eager calls lose, within +-3 % of the same modes without graphs.
#   tar xJf .bp/core.tar.xz && MKERNEL_COMMIT=<hash> JOBS=.ci/jobs/s20c.sh REAL_OUT=$OUT OUT=/tmp/devout TOTAL=300 bash .ci/gpu-dev
B="python3 benchmarks/bench_moe_ranks.py --world 2 --nodes 2 --emulate 50GB/s,3us --shapes seed_e256_top8_8k --iters 8 --lean --moe14"
M=tests/gpu/test_moe_ranks.py
jx xg_tests 150 60 "MKERNEL_MOE_EXCHANGE_GRAPH=1 timeout 148 python3 -m pytest -x -q -rA -p no:cacheprovider \"$M::test_moe_cuda_across_emulated_nodes[2]\" \"$M::test_moe_cuda_across_emulated_nodes_moe14[w2n2-p1-kl-s16]\" \"$M::test_moe_cuda_across_emulated_nodes_moe14[w2n2-p3-kl-sync]\" \"$M::test_moe_cuda_across_emulated_nodes[w4n4]\""
jx bench 26 14 "timeout 24 $B"
