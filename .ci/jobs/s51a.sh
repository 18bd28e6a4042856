# Session 51, call A: bit 25 (the tile mailbox: the producer's warp 2 decodes the static tiles and hands them to
# the consumers through shared memory) and the epilogue in pieces in the timeline builds (finalize, LSE, meet).
# s50b (H100, 395400's timeline at 4096 keys): gap 730, Q wait 243, first 2424, loop 2740 a block, last PV 775,
# epilogue 2076 cycles a tile; bit 24 moved the gap's divisions onto the epilogue's path (gap 136, epilogue +600).
# Predictions (before the run): tests bit for bit the bases. Timeline: 42338440 / 43681928 gap 730 -> 100-200
# cycles with the epilogue unchanged (~2080 / ~2090), the tile total -500..-650 cycles (-0.6..-0.7%). The epilogue
# pieces (8784008): finalize ~300-500, LSE ~100-200, meet: warpgroup 0 waits (its last PV is half a block ahead),
# warpgroup 1 ~0; the rest (conversion, stmatrix, fence, barrier, TMA) ~800-1000. Bench at 4096: 35293320 vs
# 1738888 +0.4..+0.8%, 33949832 vs 395400 the same; at 8192 half of that (half the tiles a key).
#   tar xJf .bp/core.tar.xz && MKERNEL_DEV_BUILD=1 BP_PACK=1 MKERNEL_COMMIT=<hash> BP_MAX_STEPS=200 JOBS=.ci/jobs/s51a.sh REAL_OUT=$OUT OUT=/tmp/devout TOTAL=<s> TAIL_LINES=20 bash .ci/gpu-dev
P="python3 -m pytest -q -rfEx --tb=short -p no:cacheprovider --durations=3"
jx mailbox_tests 100 40 "timeout 95 $P -x tests/attention/test_timeline.py -k '33949832 or 35293320 or 42338440 or 43681928 or 8784008'"
jx timeline 70 25 "timeout 65 python3 benchmarks/attention_timeline.py --kv-lens 2304,4096,9216 --variants 8784008,42338440,10127496,43681928"
jx bench_mailbox 70 30 "timeout 65 python3 benchmarks/bench_attention.py --variants 35293320,1738888,33949832,395400 --seqs 4096,8192 --modes nc --skip-alt --iters 20"
