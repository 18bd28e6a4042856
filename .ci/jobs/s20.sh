# Next session's first device jobs (session 19 left these; NOTES "Session 19, where it ends").
# From session 18's pack if .bp/ survived (~7 ninja steps), else a cold build with BP_PACK=1:
#   tar xJf .bp/core.tar.xz && MKERNEL_COMMIT=<hash> JOBS=.ci/jobs/s20.sh REAL_OUT=$OUT OUT=/tmp/devout TOTAL=400 bash .ci/gpu-dev
#   (carry [".whl", ".bp"]); cold: ... CALL=A TOTAL=588 BP_PACK=1 bash .ci/gpu-dev (carry ["build/core", ".whl"])
# 1. The pipelined combine's sum kernel now converts through comm::Elem (a refactor made after its
#    last GPU run; the same intrinsics): its tests again. 2. The bench, to see the dispatch modes
#    side by side once more (mode 1 won one run of three in session 19). 3. The fused core tests and
#    the demo, which no session-19 change should touch. The bench now also times mode 5 with its
#    landed-rows launch capped at 16 and 4 CTAs (MKERNEL_MOE_GATHER_SMS): does the eager 0.5 ms come
#    from its grid spinning beside the unstage copies?
B="python3 benchmarks/bench_moe_ranks.py --world 2 --nodes 2 --emulate 50GB/s,3us --shapes seed_e256_top8_8k --iters 8 --lean --moe14"
M=tests/gpu/test_moe_ranks.py
jx combine_tests 110 50 "timeout 108 python3 -m pytest -x -q -rA -p no:cacheprovider \"$M::test_moe_cuda_across_emulated_nodes[2]\" $M::test_moe_cuda_across_emulated_nodes_combine_variants \"$M::test_moe_cuda_across_emulated_nodes_copy_engine_exchange[4-4]\""
jx bench 26 14 "timeout 24 $B"
jx demo 90 40 "timeout 88 python3 -m mkernel demo --world 4 --nodes 2 --require-all"
