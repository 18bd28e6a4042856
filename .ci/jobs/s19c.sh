# Session 19 calls C and D: moe17, the combine across nodes pipelined (partials made straight into the
# (call C hung at the first pipelined combine: both ranks at the peers' DONE, the sum kernel's lazy load
# after the send stream's finish; call D preloads it.)
# send area piece by piece, each piece's rows summed from the receive area as it lands; bf16
# partials by default there). Prediction (NOTES "Session 19, moe17"): combine 1.55-1.85 ms
# (0.63-0.76x the link; call B: 3.391 ms default fp32 sequence, 2.304 ms reduce16 sequence),
# seq16 equal bits to the default, fp32 pipelined equal bits to seq32 and ~2.7-2.9 ms.
#   tar xJf .bp/core.tar.xz && MKERNEL_COMMIT=<hash> JOBS=.ci/jobs/s19c.sh REAL_OUT=$OUT OUT=/tmp/devout TOTAL=420 bash .ci/gpu-dev
B="python3 benchmarks/bench_moe_ranks.py --world 2 --nodes 2 --emulate 50GB/s,3us --shapes seed_e256_top8_8k --iters 8 --lean --moe14"
M=tests/gpu/test_moe_ranks.py
jx combine_tests 120 50 "timeout 118 python3 -m pytest -x -q -rA -p no:cacheprovider \"$M::test_moe_cuda_across_emulated_nodes[2]\" $M::test_moe_cuda_across_emulated_nodes_combine_variants \"$M::test_moe_cuda_across_emulated_nodes_copy_engine_exchange[4-4]\""
if grep -q "job combine_tests: rc=0" "$summary"; then
  jx bench 30 16 "timeout 28 $B"
  jx defaults 150 60 "timeout 148 python3 -m pytest -q -rA -p no:cacheprovider $M -k \"test_moe_cuda_across_emulated_nodes and not moe14 and not pipelined and not combine_variants\" \"$M::test_moe_killed_rank_fails_the_others_within_the_timeout\""
else  # the lazy-load reading: with every module loaded at start the same test passes
  jx eager 45 30 "CUDA_MODULE_LOADING=EAGER timeout 43 python3 -m pytest -x -q -rA -p no:cacheprovider \"$M::test_moe_cuda_across_emulated_nodes[2]\""
  jx sequence 45 30 "MKERNEL_MOE_COMBINE_PIPELINE=0 timeout 43 python3 -m pytest -x -q -rA -p no:cacheprovider \"$M::test_moe_cuda_across_emulated_nodes[2]\""
fi
